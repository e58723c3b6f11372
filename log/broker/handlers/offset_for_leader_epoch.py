"""OffsetForLeaderEpoch (key 23), v2-3.

For each partition, the end offset of the requested leader epoch: the
largest epoch at most the requested one that this leader's log holds, and
where it ends (the next epoch's start, or the log end for the current
one); -1 with epoch -1 when every epoch it knows is later. Consumers use it
to validate their positions after a leader change, and followers
(``replica_id``, v3) to find where their log diverged from the leader's
(KIP-101, KIP-279). Only the leader answers (NOT_LEADER_OR_FOLLOWER).

A standalone broker has led every partition since epoch 0, so every
earlier epoch request resolves to the current one's end.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import (
    AclOperation,
    cluster_permission,
    topic_permission,
)
from eventplatform.log.broker.context import Body, RequestContext, answer_partitions
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import OFFSET_FOR_LEADER_EPOCH
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.partition import Partition

API = OFFSET_FOR_LEADER_EPOCH
VERSIONS = Versions.parse("2-3")
CONSUMER = -1


async def handle(context: RequestContext, request: Body) -> Body:
    follower = request.get("replica_id", CONSUMER) >= 0
    allowed = (
        cluster_permission(context, AclOperation.CLUSTER_ACTION)
        if follower
        else topic_permission(context, AclOperation.DESCRIBE)
    )
    topics = answer_partitions(
        context,
        request["topics"],
        _answer,
        topic_key="topic",
        partition_key="partition",
        allowed=allowed,
    )
    await trio.lowlevel.checkpoint()
    return {"topics": topics}


def _answer(partition: Partition | ErrorCode, entry: Body) -> Body:
    answer: Body = {"partition": entry["partition"], "leader_epoch": -1, "end_offset": -1}
    if isinstance(partition, ErrorCode):
        answer["error_code"] = partition
        return answer
    answer["error_code"] = partition.check_leader(entry["current_leader_epoch"])
    if answer["error_code"] != ErrorCode.NONE:
        return answer
    answer["leader_epoch"], answer["end_offset"] = partition.end_offset_for(entry["leader_epoch"])
    return answer
