"""SyncGroup (key 14), v0-3.

The leader sends every member's assignment; the coordinator stores the
group (members, generation, assignments) in ``__consumer_offsets`` and
answers each member with its own assignment. Followers' answers wait for
the leader's, at most until the rebalance timeout, after which members that
never synced are removed and the others get REBALANCE_IN_PROGRESS. In a
Stable group any member gets its current assignment at once. v3 adds
``group_instance_id``. Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS (also while the coordinator
loads, so the member rejoins), COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, may_group
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.group import SyncResult
from eventplatform.log.groups.messages import SyncRequest
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import SYNC_GROUP
from eventplatform.log.protocol.schema import Versions

API = SYNC_GROUP
VERSIONS = Versions.parse("0-3")


async def handle(context: RequestContext, request: Body) -> Body:
    sync = SyncRequest(
        group_id=request["group_id"],
        generation_id=request["generation_id"],
        member_id=request["member_id"],
        group_instance_id=request["group_instance_id"],
        protocol_type=request["protocol_type"],
        protocol_name=request["protocol_name"],
        assignments={
            entry["member_id"]: bytes(entry["assignment"]) for entry in request["assignments"]
        },
    )
    coordinator = context.broker.groups
    if not may_group(context, AclOperation.READ, sync.group_id):
        await trio.lowlevel.checkpoint()
        result = SyncResult(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    elif coordinator is None:
        await trio.lowlevel.checkpoint()
        result = SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    else:
        result = await coordinator.sync_group(sync)
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }
