"""ShareGroupHeartbeat (key 76), v1: a share group's members join, stay and leave.

Answered by the group's coordinator (:mod:`~eventplatform.log.groups.share_coordinator`):
the member's epoch, the heartbeat interval, and its partitions whenever they
changed since it was last told (topics by id; null otherwise). Needs READ on
the group; topics the member may not describe are left out of its
subscription, as Kafka leaves them out of the assignment.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize, may_group
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.share_group import ShareHeartbeat
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import SHARE_GROUP_HEARTBEAT
from eventplatform.log.protocol.schema import Versions

API = SHARE_GROUP_HEARTBEAT
VERSIONS = Versions.parse("1")


async def handle(context: RequestContext, request: Body) -> Body:
    coordinator = context.broker.groups
    group_id = request["group_id"]
    answer: Body = {"throttle_time_ms": 0, "member_epoch": 0, "assignment": None}
    if not may_group(context, AclOperation.READ, group_id):
        await trio.lowlevel.checkpoint()
        return {**answer, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if coordinator is None:
        await trio.lowlevel.checkpoint()
        return {**answer, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    subscribed = request["subscribed_topic_names"]
    if subscribed is not None:
        subscribed = tuple(
            name
            for name in subscribed
            if authorize(context, AclOperation.DESCRIBE, AclResourceType.TOPIC, name)
        )
    result = await coordinator.shares.heartbeat(
        ShareHeartbeat(
            group_id,
            request["member_id"],
            request["member_epoch"],
            request["rack_id"],
            subscribed,
            context.header.client_id or "",
            f"/{context.client_host}",
        )
    )
    settings = coordinator.shares.settings(group_id)
    assignment = None
    if result.assignment is not None:
        topics = context.broker.topics
        assignment = {
            "topic_partitions": [
                {"topic_id": topic.topic_id, "partitions": list(partitions)}
                for name, partitions in sorted(result.assignment.items())
                if (topic := topics.get(name)) is not None
            ]
        }
    return {
        "throttle_time_ms": 0,
        "error_code": result.error,
        "error_message": result.message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval_ms": settings.heartbeat_interval_ms,
        "assignment": assignment,
    }
