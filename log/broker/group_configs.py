"""Group configs (config resource type 32): per-group overrides of the coordinator's
settings for share groups (KIP-932) and consumer groups (KIP-848).

A group's config is its override (source GROUP_CONFIG) or Kafka's
default (DEFAULT_CONFIG). Overrides may be set for a group that does not exist
yet, as in Kafka, and are kept by a broker on its own in ``group-configs.json``
in its data directory (replaced atomically on each change), and by a cluster
in its metadata, so every broker reads the same. Values are checked when set:
an unknown key, a number out of its range or an unknown
``share.auto.offset.reset`` is INVALID_CONFIG, and nothing of the request is
applied. An empty group name is INVALID_REQUEST.

The share groups of this broker read ``share.auto.offset.reset`` (where a share
group starts reading a partition: ``latest``, the default, or ``earliest``),
``share.record.lock.duration.ms``, ``share.session.timeout.ms`` and
``share.heartbeat.interval.ms``. The ``consumer.*`` keys are kept and described;
this broker runs classic consumer groups, which do not read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from eventplatform.log.broker.config_resources import ConfigSource, ConfigType, _entry
from eventplatform.log.config import BrokerConfig
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.topics import TopicError
from eventplatform.log.storage.files import write_atomically

GROUP_RESOURCE_TYPE = 32
GROUP_CONFIGS_FILE = "group-configs.json"
GROUP_CONFIG_GROUPS_MAX = 100_000
"""The most groups with overrides a broker keeps."""

GROUP_CONFIG_DEFAULTS: dict[str, tuple[str, ConfigType]] = {
    "consumer.session.timeout.ms": ("45000", ConfigType.INT),
    "consumer.heartbeat.interval.ms": ("5000", ConfigType.INT),
    "share.session.timeout.ms": ("45000", ConfigType.INT),
    "share.heartbeat.interval.ms": ("5000", ConfigType.INT),
    "share.record.lock.duration.ms": ("30000", ConfigType.INT),
    "share.auto.offset.reset": ("latest", ConfigType.STRING),
}
"""Every group config of Kafka 4 with its default (the broker's ``group.*`` default)."""
_RANGES = {
    "consumer.session.timeout.ms": (45_000, 60_000),
    "consumer.heartbeat.interval.ms": (5_000, 15_000),
    "share.session.timeout.ms": (45_000, 60_000),
    "share.heartbeat.interval.ms": (5_000, 15_000),
    "share.record.lock.duration.ms": (15_000, 60_000),
}
"""Kafka's bounds for each number (its broker-side ``group.*.min/max`` defaults)."""
_RESETS = ("latest", "earliest")


class GroupConfigStore:
    """Every group's overrides; see the module docstring. ``path`` None: in memory
    (a cluster member's copy of the metadata's). ``config`` sets the broker-wide
    default of ``share.record.lock.duration.ms`` and its bounds
    (``group.share.record.lock.duration.ms``, ``group.share.min/max.record.lock.duration.ms``)."""

    def __init__(self, path: Path | None, config: BrokerConfig | None = None) -> None:
        self.path = path
        self.defaults = {key: default for key, (default, _) in GROUP_CONFIG_DEFAULTS.items()}
        self.ranges = dict(_RANGES)
        if config is not None:
            lock = "share.record.lock.duration.ms"
            self.defaults[lock] = str(config.group_share_record_lock_duration_ms)
            self.ranges[lock] = (
                config.group_share_min_record_lock_duration_ms,
                config.group_share_max_record_lock_duration_ms,
            )
        self._overrides: dict[str, dict[str, str]] = {}
        if path is not None and path.exists():
            document = orjson.loads(path.read_bytes())
            self._overrides = {g: dict(c) for g, c in document["groups"].items()}

    def get(self, group_id: str, key: str) -> str:
        return self._overrides.get(group_id, {}).get(key, self.defaults[key])

    def get_int(self, group_id: str, key: str) -> int:
        return int(self.get(group_id, key))

    def overrides(self, group_id: str) -> dict[str, str]:
        return dict(self._overrides.get(group_id, {}))

    def all(self) -> dict[str, dict[str, str]]:
        return {group: dict(configs) for group, configs in self._overrides.items()}

    def set(self, group_id: str, configs: Mapping[str, str]) -> None:
        """Replace ``group_id``'s overrides (checked: :func:`check_group_configs`)."""
        overrides = self.all()
        if configs:
            overrides[group_id] = dict(configs)
        else:
            overrides.pop(group_id, None)
        if len(overrides) > GROUP_CONFIG_GROUPS_MAX:
            raise TopicError(
                ErrorCode.INVALID_CONFIG, f"at most {GROUP_CONFIG_GROUPS_MAX} groups have configs"
            )
        if self.path is not None:
            write_atomically(self.path, orjson.dumps({"version": 1, "groups": overrides}))
        self._overrides = overrides

    def replace_all(self, overrides: Mapping[str, Mapping[str, str]]) -> None:
        self._overrides = {group: dict(configs) for group, configs in overrides.items()}

    def describe(
        self, name: str, keys: list[str] | None, *, synonyms: bool
    ) -> list[dict[str, Any]]:
        """The group configs named by ``keys`` (all when None) of group ``name``."""
        if not name:
            raise TopicError(
                ErrorCode.INVALID_REQUEST, "a group config resource needs a group name"
            )
        overrides = self._overrides.get(name, {})
        out = []
        for key in GROUP_CONFIG_DEFAULTS if keys is None else keys:
            if key not in GROUP_CONFIG_DEFAULTS:
                continue
            default, kind = self.defaults[key], GROUP_CONFIG_DEFAULTS[key][1]
            chain = [(key, default, ConfigSource.DEFAULT_CONFIG)]
            if key in overrides:
                chain.insert(0, (key, overrides[key], ConfigSource.GROUP_CONFIG))
            out.append(_entry(key, chain[0][1], chain, kind, synonyms=synonyms, read_only=False))
        return out

    def check(self, name: str, configs: Mapping[str, str]) -> None:
        """Refuse (TopicError) a group name or override this broker would not keep."""
        check_group_configs(name, configs, self.ranges)


def check_group_configs(
    name: str, configs: Mapping[str, str], ranges: Mapping[str, tuple[int, int]] = _RANGES
) -> None:
    """Refuse (TopicError) a group name or override that ``ranges`` do not allow."""
    if not name:
        raise TopicError(ErrorCode.INVALID_REQUEST, "a group config resource needs a group name")
    for key, value in configs.items():
        if key not in GROUP_CONFIG_DEFAULTS:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"unknown group config {key}")
        if key == "share.auto.offset.reset":
            if value not in _RESETS:
                raise TopicError(
                    ErrorCode.INVALID_CONFIG,
                    f"share.auto.offset.reset must be one of {', '.join(_RESETS)}, not {value!r}",
                )
            continue
        low, high = ranges[key]
        try:
            number = int(value)
        except ValueError:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"{key} must be a number") from None
        if not low <= number <= high:
            raise TopicError(ErrorCode.INVALID_CONFIG, f"{key} must be in [{low}, {high}]")
