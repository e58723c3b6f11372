"""OffsetForLeaderEpoch (key 23), v2-3.

For each partition, the end offset of the requested leader epoch: the log
end offset for the current epoch, and -1 with epoch -1 for an epoch this
broker has never led. A single node has led every partition since epoch 0,
so every earlier epoch request resolves to the current one's end.
Replica requests (v3 ``replica_id``) are answered the same way.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.context import Body, RequestContext, answer_partitions
from eventplatform.log.broker.partition import Partition
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import OFFSET_FOR_LEADER_EPOCH
from eventplatform.log.protocol.schema import Versions

API = OFFSET_FOR_LEADER_EPOCH
VERSIONS = Versions.parse("2-3")


async def handle(context: RequestContext, request: Body) -> Body:
    topics = answer_partitions(
        context, request["topics"], _answer, topic_key="topic", partition_key="partition"
    )
    await trio.lowlevel.checkpoint()
    return {"topics": topics}


def _answer(partition: Partition | None, entry: Body) -> Body:
    answer: Body = {"partition": entry["partition"], "leader_epoch": -1, "end_offset": -1}
    if partition is None:
        answer["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return answer
    answer["error_code"] = partition.check_leader_epoch(entry["current_leader_epoch"])
    if answer["error_code"] != ErrorCode.NONE:
        return answer
    if entry["leader_epoch"] <= partition.leader_epoch:
        answer["leader_epoch"] = partition.leader_epoch
        answer["end_offset"] = partition.log.log_end_offset
    return answer
