"""DescribeProducers (key 61), v0: the producers a partition's leader knows: producer
id, epoch, last sequence and timestamp, the coordinator epoch of its last marker,
and where its open transaction began (-1: none), as Kafka's
``kafka-transactions.sh describe-producers`` shows them.

Needs READ on each topic (TOPIC_AUTHORIZATION_FAILED); a partition this broker does
not lead is NOT_LEADER_OR_FOLLOWER, one that does not exist
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DESCRIBE_PRODUCERS
from eventplatform.log.protocol.schema import Versions

API = DESCRIBE_PRODUCERS
VERSIONS = Versions.parse("0")


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    topics = context.broker.topics
    answer = []
    for topic in request["topics"]:
        name = topic["name"]
        readable = authorize(context, AclOperation.READ, AclResourceType.TOPIC, name)
        partitions = []
        for index in topic["partition_indexes"]:
            entry: Body = {"partition_index": index, "error_message": None, "active_producers": []}
            partition = topics.partition(name, index)
            if not readable:
                error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                error = topics.absence_error(name, index)
            else:
                error = partition.check_leader()
            if error is ErrorCode.NONE and partition is not None:
                entry["active_producers"] = [
                    {
                        "producer_id": producer_id,
                        "producer_epoch": state.epoch,
                        "last_sequence": state.last_sequence,
                        "last_timestamp": state.last_timestamp_ms,
                        "coordinator_epoch": state.coordinator_epoch,
                        "current_txn_start_offset": state.transaction_first_offset,
                    }
                    for producer_id, state in sorted(partition.producers.producers.items())
                ]
            partitions.append({**entry, "error_code": error})
        answer.append({"name": name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": answer}
