"""OffsetDelete (key 47), v0.

Deletes a group's committed offsets for partitions of topics no member of
the group subscribes to (KIP-496), durably, through tombstones in
``__consumer_offsets``. A partition of a topic the cluster does not have
gets UNKNOWN_TOPIC_OR_PARTITION; the coordinator answers the rest
(:meth:`GroupAdmin.delete_offsets`): the group error GROUP_ID_NOT_FOUND,
NON_EMPTY_GROUP (an active group whose subscriptions are unknown),
COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE,
and per partition GROUP_SUBSCRIBED_TO_TOPIC for a topic still subscribed.
Partitions are answered only when the group error is NONE, as in Kafka.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, may_group, topic_permission
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.records import TopicPartition
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import OFFSET_DELETE
from eventplatform.log.protocol.schema import Versions

API = OFFSET_DELETE
VERSIONS = Versions.parse("0")


async def handle(context: RequestContext, request: Body) -> Body:
    broker = context.broker
    errors: dict[TopicPartition, ErrorCode] = {}
    known: list[TopicPartition] = []
    if not may_group(context, AclOperation.DELETE, request["group_id"]):
        await trio.lowlevel.checkpoint()
        return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "throttle_time_ms": 0}
    readable = topic_permission(context, AclOperation.READ)
    for topic_entry in request["topics"]:
        topic = broker.topics.get(topic_entry["name"])
        allowed = readable(topic_entry["name"])
        for entry in topic_entry["partitions"]:
            partition = TopicPartition(topic_entry["name"], entry["partition_index"])
            if not allowed:
                errors[partition] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= partition.partition < len(topic.partitions):
                errors[partition] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known.append(partition)
    coordinator = broker.groups
    if coordinator is None:
        await trio.lowlevel.checkpoint()
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "throttle_time_ms": 0}
    group_error, deleted = await coordinator.delete_offsets(request["group_id"], known)
    if group_error is not ErrorCode.NONE:
        return {"error_code": group_error, "throttle_time_ms": 0, "topics": []}
    errors.update(deleted)
    return {
        "error_code": ErrorCode.NONE,
        "throttle_time_ms": 0,
        "topics": _answers(request, errors),
    }


def _answers(request: Body, errors: dict[TopicPartition, ErrorCode]) -> list[Body]:
    """Each requested partition's error, in the request's order."""
    answers = []
    for topic in request["topics"]:
        name = topic["name"]
        partitions = [
            {"partition_index": index, "error_code": errors[TopicPartition(name, index)]}
            for index in (entry["partition_index"] for entry in topic["partitions"])
        ]
        answers.append({"name": name, "partitions": partitions})
    return answers
