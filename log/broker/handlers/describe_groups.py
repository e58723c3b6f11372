"""DescribeGroups (key 15), v0-4.

Describes each named group: state (Kafka's names: Empty,
PreparingRebalance, CompletingRebalance, Stable, Dead), protocol type, and
its members with client id and host. The selected protocol and each
member's metadata and assignment are filled in only when the group is
Stable, as in Kafka. A group that does not exist is reported Dead with no
error. v3 adds authorized operations (from :mod:`..authorizer`, when asked
for), v4 members' ``group_instance_id``.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import (
    OPERATIONS_NOT_REQUESTED,
    AclOperation,
    AclResourceType,
    authorized_operations,
    may_group,
)
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.messages import GroupDescription
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DESCRIBE_GROUPS
from eventplatform.log.protocol.schema import Versions

API = DESCRIBE_GROUPS
VERSIONS = Versions.parse("0-4")


async def handle(context: RequestContext, request: Body) -> Body:
    group_ids = list(request["groups"])
    permitted = [g for g in group_ids if may_group(context, AclOperation.DESCRIBE, g)]
    coordinator = context.broker.groups
    found: dict[str, Body] = {
        g: _error(g, ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in group_ids if g not in permitted
    }
    if coordinator is None or not permitted:
        await trio.lowlevel.checkpoint()
        found.update({g: _error(g, ErrorCode.COORDINATOR_NOT_AVAILABLE) for g in permitted})
    else:
        for group_id, (error, description) in zip(
            permitted, await coordinator.describe_groups(permitted), strict=True
        ):
            found[group_id] = _error(group_id, error) if error else _describe(description)
    answers = [dict(found[group_id]) for group_id in group_ids]
    requested = bool(request["include_authorized_operations"])
    for answer in answers:
        answer["authorized_operations"] = (
            OPERATIONS_NOT_REQUESTED
            if answer["error_code"]
            else authorized_operations(
                context, AclResourceType.GROUP, answer["group_id"], requested=requested
            )
        )
    return {"throttle_time_ms": 0, "groups": answers}


def _error(group_id: str, error: ErrorCode) -> Body:
    return {
        "error_code": error,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }


def _describe(description: GroupDescription) -> Body:
    return {
        "error_code": ErrorCode.NONE,
        "group_id": description.group_id,
        "group_state": str(description.state),
        "protocol_type": description.protocol_type,
        "protocol_data": description.protocol,
        "members": [
            {
                "member_id": member.member_id,
                "group_instance_id": member.group_instance_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "member_metadata": member.metadata,
                "member_assignment": member.assignment,
            }
            for member in description.members
        ],
    }
