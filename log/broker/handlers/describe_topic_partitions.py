"""DescribeTopicPartitions (key 75), v0 (KIP-966).

Describes topics as Metadata does (leader, epoch, replicas, ISR, offline
replicas), paginated over partitions. The named topics, or every topic when
none is named, are taken in name order, each one's partitions in index
order, from ``cursor`` (a topic and the partition to start at) on. At most
``response_partition_limit`` partitions are answered, capped at
``DESCRIBE_PARTITIONS_LIMIT_MAX`` (Kafka's
``max.request.partition.size.limit``) and raised to 1 so every answer makes
progress; when partitions remain, ``next_cursor`` names where the next
request starts. A named topic that does not exist is answered with
UNKNOWN_TOPIC_OR_PARTITION and uses none of the limit; when every topic is
asked for, none can be missing. A cursor naming a topic outside the named
ones is INVALID_REQUEST for every topic, as Kafka refuses it. The eligible
leader replicas of KIP-966 are empty (this broker elects from the ISR only).
Each topic carries the operations the caller may perform on it, from
:mod:`..authorizer`.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from eventplatform.log.broker.authorizer import (
    AclOperation,
    AclResourceType,
    authorize,
    authorized_operations,
)
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.handlers.metadata import describe_topic
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DESCRIBE_TOPIC_PARTITIONS
from eventplatform.log.protocol.schema import Versions

API = DESCRIBE_TOPIC_PARTITIONS
VERSIONS = Versions.parse("0")
DESCRIBE_PARTITIONS_LIMIT_MAX = 2000

log = logging.getLogger("eventplatform.broker")


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    registry = context.broker.topics
    named = sorted({entry["name"] for entry in request["topics"]})
    every = not named
    names = sorted(registry.topics) if every else named
    cursor = request["cursor"]
    if cursor is not None and not every and cursor["topic_name"] not in names:
        message = f"the cursor's topic {cursor['topic_name']!r} is not among the topics named"
        refused = [_missing(name, ErrorCode.INVALID_REQUEST) for name in names]
        log.info("DescribeTopicPartitions refused: %s", message)
        return {"throttle_time_ms": 0, "topics": refused}
    if cursor is not None:
        names = [name for name in names if name >= cursor["topic_name"]]
    remaining = max(1, min(request["response_partition_limit"], DESCRIBE_PARTITIONS_LIMIT_MAX))
    topics: list[Body] = []
    next_cursor = None
    for name in names:
        topic = registry.get(name)
        if not authorize(context, AclOperation.DESCRIBE, AclResourceType.TOPIC, name):
            if not every:
                topics.append(_missing(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        if topic is None:
            topics.append(_missing(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        start = cursor["partition_index"] if cursor and cursor["topic_name"] == name else 0
        described = describe_topic(context, topic)
        partitions = [p for p in described["partitions"] if p["partition_index"] >= start]
        answered = partitions[:remaining]
        remaining -= len(answered)
        topics.append(_described(context, described, answered))
        if len(answered) < len(partitions):
            resume = partitions[len(answered)]["partition_index"]
            next_cursor = {"topic_name": name, "partition_index": resume}
            break
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}


def _missing(name: str, error: ErrorCode) -> Body:
    return {"error_code": error, "name": name, "is_internal": False, "partitions": []}


def _described(context: RequestContext, described: Body, partitions: list[Any]) -> Body:
    return {
        "error_code": described["error_code"],
        "name": described["name"],
        "topic_id": described["topic_id"],
        "is_internal": described["is_internal"],
        "partitions": [
            {
                "error_code": partition.get("error_code", ErrorCode.NONE),
                "partition_index": partition["partition_index"],
                "leader_id": partition["leader_id"],
                "leader_epoch": partition["leader_epoch"],
                "replica_nodes": partition["replica_nodes"],
                "isr_nodes": partition["isr_nodes"],
                "eligible_leader_replicas": [],
                "last_known_elr": [],
                "offline_replicas": partition.get("offline_replicas", []),
            }
            for partition in partitions
        ],
        "topic_authorized_operations": authorized_operations(
            context, AclResourceType.TOPIC, described["name"], requested=True
        ),
    }
