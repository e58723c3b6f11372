"""Metadata (key 3), v1-12.

The brokers and the partitions' layout come from the node's membership
(:mod:`eventplatform.log.cluster.membership`). A broker on its own is the only
node, controller and leader of every partition. A cluster member answers from
the metadata it has applied: the live brokers, each partition's leader (or
LEADER_NOT_AVAILABLE while it has none), leader epoch, replicas, ISR and
fenced ("offline") replicas; it names itself as the controller, since it
forwards admin requests to the active one.

A null topic list means every topic (internal ones included, as Kafka
does). Requested topics that do not exist are created with the broker
defaults when ``auto.create.topics.enable`` is on and the request allows it
(``allow_auto_topic_creation``, v4+; always allowed before); a cluster
member answers once the new topic has reached it. A topic this node holds but whose
layout its metadata lacks is LEADER_NOT_AVAILABLE, never a topic of no partitions: a
client that cached that count could place no key. From v7
each partition carries its leader epoch, and clients validate positions with
OffsetForLeaderEpoch. From v8 a client may ask for the operations it is
authorized to perform on each topic (``include_topic_authorized_operations``)
and, up to v10, on the cluster; the answer comes from :mod:`..authorizer`,
and is ``-2147483648`` when not asked for.

Only topics the caller may DESCRIBE are listed; one it names but may not describe
is TOPIC_AUTHORIZATION_FAILED, and auto-creation needs CREATE on the cluster or
the topic.

From v10 each topic carries its id, and a request may name a topic by id alone
(an unknown id is UNKNOWN_TOPIC_ID). The id is how a client tells a topic deleted
and re-created under the same name from the old one: librdkafka, for one, only
shrinks its partition count, failing what it queued for the partitions gone, when
the id changes, and only trusts leader epochs from v9 on.
"""

from __future__ import annotations

from typing import Any

import trio

from eventplatform.log.broker.authorizer import (
    CLUSTER_NAME,
    AclOperation,
    AclResourceType,
    authorize,
    authorized_operations,
    auto_create,
)
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.cluster.metadata import NO_LEADER
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import METADATA
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import Topic, TopicError, validate_topic_name

API = METADATA
VERSIONS = Versions.parse("1-12")
NO_TOPIC_ID = bytes(16)
NULLABLE_NAME_VERSION = 12


async def handle(context: RequestContext, request: Body) -> Body:
    broker = context.broker
    requested = request["topics"]
    if requested is None:
        topics = [
            describe_topic(context, topic)
            for topic in broker.topics.topics.values()
            if _may_describe(context, topic.name)
        ]
    else:
        allow = context.version < 4 or request["allow_auto_topic_creation"]
        topics = [await _requested_topic(context, entry, allow) for entry in requested]
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
    """The brokers clients may connect to (``node_id``, ``host``, ``port``, ``rack``); this
    broker's own address is the one of the listener the client came in on."""
    broker = context.broker
    listener = context.session.listener
    answer = []
    for b in broker.membership.live_brokers():
        address = (
            broker.advertised_address(listener)
            if b.node_id == broker.node_id
            else b.address(listener)
        )
        if address is not None:  # a broker without this listener is not told of
            answer.append(
                {"node_id": b.node_id, "host": address[0], "port": address[1], "rack": b.rack}
            )
    return answer


async def _requested_topic(context: RequestContext, entry: Body, allow_create: bool) -> Body:
    broker = context.broker
    name: str | None = entry["name"]
    topic_id: bytes = entry.get("topic_id") or NO_TOPIC_ID
    if name is None and topic_id != NO_TOPIC_ID:
        by_id = broker.topics.by_id(topic_id)
        if by_id is None or not _may_describe(context, by_id.name):
            unnamed = None if context.version >= NULLABLE_NAME_VERSION else ""
            return _topic_error(ErrorCode.UNKNOWN_TOPIC_ID, unnamed, topic_id)
        return describe_topic(context, by_id)
    try:
        validate_topic_name(name or "")
    except TopicError as exc:
        return _topic_error(exc.code, name or "")
    assert name is not None
    if not _may_describe(context, name):
        return _topic_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name)
    topic = broker.topics.get(name)
    if topic is None and allow_create:
        topic = await auto_create(context, name)
    if topic is None:
        return _topic_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
    return describe_topic(context, topic)


def _may_describe(context: RequestContext, name: str) -> bool:
    return authorize(context, AclOperation.DESCRIBE, AclResourceType.TOPIC, name)


def _topic_error(code: ErrorCode, name: str | None, topic_id: bytes = NO_TOPIC_ID) -> Body:
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": []}


def describe_topic(context: RequestContext, topic: Topic) -> Body:
    partitions: list[dict[str, Any]] = [
        {
            "error_code": (
                ErrorCode.LEADER_NOT_AVAILABLE if p.leader == NO_LEADER else ErrorCode.NONE
            ),
            "partition_index": p.index,
            "leader_id": p.leader,
            "leader_epoch": p.leader_epoch,
            "replica_nodes": list(p.replicas),
            "isr_nodes": list(p.isr),
            "offline_replicas": list(p.offline),
        }
        for p in context.broker.membership.layout(topic)
    ]
    return {
        # A topic with no layout yet (its creation has not reached this node's metadata)
        # is one clients must ask about again, not one with no partitions.
        "error_code": ErrorCode.NONE if partitions else ErrorCode.LEADER_NOT_AVAILABLE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": partitions,
    }
