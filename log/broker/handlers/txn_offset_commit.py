"""TxnOffsetCommit (key 28), v0-3: a transactional producer commits a consumer group's
offsets inside its transaction (after AddOffsetsToTxn).

Sent to the group's coordinator, which writes them as the producer's
transactional batch in ``__consumer_offsets`` and keeps them pending: the
transaction's commit marker makes them the group's committed offsets, an abort
drops them (:mod:`~eventplatform.log.groups.offsets`). From v3 the producer names
the group member and generation it consumed as, checked as OffsetCommit checks
them. Needs WRITE on the transactional id, READ on the group and READ on each
topic.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.messages import OffsetCommit
from eventplatform.log.groups.records import TopicPartition
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import TXN_OFFSET_COMMIT
from eventplatform.log.protocol.schema import Versions

API = TXN_OFFSET_COMMIT
VERSIONS = Versions.parse("0-3")


async def handle(context: RequestContext, request: Body) -> Body:
    group_id = request["group_id"]
    offsets: dict[TopicPartition, OffsetCommit] = {}
    refused: dict[TopicPartition, ErrorCode] = {}
    if not authorize(
        context, AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, request["transactional_id"]
    ):
        common: ErrorCode | None = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not authorize(context, AclOperation.READ, AclResourceType.GROUP, group_id):
        common = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif context.broker.groups is None:
        common = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        common = None
    for topic in request["topics"]:
        readable = authorize(context, AclOperation.READ, AclResourceType.TOPIC, topic["name"])
        for entry in topic["partitions"]:
            key = TopicPartition(topic["name"], entry["partition_index"])
            if common is not None:
                refused[key] = common
            elif not readable:
                refused[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not context.broker.topics.exists(key.topic, key.partition):
                refused[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets[key] = OffsetCommit(
                    entry["committed_offset"],
                    entry["committed_leader_epoch"],
                    entry["committed_metadata"],
                )
    results: dict[TopicPartition, int] = dict(refused)
    if offsets and context.broker.groups is not None:
        results.update(
            await context.broker.groups.commit_transactional_offsets(
                group_id,
                (request["producer_id"], request["producer_epoch"]),
                member_id=request["member_id"],
                group_instance_id=request["group_instance_id"],
                generation_id=request["generation_id"],
                offsets=offsets,
            )
        )
    else:
        await trio.lowlevel.checkpoint()
    by_topic: dict[str, list[Body]] = {}
    for key, error in results.items():
        by_topic.setdefault(key.topic, []).append(
            {"partition_index": key.partition, "error_code": error}
        )
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }
