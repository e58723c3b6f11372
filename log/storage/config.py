"""Per-log configuration, with Kafka's topic-level names, defaults and bounds.

``LogConfig.from_properties`` accepts the string values of a TOML file, a
CLI override or a CreateTopics request and rejects unknown keys and bad values
with an :class:`InvalidConfigError` that names the key.
"""

from __future__ import annotations

import dataclasses
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

CLEANUP_POLICIES = ("delete", "compact")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


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

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

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
        return dataclasses.replace(base or cls(), **changes)

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
}
