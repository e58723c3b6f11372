"""ShareGroupDescribe (key 77), v1: a share group's epoch, members and assignment.

Each group needs DESCRIBE on it (GROUP_AUTHORIZATION_FAILED otherwise); a
group this coordinator does not know is GROUP_ID_NOT_FOUND, one it does not
coordinate NOT_COORDINATOR.
"""

from __future__ import annotations

from eventplatform.log.broker.authorizer import AclOperation, may_group
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.share_group import ASSIGNOR_NAME
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import SHARE_GROUP_DESCRIBE
from eventplatform.log.protocol.schema import Versions

API = SHARE_GROUP_DESCRIBE
VERSIONS = Versions.parse("1")


async def handle(context: RequestContext, request: Body) -> Body:
    groups = []
    for group_id in request["group_ids"]:
        entry: Body = {"group_id": group_id, "group_state": "", "assignor_name": ""}
        if not may_group(context, AclOperation.DESCRIBE, group_id):
            groups.append({**entry, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED})
            continue
        if context.broker.groups is None:
            groups.append({**entry, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE})
            continue
        error, group = await context.broker.groups.shares.describe(group_id)
        if group is None:
            groups.append({**entry, "error_code": error})
            continue
        topics = context.broker.topics
        members = []
        for member in group.members.values():
            assigned = [
                {"topic_id": topic.topic_id, "topic_name": name, "partitions": list(parts)}
                for name, parts in sorted(member.assignment.items())
                if (topic := topics.get(name)) is not None
            ]
            members.append(
                {
                    "member_id": member.member_id,
                    "rack_id": member.rack_id,
                    "member_epoch": member.member_epoch,
                    "client_id": member.client_id,
                    "client_host": member.client_host,
                    "subscribed_topic_names": list(member.subscribed),
                    "assignment": {"topic_partitions": assigned},
                }
            )
        groups.append(
            {
                **entry,
                "error_code": ErrorCode.NONE,
                "group_state": group.state,
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": ASSIGNOR_NAME,
                "members": members,
            }
        )
    return {"throttle_time_ms": 0, "groups": groups}
