"""OffsetCommit (key 8), v2-7.

Stores committed offsets in ``__consumer_offsets`` (one batch per request).
A member of a group commits with its generation and member id; a stale
generation gets ILLEGAL_GENERATION, an unknown member UNKNOWN_MEMBER_ID or
FENCED_INSTANCE_ID (v7 adds ``group_instance_id``), and a group completing
a rebalance REBALANCE_IN_PROGRESS. A commit with generation -1 and an empty
member id (no group management) is accepted while the group is Empty or
does not exist. v6 adds the committed leader epoch. The retention time of
v2-4 is ignored: ``offsets.retention.minutes`` applies. Per partition:
UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have (a
partition whose replicas all live on other brokers is committed all the
same, as Kafka does), OFFSET_METADATA_TOO_LARGE for metadata over 4096 bytes.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize, may_group
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.messages import OffsetCommit
from eventplatform.log.groups.records import TopicPartition
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import OFFSET_COMMIT
from eventplatform.log.protocol.schema import Versions

API = OFFSET_COMMIT
VERSIONS = Versions.parse("2-7")


async def handle(context: RequestContext, request: Body) -> Body:
    broker = context.broker
    results: dict[TopicPartition, int] = {}
    commits: dict[TopicPartition, OffsetCommit] = {}
    group_allowed = may_group(context, AclOperation.READ, request["group_id"])
    for topic in request["topics"]:
        topic_allowed = authorize(context, AclOperation.READ, AclResourceType.TOPIC, topic["name"])
        for entry in topic["partitions"]:
            partition = TopicPartition(topic["name"], entry["partition_index"])
            if not group_allowed:
                results[partition] = ErrorCode.GROUP_AUTHORIZATION_FAILED
                continue
            if not topic_allowed:
                results[partition] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if not broker.topics.exists(partition.topic, partition.partition):
                results[partition] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            commits[partition] = OffsetCommit(
                entry["committed_offset"],
                entry["committed_leader_epoch"],
                entry["committed_metadata"],
            )
    coordinator = broker.groups
    if coordinator is None:
        await trio.lowlevel.checkpoint()
        results.update(dict.fromkeys(commits, ErrorCode.COORDINATOR_NOT_AVAILABLE))
    elif commits:
        stored = await coordinator.commit_offsets(
            request["group_id"],
            member_id=request["member_id"],
            group_instance_id=request["group_instance_id"],
            generation_id=request["generation_id_or_member_epoch"],
            offsets=commits,
        )
        results.update(stored)
    else:
        await trio.lowlevel.checkpoint()
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": topic["name"],
                "partitions": [
                    {
                        "partition_index": entry["partition_index"],
                        "error_code": results[
                            TopicPartition(topic["name"], entry["partition_index"])
                        ],
                    }
                    for entry in topic["partitions"]
                ],
            }
            for topic in request["topics"]
        ],
    }
