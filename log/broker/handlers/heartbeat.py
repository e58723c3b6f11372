"""Heartbeat (key 12), v0-3.

Keeps a member's session alive. Answers NONE in Stable and
CompletingRebalance, REBALANCE_IN_PROGRESS while the group prepares a
rebalance (the member must rejoin), ILLEGAL_GENERATION for another
generation, UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID (v3 adds
``group_instance_id``) for a member the group does not know. While the
coordinator loads its state the answer is NONE, as in Kafka.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, may_group
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import HEARTBEAT
from eventplatform.log.protocol.schema import Versions

API = HEARTBEAT
VERSIONS = Versions.parse("0-3")


async def handle(context: RequestContext, request: Body) -> Body:
    coordinator = context.broker.groups
    if not may_group(context, AclOperation.READ, request["group_id"]):
        await trio.lowlevel.checkpoint()
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif coordinator is None:
        await trio.lowlevel.checkpoint()
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        error = await coordinator.heartbeat(
            request["group_id"],
            request["member_id"],
            request["group_instance_id"],
            request["generation_id"],
        )
    return {"throttle_time_ms": 0, "error_code": error}
