"""AddPartitionsToTxn (key 24), v0-3: a transactional producer names the partitions it
is about to write to, before its first batch to each.

Answered by the transactional id's coordinator (NOT_COORDINATOR elsewhere). Needs
WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every
partition) and WRITE on each topic. A partition refused or unknown
(TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION) makes the whole request
fail: the others are OPERATION_NOT_ATTEMPTED and nothing is added, as in Kafka.
A producer whose epoch is stale is PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before
v2). The batched broker form of v4+ (KIP-890) is not served.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.handlers.init_producer_id import fenced_as
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import ADD_PARTITIONS_TO_TXN
from eventplatform.log.protocol.schema import Versions

API = ADD_PARTITIONS_TO_TXN
VERSIONS = Versions.parse("0-3")
PRODUCER_FENCED_VERSION = 2


async def handle(context: RequestContext, request: Body) -> Body:
    transactional_id = request["v3_and_below_transactional_id"]
    wanted = [
        (topic["name"], index)
        for topic in request["v3_and_below_topics"]
        for index in topic["partitions"]
    ]
    errors = check_partitions(context, transactional_id, wanted)
    if not errors:
        coordinator = context.broker.transactions
        if coordinator is None:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            error = await coordinator.add_partitions(
                transactional_id,
                request["v3_and_below_producer_id"],
                request["v3_and_below_producer_epoch"],
                wanted,
            )
        error = fenced_as(error, context.header.api_version, PRODUCER_FENCED_VERSION)
        errors = dict.fromkeys(wanted, error)
    else:
        await trio.lowlevel.checkpoint()
    by_topic: dict[str, list[Body]] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": index, "partition_error_code": error}
        )
    return {
        "throttle_time_ms": 0,
        "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": results} for name, results in by_topic.items()
        ],
    }


def check_partitions(
    context: RequestContext, transactional_id: str, wanted: list[tuple[str, int]]
) -> dict[tuple[str, int], ErrorCode]:
    """The errors of a request that cannot go on (empty when it can): every partition's,
    the ones with nothing wrong OPERATION_NOT_ATTEMPTED."""
    if not authorize(
        context, AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, transactional_id
    ):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    topics = context.broker.topics
    errors: dict[tuple[str, int], ErrorCode] = {}
    for topic, index in wanted:
        if not authorize(context, AclOperation.WRITE, AclResourceType.TOPIC, topic):
            errors[topic, index] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif not topics.exists(topic, index):
            errors[topic, index] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if not errors:
        return {}
    return {key: errors.get(key, ErrorCode.OPERATION_NOT_ATTEMPTED) for key in wanted}
