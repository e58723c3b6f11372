"""LeaveGroup (key 13), v0-3.

Removes members from a group, which then rebalances without them. v0-2
name one member; its error is the answer's error. v3 takes a batch of
members, each by member id or, with an empty member id, by
``group_instance_id`` (how static members are removed administratively),
and answers per member; the top-level error is then about the group only
(COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, INVALID_GROUP_ID).
A group that does not exist answers UNKNOWN_MEMBER_ID per member.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, may_group
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.messages import LeaveResult, MemberIdentity
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import LEAVE_GROUP
from eventplatform.log.protocol.schema import Versions

API = LEAVE_GROUP
VERSIONS = Versions.parse("0-3")
FIRST_BATCH_VERSION = 3


async def handle(context: RequestContext, request: Body) -> Body:
    batch = context.version >= FIRST_BATCH_VERSION
    if batch:
        leaving = [
            MemberIdentity(member["member_id"], member["group_instance_id"])
            for member in request["members"]
        ]
    else:
        leaving = [MemberIdentity(request["member_id"])]
    coordinator = context.broker.groups
    if not may_group(context, AclOperation.READ, request["group_id"]):
        await trio.lowlevel.checkpoint()
        result = LeaveResult(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    elif coordinator is None:
        await trio.lowlevel.checkpoint()
        result = LeaveResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    else:
        result = await coordinator.leave_group(request["group_id"], leaving)
    if not batch:
        return {"throttle_time_ms": 0, "error_code": _single_member_error(result)}
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "members": [
            {
                "member_id": identity.member_id,
                "group_instance_id": identity.group_instance_id,
                "error_code": error,
            }
            for identity, error in result.members
        ],
    }


def _single_member_error(result: LeaveResult) -> ErrorCode:
    if result.error is not ErrorCode.NONE:
        return result.error
    for _, error in result.members:
        if error is not ErrorCode.NONE:
            return error
    return ErrorCode.NONE
