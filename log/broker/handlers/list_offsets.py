"""ListOffsets (key 2), v1-5.

Timestamp -2 answers the log start offset (earliest), -1 the last offset a
consumer of the request's ``isolation_level`` may read to (latest): the high
watermark for read_uncommitted (0), the last stable offset for read_committed
(1), which stops before the first transaction still open. -3 answers the first
record with the largest timestamp, and any other timestamp the first offset
whose record timestamp is at or after it, with that record's timestamp; both
offset -1 when the record found lies at or past that same bound, as Kafka
answers. Other negative timestamps are INVALID_REQUEST. From v4
``current_leader_epoch`` is checked and the leader epoch is returned. A leader
elected before its high watermark reached the start of its epoch answers every
query but the earliest with OFFSET_NOT_AVAILABLE (retriable) until it does, so an
offset a client was told never goes backwards across a failover. Only the
partition's leader answers: a broker that does not hold the partition answers
NOT_LEADER_OR_FOLLOWER, as for Fetch, so the client looks for its leader; a
partition the cluster does not have is UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import functools

import trio

from eventplatform.log.broker.authorizer import AclOperation, topic_permission
from eventplatform.log.broker.context import Body, RequestContext, answer_partitions
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import LIST_OFFSETS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.partition import Partition

API = LIST_OFFSETS
VERSIONS = Versions.parse("1-5")
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
READ_COMMITTED = 1


async def handle(context: RequestContext, request: Body) -> Body:
    topics = answer_partitions(
        context,
        request["topics"],
        functools.partial(_answer, committed=request["isolation_level"] == READ_COMMITTED),
        allowed=topic_permission(context, AclOperation.DESCRIBE),
    )
    await trio.lowlevel.checkpoint()
    return {"topics": topics}


def _answer(partition: Partition | ErrorCode, entry: Body, *, committed: bool) -> Body:
    answer: Body = {"partition_index": entry["partition_index"], "timestamp": -1, "offset": -1}
    if isinstance(partition, ErrorCode):
        answer["error_code"] = partition
        return answer
    answer["error_code"] = partition.check_leader(entry["current_leader_epoch"])
    if answer["error_code"] != ErrorCode.NONE:
        return answer
    timestamp = entry["timestamp"]
    answer["leader_epoch"] = partition.leader_epoch
    if timestamp != EARLIEST_TIMESTAMP and partition.high_watermark_behind_epoch:
        answer["error_code"] = ErrorCode.OFFSET_NOT_AVAILABLE
        return answer
    fetchable = partition.last_stable_offset if committed else partition.high_watermark
    if timestamp == LATEST_TIMESTAMP:
        answer["offset"] = fetchable
    elif timestamp == EARLIEST_TIMESTAMP:
        answer["offset"] = partition.log_start_offset
    elif timestamp < 0 and timestamp != MAX_TIMESTAMP:
        answer["error_code"] = ErrorCode.INVALID_REQUEST
    else:
        if timestamp == MAX_TIMESTAMP:
            found = partition.log.max_timestamp_offset()
        else:
            found = partition.log.offset_for_timestamp(timestamp)
        if found is not None and found.offset < fetchable:
            answer["offset"], answer["timestamp"] = found.offset, found.timestamp
    return answer
