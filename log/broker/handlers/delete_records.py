"""DeleteRecords (key 21), v0-1.

Moves a partition's log start offset forward to ``offset`` (-1: the high
watermark); segments wholly below it go at the next retention pass, and
reads below it answer OFFSET_OUT_OF_RANGE at once. An offset past the high
watermark is OFFSET_OUT_OF_RANGE. The answer carries the new low watermark.
Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere, whether
or not this broker holds a replica); a partition the cluster does not have is
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, topic_permission
from eventplatform.log.broker.context import Body, RequestContext, answer_partitions
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DELETE_RECORDS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.partition import Partition

API = DELETE_RECORDS
VERSIONS = Versions.parse("0-1")
HIGH_WATERMARK = -1


async def handle(context: RequestContext, request: Body) -> Body:
    topics = answer_partitions(
        context,
        request["topics"],
        _answer,
        allowed=topic_permission(context, AclOperation.DELETE),
    )
    await trio.lowlevel.checkpoint()
    return {"topics": topics}


def _answer(partition: Partition | ErrorCode, entry: Body) -> Body:
    answer: Body = {"partition_index": entry["partition_index"], "low_watermark": -1}
    offset = entry["offset"]
    if isinstance(partition, ErrorCode):
        answer["error_code"] = partition
    elif not partition.is_leader:
        answer["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
    elif offset == HIGH_WATERMARK or 0 <= offset <= partition.high_watermark:
        target = partition.high_watermark if offset == HIGH_WATERMARK else offset
        if target > partition.log_start_offset:
            partition.log.advance_log_start_offset(target)
        answer["low_watermark"] = partition.log_start_offset
    else:
        answer["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
    return answer
