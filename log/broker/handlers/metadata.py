"""Metadata (key 3), v1-8.

A standalone broker answers with itself as the only node, controller and
leader of every partition. A cluster member answers from the metadata it
has applied: the live brokers, each partition's leader (or
LEADER_NOT_AVAILABLE while it has none), leader epoch, replicas, ISR and
fenced ("offline") replicas; it names itself as the controller, since it
forwards admin requests to the active one.

A null topic list means every topic (internal ones included, as Kafka
does). Requested topics that do not exist are created with the broker
defaults when ``auto.create.topics.enable`` is on and the request allows it
(``allow_auto_topic_creation``, v4+; always allowed before); a cluster
member answers once the new topic has reached it. From v7
each partition carries its leader epoch, and clients validate positions with
OffsetForLeaderEpoch. From v8 a client may ask for the operations it is
authorized to perform on each topic (``include_topic_authorized_operations``)
and, up to v10, on the cluster; the answer comes from :mod:`..authorizer`,
and is ``-2147483648`` when not asked for.
"""

from __future__ import annotations

from typing import Any

import trio

from eventplatform.log.broker.authorizer import (
    CLUSTER_NAME,
    AclResourceType,
    authorized_operations,
)
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.topics import Topic, TopicError, validate_topic_name
from eventplatform.log.cluster.metadata import NO_LEADER, MetadataImage
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
        topics = [await _requested_topic(context, entry["name"], allow) for entry in requested]
    include_topic_operations = bool(request["include_topic_authorized_operations"])
    for topic in topics:
        if topic["error_code"] == ErrorCode.NONE:
            topic["topic_authorized_operations"] = authorized_operations(
                context, AclResourceType.TOPIC, topic["name"], requested=include_topic_operations
            )
    await trio.lowlevel.checkpoint()
    return {
        "brokers": live_brokers(context),
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": authorized_operations(
            context,
            AclResourceType.CLUSTER,
            CLUSTER_NAME,
            requested=bool(request["include_cluster_authorized_operations"]),
        ),
    }


def live_brokers(context: RequestContext) -> list[Body]:
    """The brokers clients may connect to (``node_id``, ``host``, ``port``, ``rack``): this
    one alone when standalone, every unfenced broker of the applied metadata on a cluster."""
    broker = context.broker
    if broker.member is None:
        return [{"node_id": broker.node_id, "host": broker.advertised_host, "port": broker.port}]
    image = broker.member.replicas.image
    return [
        {"node_id": b.broker, "host": b.host, "port": b.port, "rack": b.rack}
        for b in sorted(image.brokers.values(), key=lambda b: b.broker)
        if not b.fenced
    ]


async def _requested_topic(context: RequestContext, name: str | None, allow_create: bool) -> Body:
    broker = context.broker
    try:
        validate_topic_name(name or "")
    except TopicError as exc:
        return {"error_code": exc.code, "name": name, "partitions": []}
    assert name is not None
    topic = broker.topics.get(name)
    if topic is None and allow_create:
        topic = await broker.auto_create_topic(name)
    if topic is None:
        return {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}
    return describe_topic(context, topic)


def describe_topic(context: RequestContext, topic: Topic) -> Body:
    node = context.broker.node_id
    member = context.broker.member
    if member is not None:
        return _describe_replicated(member.replicas.image, topic)
    partitions: list[dict[str, Any]] = [
        {
            "partition_index": partition.index,
            "leader_id": node,
            "leader_epoch": partition.leader_epoch,
            "replica_nodes": [node],
            "isr_nodes": [node],
        }
        for partition in topic.partitions
        if partition is not None
    ]
    return {
        "error_code": ErrorCode.NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": partitions,
    }


def _describe_replicated(image: MetadataImage, topic: Topic) -> Body:
    state = image.topics.get(topic.name)
    fenced = {b.broker for b in image.brokers.values() if b.fenced}
    partitions: list[dict[str, Any]] = []
    for index, partition in enumerate(state.partitions if state is not None else []):
        leaderless = partition.leader == NO_LEADER
        partitions.append(
            {
                "error_code": ErrorCode.LEADER_NOT_AVAILABLE if leaderless else ErrorCode.NONE,
                "partition_index": index,
                "leader_id": partition.leader,
                "leader_epoch": partition.leader_epoch,
                "replica_nodes": list(partition.replicas),
                "isr_nodes": list(partition.isr),
                "offline_replicas": [r for r in partition.replicas if r in fenced],
            }
        )
    return {
        "error_code": ErrorCode.NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": partitions,
    }
