"""What each request to the active controller may hold: one table per method.

A request is ``{"method": ..., "params": {...}}`` (:mod:`.rpc`); its
``params`` are checked against the method's table here
(:func:`~.frames.check`) before the controller reads them, so a broker id
outside int32, a negative or 64-bit-overflowing epoch or offset, a string
past its bound, a field of the wrong type or one the method does not take is
refused as ``invalid_request`` and reaches neither the controller nor its
log. What the tables cannot know (whether a broker is registered, at which
epoch, whether a topic exists) the controller checks against its image.
"""

from __future__ import annotations

from eventplatform.log.cluster.frames import (
    BROKER_EPOCH,
    EPOCH,
    INT16_MAX,
    INT32_MAX,
    ITEMS_MAX,
    NAME_CHARS_MAX,
    NODE_ID,
    OFFSET,
    Field,
    Integer,
    ListOf,
    Number,
    OrNull,
    Record,
    Table,
    Text,
    TextMap,
    Tuple,
)
from eventplatform.log.protocol.apis.entities import ERASE_OFFSETS_MAX
from eventplatform.log.security.scram import USER_CHARS_MAX

HOST_CHARS_MAX = 255
"""A host name's longest (DNS)."""
REPLICAS_MAX = 1_000
"""The most broker ids in one replica set or ISR."""

TOPIC = Text(NAME_CHARS_MAX)
GROUP_ID = Text(INT16_MAX)
PARTITION = Integer(0, INT32_MAX)
BROKER = Field("broker", NODE_ID)
BROKER_EPOCH_FIELD = Field("epoch", BROKER_EPOCH)
REPLICAS = ListOf(NODE_ID, REPLICAS_MAX)
COUNT = Integer(-(INT32_MAX + 1), INT32_MAX)
"""A partition count, as Kafka's int32 (the controller refuses one that makes no sense)."""
FACTOR = Integer(-(INT16_MAX + 1), INT16_MAX)
"""A replication factor, as Kafka's int16 (-1: the default)."""
ASSIGNMENT = ListOf(REPLICAS, ITEMS_MAX)
"""An explicit placement: the replicas of each partition, in partition order."""
REASSIGNMENT = Record(
    Field("topic", TOPIC), Field("partition", PARTITION), Field("replicas", REPLICAS)
)

LISTENERS_MAX = 64
"""The most listeners one broker registers."""
PORT = Integer(0, 65_535)
ENDPOINT = Tuple(Text(NAME_CHARS_MAX), Text(HOST_CHARS_MAX), PORT)
"""A listener's advertised address: ``[name, host, port]``."""
SECRET_TEXT = Text(1024)
"""A base64 salt or key of a SCRAM credential."""
SCRAM = Record(
    Field("user", Text(USER_CHARS_MAX)),
    Field("mechanism", Text(NAME_CHARS_MAX)),
    Field("salt", SECRET_TEXT),
    Field("iterations", Integer(0, INT32_MAX)),
    Field("stored_key", SECRET_TEXT),
    Field("server_key", SECRET_TEXT),
)
ACL = Record(
    Field("resource_type", Integer(0, 127)),
    Field("resource_name", Text()),
    Field("pattern_type", Integer(0, 127)),
    Field("principal", Text()),
    Field("host", Text(HOST_CHARS_MAX)),
    Field("operation", Integer(0, 127)),
    Field("permission", Integer(0, 127)),
)

REQUESTS: dict[str, Table] = {
    "register_broker": (
        BROKER,
        Field("host", Text(HOST_CHARS_MAX)),
        Field("port", PORT),
        Field("rack", Text(HOST_CHARS_MAX), nullable=True, optional=True),
        Field("endpoints", ListOf(ENDPOINT, LISTENERS_MAX), optional=True),
    ),
    "heartbeat": (
        BROKER,
        BROKER_EPOCH_FIELD,
        Field("offset", OFFSET),
        Field("wait_ms", Integer(0, INT32_MAX), optional=True),
    ),
    "create_topic": (
        Field("name", TOPIC),
        Field("partitions", COUNT),
        Field("replication_factor", FACTOR),
        Field("configs", TextMap(), nullable=True, optional=True),
        Field("assignment", ASSIGNMENT, nullable=True, optional=True),
    ),
    "add_partitions": (
        Field("name", TOPIC),
        Field("count", COUNT),
        Field("replication_factor", FACTOR, optional=True),
        Field("assignment", ASSIGNMENT, nullable=True, optional=True),
    ),
    "topic_configs": (Field("name", TOPIC), Field("configs", TextMap())),
    "group_configs": (Field("group", GROUP_ID), Field("configs", TextMap())),
    "delete_topic": (Field("name", TOPIC),),
    "alter_partition": (
        Field("topic", TOPIC),
        Field("partition", PARTITION),
        BROKER,
        Field("leader_epoch", EPOCH),
        Field("partition_epoch", EPOCH),
        Field("isr", REPLICAS),
    ),
    "controlled_shutdown": (BROKER, BROKER_EPOCH_FIELD),
    "describe": (),
    "allocate_producer_ids": (BROKER, BROKER_EPOCH_FIELD),
    "reassign_partitions": (Field("partitions", ListOf(REASSIGNMENT, ITEMS_MAX)),),
    "cancel_reassignments": (
        Field(
            "partitions",
            ListOf(Record(Field("topic", TOPIC), Field("partition", PARTITION)), ITEMS_MAX),
            nullable=True,
            optional=True,
        ),
    ),
    "list_reassignments": (),
    "scram_change": (
        Field("upserted", ListOf(SCRAM)),
        Field("deleted", ListOf(Tuple(Text(USER_CHARS_MAX), Text(NAME_CHARS_MAX)))),
    ),
    "acl_change": (Field("added", ListOf(ACL)), Field("removed", ListOf(ACL))),
    "erasure": (
        Field("topic", TOPIC),
        Field("partition", PARTITION),
        Field("offsets", ListOf(OFFSET, ERASE_OFFSETS_MAX)),
    ),
    "quota_change": (
        Field(
            "changes",
            ListOf(
                Record(
                    Field(
                        "entity",
                        ListOf(Tuple(Text(NAME_CHARS_MAX), OrNull(Text(NAME_CHARS_MAX))), 2),
                    ),
                    Field("key", Text(NAME_CHARS_MAX)),
                    Field("value", Number(), nullable=True),
                )
            ),
        ),
    ),
}
