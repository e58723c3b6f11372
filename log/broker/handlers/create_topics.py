"""CreateTopics (key 19), v0-4.

Creates each topic with its partition count (-1: ``num.partitions``, v4) and
config overrides, which are validated like any topic config. The only
replication factor a standalone broker offers is 1 (-1 means the default);
explicit assignments must name this node, one replica per partition. A
cluster member forwards the topic to the active controller, which places
its replicas round-robin, and answers once the topic has reached it.
``validate_only`` (v1+) checks everything and creates nothing. Errors per
topic: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS,
INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG,
INVALID_REQUEST (a name given twice), POLICY_VIOLATION (the broker's file
descriptors would not cover the new partitions and its connections),
KAFKA_STORAGE_ERROR (the partitions' files could not be created).
"""

from __future__ import annotations

from collections import Counter

import trio

from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.topics import TopicError
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import CREATE_TOPICS
from eventplatform.log.protocol.schema import Versions

API = CREATE_TOPICS
VERSIONS = Versions.parse("0-4")


async def handle(context: RequestContext, request: Body) -> Body:
    counts = Counter(topic["name"] for topic in request["topics"])
    results = []
    for topic in request["topics"]:
        name = topic["name"]
        try:
            if counts[name] > 1:
                raise TopicError(ErrorCode.INVALID_REQUEST, f"topic {name!r} is listed twice")
            await _create(context, topic, validate_only=request["validate_only"])
            results.append({"name": name, "error_code": 0})
        except TopicError as exc:
            results.append({"name": name, "error_code": exc.code, "error_message": str(exc)})
        await trio.lowlevel.checkpoint()
    return {"topics": results}


async def _create(context: RequestContext, topic: Body, *, validate_only: bool) -> None:
    broker = context.broker
    partitions = topic["num_partitions"]
    replication_factor = topic["replication_factor"]
    assignments = topic["assignments"]
    if assignments:
        if partitions != -1 or replication_factor != -1:
            raise TopicError(
                ErrorCode.INVALID_REQUEST,
                "give either assignments or a partition count and replication factor",
            )
        if broker.member is not None:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "a cluster places replicas itself; give a replication factor",
            )
        for assignment in assignments:
            if assignment["broker_ids"] != [broker.node_id]:
                raise TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"partition {assignment['partition_index']} must be assigned to "
                    f"node {broker.node_id} alone",
                )
        partitions = len(assignments)
    if partitions == -1:
        partitions = broker.config.num_partitions
    configs = {entry["name"]: entry["value"] for entry in topic["configs"]}
    if any(value is None for value in configs.values()):
        raise TopicError(ErrorCode.INVALID_CONFIG, "config values may not be null")
    if validate_only:
        broker.topics.check_new_topic(topic["name"], partitions, configs)
        broker.check_descriptors(partitions, replication_factor)
        if broker.member is None and replication_factor not in (-1, 1):
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {replication_factor} is larger than the 1 available broker",
            )
    else:
        await broker.create_topic(topic["name"], partitions, replication_factor, configs)
