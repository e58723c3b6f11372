"""Metadata (key 3), v1-8.

Answers with this broker as the only node, controller and leader of every
partition. A null topic list means every topic (internal ones included, as
Kafka does). Requested topics that do not exist are created with the broker
defaults when ``auto.create.topics.enable`` is on and the request allows it
(``allow_auto_topic_creation``, v4+; always allowed before), and are
reported ready at once, since a single node has nothing to wait for. From v7
each partition carries its leader epoch, and clients validate positions with
OffsetForLeaderEpoch.
"""

from __future__ import annotations

from typing import Any

import trio

from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.topics import Topic, TopicError, validate_topic_name
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import METADATA
from eventplatform.log.protocol.schema import Versions

API = METADATA
VERSIONS = Versions.parse("1-8")


async def handle(context: RequestContext, request: Body) -> Body:
    broker = context.broker
    requested = request["topics"]
    if requested is None:
        topics = [describe_topic(context, topic) for topic in broker.topics.topics.values()]
    else:
        allow = context.version < 4 or request["allow_auto_topic_creation"]
        topics = [_requested_topic(context, entry["name"], allow) for entry in requested]
    await trio.lowlevel.checkpoint()
    return {
        "brokers": [
            {"node_id": broker.node_id, "host": broker.advertised_host, "port": broker.port}
        ],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
    }


def _requested_topic(context: RequestContext, name: str | None, allow_create: bool) -> Body:
    broker = context.broker
    try:
        validate_topic_name(name or "")
    except TopicError as exc:
        return {"error_code": exc.code, "name": name, "partitions": []}
    assert name is not None
    topic = broker.topics.get(name)
    if topic is None and allow_create:
        topic = broker.auto_create_topic(name)
    if topic is None:
        return {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}
    return describe_topic(context, topic)


def describe_topic(context: RequestContext, topic: Topic) -> Body:
    node = context.broker.node_id
    partitions: list[dict[str, Any]] = [
        {
            "partition_index": partition.index,
            "leader_id": node,
            "leader_epoch": partition.leader_epoch,
            "replica_nodes": [node],
            "isr_nodes": [node],
        }
        for partition in topic.partitions
    ]
    return {
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": partitions,
    }
