"""JoinGroup (key 11), v0-5.

Joins a member to a group of the classic protocol (see
``eventplatform.log.groups.core``). The answer is held until the rebalance
completes: every known member has rejoined, or the rebalance timeout
(``rebalance_timeout_ms``, v1+; the session timeout in v0) has passed, or,
for a group that was Empty, ``group.initial.rebalance.delay.ms`` has
passed. From v4 a dynamic member's first join (empty member id) is answered
MEMBER_ID_REQUIRED with its new member id, and it joins again with it. v5
adds ``group_instance_id`` (static membership). The leader's answer lists
every member with its metadata for the selected protocol; followers get an
empty list. Errors: INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT,
INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
GROUP_MAX_SIZE_REACHED, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, may_group
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.group import JoinResult, unique_protocols
from eventplatform.log.groups.messages import JoinRequest
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import JOIN_GROUP
from eventplatform.log.protocol.schema import Versions

API = JOIN_GROUP
VERSIONS = Versions.parse("0-5")
FIRST_VERSION_REQUIRING_MEMBER_ID = 4


async def handle(context: RequestContext, request: Body) -> Body:
    version = context.version
    session_timeout_ms = request["session_timeout_ms"]
    rebalance_timeout_ms = request["rebalance_timeout_ms"] if version >= 1 else session_timeout_ms
    join = JoinRequest(
        group_id=request["group_id"],
        member_id=request["member_id"],
        group_instance_id=request["group_instance_id"],
        client_id=context.header.client_id or "",
        client_host=f"/{context.client_host}",
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        protocol_type=request["protocol_type"],
        protocols=unique_protocols(
            [(protocol["name"], protocol["metadata"]) for protocol in request["protocols"]]
        ),
        require_known_member_id=version >= FIRST_VERSION_REQUIRING_MEMBER_ID,
    )
    coordinator = context.broker.groups
    if not may_group(context, AclOperation.READ, join.group_id):
        await trio.lowlevel.checkpoint()
        result = JoinResult(ErrorCode.GROUP_AUTHORIZATION_FAILED, join.member_id)
    elif coordinator is None:
        await trio.lowlevel.checkpoint()
        result = JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, join.member_id)
    else:
        result = await coordinator.join_group(join)
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name or "",
        "leader": result.leader_id,
        "member_id": result.member_id,
        "members": [
            {
                "member_id": member.member_id,
                "group_instance_id": member.group_instance_id,
                "metadata": member.metadata,
            }
            for member in result.members
        ],
    }
