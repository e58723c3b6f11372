"""Per-log configuration, with Kafka's topic-level names, defaults and bounds.

``LogConfig.from_properties`` accepts the string values of a TOML file, a
CLI override or a CreateTopics request and rejects unknown keys and bad values
with an :class:`InvalidConfigError` that names the key.

Every topic config of Kafka 4 is known here, with Kafka's default and the
range Kafka accepts. A few are kept and reported but change nothing on this
broker, for the reason given at their field: batches stay as the producer
compressed them, there are no replication quotas and no remote storage.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from eventplatform.log.storage.errors import InvalidConfigError

DAY_MS = 24 * 60 * 60 * 1000
SEGMENT_BYTES_DEFAULT = 1024 * 1024 * 1024
SEGMENT_BYTES_MIN = 14
SEGMENT_MS_DEFAULT = 7 * DAY_MS
SEGMENT_INDEX_BYTES_DEFAULT = 10 * 1024 * 1024
INDEX_INTERVAL_BYTES_DEFAULT = 4096
RETENTION_MS_DEFAULT = 7 * DAY_MS
DELETE_RETENTION_MS_DEFAULT = DAY_MS
MAX_MESSAGE_BYTES_DEFAULT = 1024 * 1024 + 12
FILE_DELETE_DELAY_MS_DEFAULT = 60_000
PERIODIC_FLUSH_MS_DEFAULT = 60_000
MIN_CLEANABLE_DIRTY_RATIO_DEFAULT = 0.5
CLEANER_KEYS_MAX_DEFAULT = 1_000_000
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
GZIP_LEVEL_DEFAULT = -1
"""zlib's own default level (6), as Kafka names it."""
GZIP_LEVEL_MIN, GZIP_LEVEL_MAX = 1, 9
LZ4_LEVEL_DEFAULT, LZ4_LEVEL_MIN, LZ4_LEVEL_MAX = 9, 1, 17
ZSTD_LEVEL_DEFAULT, ZSTD_LEVEL_MIN, ZSTD_LEVEL_MAX = 3, -131072, 22
LOCAL_RETENTION_FROM_RETENTION = -2
"""``local.retention.*``: the same as ``retention.*``."""

CLEANUP_POLICIES = ("delete", "compact")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
ALL_REPLICAS = "*"
_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition log; field names are Kafka's with dots as underscores."""

    segment_bytes: int = SEGMENT_BYTES_DEFAULT
    segment_ms: int = SEGMENT_MS_DEFAULT
    segment_index_bytes: int = SEGMENT_INDEX_BYTES_DEFAULT
    index_interval_bytes: int = INDEX_INTERVAL_BYTES_DEFAULT
    retention_ms: int = RETENTION_MS_DEFAULT
    retention_bytes: int = -1
    cleanup_policy: frozenset[str] = frozenset({"delete"})
    delete_retention_ms: int = DELETE_RETENTION_MS_DEFAULT
    min_cleanable_dirty_ratio: float = MIN_CLEANABLE_DIRTY_RATIO_DEFAULT
    max_message_bytes: int = MAX_MESSAGE_BYTES_DEFAULT
    flush_messages: int | None = None
    flush_ms: int | None = None
    message_timestamp_type: str = "CreateTime"
    file_delete_delay_ms: int = FILE_DELETE_DELAY_MS_DEFAULT
    min_insync_replicas: int = 1
    """How many replicas, the leader included, an acks=all produce needs in the ISR."""
    unclean_leader_election_enable: bool = False
    """Whether a replica outside the ISR may lead when no ISR member is alive."""
    min_compaction_lag_ms: int = 0
    """How old a record must be before compaction may remove it."""
    max_compaction_lag_ms: int = INT64_MAX
    """How old a dirty record may grow before its segment is compacted whatever the dirty
    ratio; on a compacted topic the active segment also rolls at this age."""
    message_timestamp_before_max_ms: int = INT64_MAX
    """How far a CreateTime timestamp may lie in the past (INVALID_TIMESTAMP beyond)."""
    message_timestamp_after_max_ms: int = INT64_MAX
    """How far a CreateTime timestamp may lie in the future (INVALID_TIMESTAMP beyond)."""
    compression_type: str = "producer"
    """Kept and reported; inert: batches are stored as the producer compressed them (what
    ``producer`` means), since the broker never re-encodes records on the produce path."""
    compression_gzip_level: int = GZIP_LEVEL_DEFAULT
    """Inert with ``compression.type``: the level the broker would re-compress at."""
    compression_lz4_level: int = LZ4_LEVEL_DEFAULT
    """Inert with ``compression.type``."""
    compression_zstd_level: int = ZSTD_LEVEL_DEFAULT
    """Inert with ``compression.type``."""
    segment_jitter_ms: int = 0
    """Kept and reported; inert: segments roll at ``segment.ms`` exactly."""
    preallocate: bool = False
    """Kept and reported; inert: segment files grow with their appends."""
    leader_replication_throttled_replicas: str = ""
    """Kept and reported; inert: replication has no quotas here."""
    follower_replication_throttled_replicas: str = ""
    """Kept and reported; inert: replication has no quotas here."""
    remote_storage_enable: bool = False
    """Only false: this broker has no remote (tiered) storage."""
    local_retention_ms: int = LOCAL_RETENTION_FROM_RETENTION
    """Inert, as in Kafka without remote storage: local retention is ``retention.ms``."""
    local_retention_bytes: int = LOCAL_RETENTION_FROM_RETENTION
    """Inert, as in Kafka without remote storage: local retention is ``retention.bytes``."""
    remote_log_copy_disable: bool = False
    """Inert, as in Kafka without remote storage."""
    remote_log_delete_on_disable: bool = False
    """Inert, as in Kafka without remote storage."""
    eventplatform_entity_versions_enable: bool = False
    """Whether the partitions count each key's records (its entity's version) and append a
    record with an ``eventplatform.expected.version`` header only at that version."""

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def roll_ms(self) -> int:
        """The age at which the active segment rolls: ``segment.ms``, or on a compacted
        topic ``max.compaction.lag.ms`` when that is sooner, so that a dirty record in the
        active segment reaches a segment the cleaner may compact within that lag."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def flush_interval_ms(self) -> int:
        """``flush.ms`` when set; otherwise the periodic fsync of the page-cache default."""
        return PERIODIC_FLUSH_MS_DEFAULT if self.flush_ms is None else self.flush_ms

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, Any], base: LogConfig | None = None
    ) -> LogConfig:
        """Apply Kafka-named ``properties`` (``segment.bytes``...) over ``base`` or defaults."""
        changes: dict[str, Any] = {}
        for key, raw in properties.items():
            parse = _PARSERS.get(key)
            if parse is None:
                known = ", ".join(sorted(_PARSERS))
                raise InvalidConfigError(f"unknown log config {key!r}; known: {known}")
            try:
                changes[key.replace(".", "_")] = parse(raw)
            except (TypeError, ValueError) as exc:
                raise InvalidConfigError(f"invalid value {raw!r} for {key}: {exc}") from None
        config = dataclasses.replace(base or cls(), **changes)
        if config.eventplatform_entity_versions_enable and config.compact:
            raise InvalidConfigError(
                "eventplatform.entity.versions.enable needs every record kept: "
                "cleanup.policy must not include compact"
            )
        if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"min.compaction.lag.ms {config.min_compaction_lag_ms} is larger than "
                f"max.compaction.lag.ms {config.max_compaction_lag_ms}"
            )
        return config

    def to_properties(self) -> dict[str, str]:
        """Kafka-named string values, as DescribeConfigs reports them."""
        out = {}
        for key in _PARSERS:
            value = getattr(self, key.replace(".", "_"))
            if isinstance(value, frozenset):
                value = ",".join(sorted(value))
            elif isinstance(value, bool):
                value = str(value).lower()
            out[key] = str(INT64_MAX) if value is None else str(value)
        return out


def integer_between(low: int, high: int = INT64_MAX) -> Callable[[Any], int]:
    def parse(raw: Any) -> int:
        if isinstance(raw, bool):
            raise ValueError("expected an integer")
        value = int(raw)
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


def _optional_integer(low: int) -> Callable[[Any], int | None]:
    parse_integer = integer_between(low)

    def parse(raw: Any) -> int | None:
        if raw is None or raw == "" or str(raw) == str(INT64_MAX):
            return None
        return parse_integer(raw)

    return parse


def _ratio(raw: Any) -> float:
    value = float(raw)
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


def _cleanup_policy(raw: Any) -> frozenset[str]:
    items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    policies = frozenset(str(item).strip() for item in items if str(item).strip())
    if not policies or not policies <= set(CLEANUP_POLICIES):
        raise ValueError(f"expected a comma-separated subset of {', '.join(CLEANUP_POLICIES)}")
    return policies


def boolean(raw: Any) -> bool:
    """``true`` or ``false`` (any case), or a TOML boolean."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ValueError("expected true or false")
    return text == "true"


def _timestamp_type(raw: Any) -> str:
    if raw not in TIMESTAMP_TYPES:
        raise ValueError(f"expected one of {', '.join(TIMESTAMP_TYPES)}")
    return str(raw)


def _compression_type(raw: Any) -> str:
    text = str(raw).strip()
    if text not in COMPRESSION_TYPES:
        raise ValueError(f"expected one of {', '.join(COMPRESSION_TYPES)}")
    return text


def _gzip_level(raw: Any) -> int:
    """1 (fastest) to 9 (smallest), or -1 for zlib's default, as Kafka accepts."""
    value = integer_between(GZIP_LEVEL_DEFAULT, GZIP_LEVEL_MAX)(raw)
    if value != GZIP_LEVEL_DEFAULT and value < GZIP_LEVEL_MIN:
        raise ValueError(f"must be -1 or between {GZIP_LEVEL_MIN} and {GZIP_LEVEL_MAX}")
    return value


def _throttled_replicas(raw: Any) -> str:
    """Kafka's replica list for replication quotas: ``*``, or ``partition:broker`` pairs."""
    items = [item.strip() for item in str(raw).split(",")]
    if items == [ALL_REPLICAS]:
        return ALL_REPLICAS
    if not all(_THROTTLED_REPLICA.fullmatch(item) for item in items):
        raise ValueError("expected * or a comma-separated list of partition:broker pairs")
    return ",".join(item for item in items if item)


def _remote_storage(raw: Any) -> bool:
    if boolean(raw):
        raise ValueError("this broker has no remote storage (remote.log.storage.system.enable)")
    return False


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "segment.bytes": integer_between(SEGMENT_BYTES_MIN, INT32_MAX),
    "segment.ms": integer_between(1),
    "segment.index.bytes": integer_between(4 * 12),
    "index.interval.bytes": integer_between(0, INT32_MAX),
    "retention.ms": integer_between(-1),
    "retention.bytes": integer_between(-1),
    "cleanup.policy": _cleanup_policy,
    "delete.retention.ms": integer_between(0),
    "min.cleanable.dirty.ratio": _ratio,
    "max.message.bytes": integer_between(0, INT32_MAX),
    "flush.messages": _optional_integer(1),
    "flush.ms": _optional_integer(0),
    "message.timestamp.type": _timestamp_type,
    "file.delete.delay.ms": integer_between(0),
    "min.insync.replicas": integer_between(1, INT32_MAX),
    "unclean.leader.election.enable": boolean,
    "min.compaction.lag.ms": integer_between(0),
    "max.compaction.lag.ms": integer_between(1),
    "message.timestamp.before.max.ms": integer_between(0),
    "message.timestamp.after.max.ms": integer_between(0),
    "compression.type": _compression_type,
    "compression.gzip.level": _gzip_level,
    "compression.lz4.level": integer_between(LZ4_LEVEL_MIN, LZ4_LEVEL_MAX),
    "compression.zstd.level": integer_between(ZSTD_LEVEL_MIN, ZSTD_LEVEL_MAX),
    "segment.jitter.ms": integer_between(0),
    "preallocate": boolean,
    "leader.replication.throttled.replicas": _throttled_replicas,
    "follower.replication.throttled.replicas": _throttled_replicas,
    "remote.storage.enable": _remote_storage,
    "local.retention.ms": integer_between(LOCAL_RETENTION_FROM_RETENTION),
    "local.retention.bytes": integer_between(LOCAL_RETENTION_FROM_RETENTION),
    "remote.log.copy.disable": boolean,
    "remote.log.delete.on.disable": boolean,
    "eventplatform.entity.versions.enable": boolean,
}
