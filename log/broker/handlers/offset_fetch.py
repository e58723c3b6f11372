"""OffsetFetch (key 9), v1-7.

Returns a group's committed offsets, whatever the group's state (a group
may use the broker for offsets only). A partition without a commit gets
offset -1 and empty metadata. From v2 a null topic list means every offset
the group has, and group-level errors (COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE) are the top-level ``error_code`` with no topics;
v1 repeats them on every requested partition. v5 adds the committed leader
epoch, v6 is flexible. From v7 a client may ``require_stable`` offsets (KIP-447,
what read_committed consumers ask): a partition whose offset a transaction has
committed and whose marker has not come yet answers UNSTABLE_OFFSET_COMMIT, and the
client asks again.
"""

from __future__ import annotations

from typing import Any

import trio

from eventplatform.log.broker.authorizer import AclOperation, may_group, topic_permission
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.records import NO_LEADER_EPOCH, CommittedOffset, TopicPartition
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import OFFSET_FETCH
from eventplatform.log.protocol.schema import Versions

API = OFFSET_FETCH
VERSIONS = Versions.parse("1-7")
REQUIRE_STABLE_VERSION = 7
FIRST_TOP_LEVEL_ERROR_VERSION = 2
NO_OFFSET = -1


async def handle(context: RequestContext, request: Body) -> Body:
    topics = request["topics"]
    partitions = (
        None
        if topics is None
        else [
            TopicPartition(topic["name"], index)
            for topic in topics
            for index in topic["partition_indexes"]
        ]
    )
    coordinator = context.broker.groups
    offsets: dict[TopicPartition, CommittedOffset | None]
    if not may_group(context, AclOperation.DESCRIBE, request["group_id"]):
        await trio.lowlevel.checkpoint()
        error, offsets = ErrorCode.GROUP_AUTHORIZATION_FAILED, {}
    elif coordinator is None:
        await trio.lowlevel.checkpoint()
        error, offsets = ErrorCode.COORDINATOR_NOT_AVAILABLE, {}
    else:
        error, offsets = await coordinator.fetch_offsets(request["group_id"], partitions)
    if error is not ErrorCode.NONE:
        if context.version >= FIRST_TOP_LEVEL_ERROR_VERSION:
            return {"throttle_time_ms": 0, "error_code": error, "topics": []}
        offsets = dict.fromkeys(partitions or [])
    unstable: set[TopicPartition] = set()
    stable_only = context.version >= REQUIRE_STABLE_VERSION and request["require_stable"]
    if coordinator is not None and stable_only:
        unstable = coordinator.unstable_offsets(request["group_id"], list(offsets))
    readable = topic_permission(context, AclOperation.DESCRIBE)
    answer = _by_topic(
        {tp: o for tp, o in offsets.items() if partitions is not None or readable(tp.topic)},
        error,
    )
    for topic_answer in answer:
        for entry in topic_answer["partitions"]:
            if TopicPartition(topic_answer["name"], entry["partition_index"]) in unstable:
                entry.update(
                    committed_offset=NO_OFFSET, error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT
                )
        if not readable(topic_answer["name"]):
            for entry in topic_answer["partitions"]:
                entry.update(
                    committed_offset=NO_OFFSET,
                    committed_leader_epoch=NO_LEADER_EPOCH,
                    metadata="",
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                )
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "topics": answer}


def _by_topic(
    offsets: dict[TopicPartition, CommittedOffset | None], error: ErrorCode
) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for partition, committed in offsets.items():
        topics.setdefault(partition.topic, []).append(
            {
                "partition_index": partition.partition,
                "committed_offset": NO_OFFSET if committed is None else committed.offset,
                "committed_leader_epoch": (
                    NO_LEADER_EPOCH if committed is None else committed.leader_epoch
                ),
                "metadata": "" if committed is None else committed.metadata,
                "error_code": error,
            }
        )
    return [{"name": name, "partitions": entries} for name, entries in topics.items()]
