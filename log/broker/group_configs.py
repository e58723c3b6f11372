"""Group configs (config resource type 32) as DescribeConfigs reports them.

Kafka 4 lets a group override a few coordinator settings of the newer group
protocols (KIP-848 consumer groups, KIP-932 share groups). This broker runs
classic groups only, so no group config changes its behaviour: every group,
existing or not, is described with Kafka's defaults (source
DEFAULT_CONFIG), and altering them is refused by the Alter*Configs handlers
with INVALID_REQUEST. An empty group name is INVALID_REQUEST, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from eventplatform.log.broker.config_resources import ConfigSource, ConfigType, _entry
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.topics import TopicError

GROUP_RESOURCE_TYPE = 32

GROUP_CONFIG_DEFAULTS: dict[str, tuple[str, ConfigType]] = {
    "consumer.session.timeout.ms": ("45000", ConfigType.INT),
    "consumer.heartbeat.interval.ms": ("5000", ConfigType.INT),
    "share.session.timeout.ms": ("45000", ConfigType.INT),
    "share.heartbeat.interval.ms": ("5000", ConfigType.INT),
    "share.record.lock.duration.ms": ("30000", ConfigType.INT),
    "share.auto.offset.reset": ("latest", ConfigType.STRING),
}
"""Every group config of Kafka 4 with its default (the broker's ``group.*`` default)."""


def describe_group(name: str, keys: list[str] | None, *, synonyms: bool) -> list[dict[str, Any]]:
    """The group configs named by ``keys`` (all when None) of group ``name``."""
    if not name:
        raise TopicError(ErrorCode.INVALID_REQUEST, "a group config resource needs a group name")
    wanted = GROUP_CONFIG_DEFAULTS if keys is None else keys
    return [
        _entry(
            key,
            GROUP_CONFIG_DEFAULTS[key][0],
            [(key, GROUP_CONFIG_DEFAULTS[key][0], ConfigSource.DEFAULT_CONFIG)],
            GROUP_CONFIG_DEFAULTS[key][1],
            synonyms=synonyms,
            read_only=False,
        )
        for key in wanted
        if key in GROUP_CONFIG_DEFAULTS
    ]
