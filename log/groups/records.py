"""Record formats of ``__consumer_offsets``: Kafka's keys and values, byte for byte.

Every record carries a key (the topic is compacted) that starts with an
int16 version saying what the record is::

    key version 0 or 1   offset commit      group string, topic string, partition int32
    key version 2        group metadata     group string
    key version 32000    share-partition state (this log's own): group string,
                         topic_id uuid, partition int32

and a value that starts with its own int16 version, or no value at all (a
tombstone: the offset or the group is gone). Strings are an int16 length and
UTF-8; nullable strings use length -1 for null; bytes are an int32 length.
Values written here:

    offset commit value v3     offset int64, leader_epoch int32, metadata string,
                               commit_timestamp int64
    group metadata value v3    protocol_type string, generation int32,
                               protocol nullable string, leader nullable string,
                               current_state_timestamp int64, members array of
                               {member_id, group_instance_id (nullable),
                               client_id, client_host, rebalance_timeout int32,
                               session_timeout int32, subscription bytes,
                               assignment bytes}

A share-partition state value (version 0) is state_epoch int32, start_offset
int64 and state_batches, an array of {first_offset int64, last_offset int64,
delivery_state int8, delivery_count int16}: what a share group has settled of
one partition (see :mod:`~eventplatform.log.groups.share_partition`).

Versions 0 to 4 of both values are read (4 is flexible: compact lengths and
tagged fields), so a log written by Kafka itself loads too. Other key
versions (records of newer group protocols) are reported as unknown and
skipped by the loader.

The group's partition of the topic is ``abs(hashCode(group)) % partitions``
with Java's ``String.hashCode`` and Kafka's ``Utils.abs`` (which maps
``Integer.MIN_VALUE`` to 0), so a group lands where Kafka would put it.

Everything here is pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from eventplatform.log.protocol import ProtocolError, flatten
from eventplatform.log.protocol.codec import compile_struct
from eventplatform.log.protocol.schema import BYTES, INT8, INT16, INT32, INT64, STRING, UUID, F

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
OFFSET_KEY_VERSIONS = (0, 1)
SHARE_STATE_KEY_VERSION = 32_000
SHARE_STATE_VALUE_VERSION = 0
VALUE_VERSION_MAX = 4
FIRST_FLEXIBLE_VALUE_VERSION = 4
NO_TIMESTAMP = -1
NO_LEADER_EPOCH = -1

_VERSION = struct.Struct(">h")
_INT32_MASK = 0xFFFFFFFF
_INT32_MIN = -(2**31)

OFFSET_KEY_FIELDS = (
    F("group", STRING),
    F("topic", STRING),
    F("partition", INT32),
)
GROUP_KEY_FIELDS = (F("group", STRING),)
SHARE_STATE_KEY_FIELDS = (F("group", STRING), F("topic_id", UUID), F("partition", INT32))
SHARE_STATE_VALUE_FIELDS = (
    F("state_epoch", INT32),
    F("start_offset", INT64),
    F(
        "state_batches",
        [
            F("first_offset", INT64),
            F("last_offset", INT64),
            F("delivery_state", INT8),
            F("delivery_count", INT16),
        ],
    ),
)
OFFSET_VALUE_FIELDS = (
    F("offset", INT64),
    F("leader_epoch", INT32, "3+", default=NO_LEADER_EPOCH),
    F("metadata", STRING),
    F("commit_timestamp", INT64),
    F("expire_timestamp", INT64, "1", default=NO_TIMESTAMP),
)
GROUP_VALUE_FIELDS = (
    F("protocol_type", STRING),
    F("generation", INT32),
    F("protocol", STRING, nullable="0+"),
    F("leader", STRING, nullable="0+"),
    F("current_state_timestamp", INT64, "2+", default=NO_TIMESTAMP),
    F(
        "members",
        [
            F("member_id", STRING),
            F("group_instance_id", STRING, "3+", nullable="3+", default=None),
            F("client_id", STRING),
            F("client_host", STRING),
            F("rebalance_timeout", INT32, "1+", default=-1),
            F("session_timeout", INT32),
            F("subscription", BYTES),
            F("assignment", BYTES),
        ],
    ),
)


class RecordFormatError(ValueError):
    """A ``__consumer_offsets`` key or value that does not decode."""


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    group_id: str
    topic_id: bytes
    partition: int


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A record of a kind this broker does not read (a newer group protocol)."""

    version: int


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One committed position; timestamps are wall-clock milliseconds."""

    offset: int
    metadata: str = ""
    leader_epoch: int = NO_LEADER_EPOCH
    commit_timestamp_ms: int = NO_TIMESTAMP
    expire_timestamp_ms: int = NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """The persisted part of a group: its generation, protocol, leader and members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberRecord, ...] = field(default=())


RecordKey = OffsetKey | GroupKey | ShareStateKey | UnknownKey


# ---------------------------------------------------------------- partitioning


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, wrapping at 32 bits, signed."""
    encoded = text.encode("utf-16-be", "surrogatepass")
    value = 0
    for index in range(0, len(encoded), 2):
        unit = (encoded[index] << 8) | encoded[index + 1]
        value = (31 * value + unit) & _INT32_MASK
    return value - (1 << 32) if value & 0x80000000 else value


def partition_for(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``, as Kafka computes it."""
    hashed = java_string_hash(group_id)
    positive = 0 if hashed == _INT32_MIN else abs(hashed)
    return positive % partitions


# ---------------------------------------------------------------- encoding


def _encode(fields: tuple[F, ...], version: int, value: dict[str, Any]) -> bytes:
    flexible = version >= FIRST_FLEXIBLE_VALUE_VERSION
    body = flatten(compile_struct(fields, version, flexible=flexible).encode(value))
    return _VERSION.pack(version) + body


def encode_offset_key(group_id: str, topic: str, partition: int) -> bytes:
    value = {"group": group_id, "topic": topic, "partition": partition}
    return _VERSION.pack(OFFSET_KEY_VERSION) + flatten(
        compile_struct(OFFSET_KEY_FIELDS, 0, flexible=False).encode(value)
    )


def encode_group_key(group_id: str) -> bytes:
    body = compile_struct(GROUP_KEY_FIELDS, 0, flexible=False).encode({"group": group_id})
    return _VERSION.pack(GROUP_KEY_VERSION) + flatten(body)


def encode_share_state_key(key: ShareStateKey) -> bytes:
    value = {"group": key.group_id, "topic_id": key.topic_id, "partition": key.partition}
    body = compile_struct(SHARE_STATE_KEY_FIELDS, 0, flexible=False).encode(value)
    return _VERSION.pack(SHARE_STATE_KEY_VERSION) + flatten(body)


def encode_share_state_value(value: dict[str, Any]) -> bytes:
    """``value`` in the layout of WriteShareGroupState's partition: state_epoch,
    start_offset, state_batches."""
    return _encode(SHARE_STATE_VALUE_FIELDS, SHARE_STATE_VALUE_VERSION, value)


def decode_share_state_value(data: bytes | memoryview) -> dict[str, Any]:
    version, body = _split_version(data, "share state value")
    if version != SHARE_STATE_VALUE_VERSION:
        raise RecordFormatError(f"share state value version {version} is unknown")
    return _decode(SHARE_STATE_VALUE_FIELDS, version, body, "share state value")


def encode_offset_value(committed: CommittedOffset) -> bytes:
    value = {
        "offset": committed.offset,
        "leader_epoch": committed.leader_epoch,
        "metadata": committed.metadata,
        "commit_timestamp": committed.commit_timestamp_ms,
    }
    return _encode(OFFSET_VALUE_FIELDS, OFFSET_VALUE_VERSION, value)


def encode_group_value(record: GroupRecord) -> bytes:
    value = {
        "protocol_type": record.protocol_type,
        "generation": record.generation,
        "protocol": record.protocol,
        "leader": record.leader,
        "current_state_timestamp": record.current_state_timestamp_ms,
        "members": [
            {
                "member_id": member.member_id,
                "group_instance_id": member.group_instance_id,
                "client_id": member.client_id,
                "client_host": member.client_host,
                "rebalance_timeout": member.rebalance_timeout_ms,
                "session_timeout": member.session_timeout_ms,
                "subscription": member.subscription,
                "assignment": member.assignment,
            }
            for member in record.members
        ],
    }
    return _encode(GROUP_VALUE_FIELDS, GROUP_VALUE_VERSION, value)


# ---------------------------------------------------------------- decoding


def _split_version(data: bytes | memoryview, what: str) -> tuple[int, memoryview]:
    view = memoryview(data)
    if len(view) < _VERSION.size:
        raise RecordFormatError(f"{what} of {len(view)} bytes has no version")
    return _VERSION.unpack_from(view)[0], view[_VERSION.size :]


def _decode(fields: tuple[F, ...], version: int, body: memoryview, what: str) -> dict[str, Any]:
    flexible = version >= FIRST_FLEXIBLE_VALUE_VERSION
    try:
        return compile_struct(fields, version, flexible=flexible).decode(body)
    except (ProtocolError, UnicodeDecodeError) as exc:
        raise RecordFormatError(f"{what} version {version} does not decode: {exc}") from exc


def decode_key(data: bytes | memoryview) -> RecordKey:
    """Decode a record key; versions this broker does not read give ``UnknownKey``."""
    version, body = _split_version(data, "key")
    if version in OFFSET_KEY_VERSIONS:
        key = _decode(OFFSET_KEY_FIELDS, 0, body, "offset commit key")
        return OffsetKey(key["group"], key["topic"], key["partition"])
    if version == GROUP_KEY_VERSION:
        return GroupKey(_decode(GROUP_KEY_FIELDS, 0, body, "group metadata key")["group"])
    if version == SHARE_STATE_KEY_VERSION:
        key = _decode(SHARE_STATE_KEY_FIELDS, 0, body, "share state key")
        return ShareStateKey(key["group"], bytes(key["topic_id"]), key["partition"])
    return UnknownKey(version)


def decode_offset_value(data: bytes | memoryview) -> CommittedOffset:
    version, body = _split_version(data, "offset commit value")
    if not 0 <= version <= VALUE_VERSION_MAX:
        raise RecordFormatError(f"offset commit value version {version} is unknown")
    value = _decode(OFFSET_VALUE_FIELDS, version, body, "offset commit value")
    return CommittedOffset(
        offset=value["offset"],
        metadata=value["metadata"],
        leader_epoch=value["leader_epoch"],
        commit_timestamp_ms=value["commit_timestamp"],
        expire_timestamp_ms=value["expire_timestamp"],
    )


def decode_group_value(data: bytes | memoryview) -> GroupRecord:
    version, body = _split_version(data, "group metadata value")
    if not 0 <= version <= VALUE_VERSION_MAX:
        raise RecordFormatError(f"group metadata value version {version} is unknown")
    value = _decode(GROUP_VALUE_FIELDS, version, body, "group metadata value")
    members = tuple(
        MemberRecord(
            member_id=member["member_id"],
            group_instance_id=member["group_instance_id"],
            client_id=member["client_id"],
            client_host=member["client_host"],
            rebalance_timeout_ms=(
                member["rebalance_timeout"] if version >= 1 else member["session_timeout"]
            ),
            session_timeout_ms=member["session_timeout"],
            subscription=bytes(member["subscription"]),
            assignment=bytes(member["assignment"]),
        )
        for member in value["members"]
    )
    return GroupRecord(
        protocol_type=value["protocol_type"],
        generation=value["generation"],
        protocol=value["protocol"],
        leader=value["leader"],
        current_state_timestamp_ms=value["current_state_timestamp"],
        members=members,
    )
