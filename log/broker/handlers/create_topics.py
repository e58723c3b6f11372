"""CreateTopics (key 19), v0-4.

Creates each topic with its partition count (-1: ``num.partitions``, v4) and
config overrides, which are validated like any topic config. The only
replication factor a standalone broker offers is 1 (-1 means the default).
A cluster member forwards the topic to the active controller, which places
its replicas round-robin, and answers once the topic has reached it.

An explicit assignment (with partition count and replication factor -1)
lays the partitions out instead, as Kafka checks it: partitions numbered
0..n-1, each once; registered brokers only (on a standalone broker, this
node), none twice in a partition; every partition the same replica count;
and on a cluster at least one live replica per partition, the first live
one its leader. Anything else is INVALID_REPLICA_ASSIGNMENT.
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

from eventplatform.log.broker.authorizer import may_create_topic
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import CREATE_TOPICS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError

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
            if not may_create_topic(context, name):
                raise TopicError(
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    "CREATE on the cluster or on the topic is needed",
                )
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
    assignment = _assignment(topic["assignments"])
    if assignment:
        if partitions != -1 or replication_factor != -1:
            raise TopicError(
                ErrorCode.INVALID_REQUEST,
                "give either assignments or a partition count and replication factor",
            )
        partitions = len(assignment)
    if partitions == -1:
        partitions = broker.config.num_partitions
    configs = {entry["name"]: entry["value"] for entry in topic["configs"]}
    if any(value is None for value in configs.values()):
        raise TopicError(ErrorCode.INVALID_CONFIG, "config values may not be null")
    if validate_only:
        broker.check_new_topic(topic["name"], partitions, replication_factor, configs, assignment)
    else:
        await broker.create_topic(
            topic["name"], partitions, replication_factor, configs, assignment
        )


def _assignment(entries: list[Body]) -> list[list[int]] | None:
    """The request's assignments as one replica list per partition, in partition order;
    their partition indexes must be 0..n-1, each once (INVALID_REPLICA_ASSIGNMENT)."""
    if not entries:
        return None
    indexes = sorted(entry["partition_index"] for entry in entries)
    if indexes != list(range(len(entries))):
        raise TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"the assigned partitions {indexes} are not 0 to {len(entries) - 1}, each once",
        )
    ordered = sorted(entries, key=lambda entry: int(entry["partition_index"]))
    return [list(entry["broker_ids"]) for entry in ordered]
