"""Config resources as DescribeConfigs and the Alter*Configs APIs see them.

A topic's value comes from its own override (source DYNAMIC_TOPIC_CONFIG),
else from the broker's ``log.*`` setting when that differs from Kafka's
default (STATIC_BROKER_CONFIG), else from the default (DEFAULT_CONFIG).
Broker configs are static: read at start from the file and overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from eventplatform.log.config import LOG_KEYS, BrokerConfig
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.topics import TopicError
from eventplatform.log.storage import LogConfig

if TYPE_CHECKING:
    from eventplatform.log.broker.broker import Broker


class ResourceType(IntEnum):
    TOPIC = 2
    BROKER = 4
    GROUP = 32


class ConfigSource(IntEnum):
    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


class ConfigType(IntEnum):
    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7


_TOPIC_TYPES = {
    "segment.bytes": ConfigType.INT,
    "index.interval.bytes": ConfigType.INT,
    "segment.index.bytes": ConfigType.INT,
    "max.message.bytes": ConfigType.INT,
    "min.insync.replicas": ConfigType.INT,
    "compression.gzip.level": ConfigType.INT,
    "compression.lz4.level": ConfigType.INT,
    "compression.zstd.level": ConfigType.INT,
    "min.cleanable.dirty.ratio": ConfigType.DOUBLE,
    "cleanup.policy": ConfigType.LIST,
    "leader.replication.throttled.replicas": ConfigType.LIST,
    "follower.replication.throttled.replicas": ConfigType.LIST,
    "message.timestamp.type": ConfigType.STRING,
    "compression.type": ConfigType.STRING,
    "unclean.leader.election.enable": ConfigType.BOOLEAN,
    "preallocate": ConfigType.BOOLEAN,
    "remote.storage.enable": ConfigType.BOOLEAN,
    "remote.log.copy.disable": ConfigType.BOOLEAN,
    "remote.log.delete.on.disable": ConfigType.BOOLEAN,
    "eventplatform.entity.versions.enable": ConfigType.BOOLEAN,
}
"""Kafka's type of each topic config; the others are LONG."""
_TOPIC_TO_BROKER_KEY = {topic: broker for broker, topic in LOG_KEYS.items()}


def describe_topic(
    broker: Broker, name: str, keys: list[str] | None, *, synonyms: bool
) -> list[dict[str, Any]]:
    topic = broker.topics.get(name)
    if topic is None:
        raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    effective = topic.log_config.to_properties()
    broker_values = broker.config.log_defaults.to_properties()
    kafka_defaults = LogConfig().to_properties()
    out = []
    for key, value in effective.items():
        if keys is not None and key not in keys:
            continue
        chain = []
        if key in topic.configs:
            chain.append((key, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if broker_values[key] != kafka_defaults[key] and key in _TOPIC_TO_BROKER_KEY:
            chain.append(
                (_TOPIC_TO_BROKER_KEY[key], broker_values[key], ConfigSource.STATIC_BROKER_CONFIG)
            )
        chain.append((key, kafka_defaults[key], ConfigSource.DEFAULT_CONFIG))
        kind = _TOPIC_TYPES.get(key, ConfigType.LONG)
        out.append(_entry(key, value, chain, kind, synonyms=synonyms, read_only=False))
    return out


def describe_broker(
    config: BrokerConfig, keys: list[str] | None, *, synonyms: bool
) -> list[dict[str, Any]]:
    defaults = BrokerConfig().to_properties()
    out = []
    for key, value in config.to_properties().items():
        if keys is not None and key not in keys:
            continue
        source = (
            ConfigSource.DEFAULT_CONFIG
            if defaults[key] == value
            else ConfigSource.STATIC_BROKER_CONFIG
        )
        chain = [(key, value, source)]
        out.append(
            _entry(key, value, chain, _broker_type(value), synonyms=synonyms, read_only=True)
        )
    return out


SENSITIVE_KEYS = frozenset({"ssl.key.password"})
"""Keys whose values DescribeConfigs never shows (Kafka's PASSWORD type): null, and
``is_sensitive`` set."""


def _broker_type(value: str) -> ConfigType:
    if value in ("true", "false"):
        return ConfigType.BOOLEAN
    return ConfigType.LONG if value.lstrip("-").isdigit() else ConfigType.STRING


def _entry(
    key: str,
    value: str,
    chain: list[tuple[str, str, ConfigSource]],
    kind: ConfigType,
    *,
    synonyms: bool,
    read_only: bool,
) -> dict[str, Any]:
    source = chain[0][2]
    sensitive = key in SENSITIVE_KEYS
    return {
        "name": key,
        "value": None if sensitive or value == "" else value,
        "read_only": read_only,
        "is_default": source is ConfigSource.DEFAULT_CONFIG,
        "config_source": source,
        "is_sensitive": sensitive,
        "synonyms": [
            {
                "name": name,
                "value": None if sensitive else synonym or None,
                "source": synonym_source,
            }
            for name, synonym, synonym_source in chain
        ]
        if synonyms
        else [],
        "config_type": kind,
        "documentation": None,
    }


def merged_topic_configs(
    current: Mapping[str, str],
    effective: Mapping[str, str],
    changes: list[dict[str, Any]],
    *,
    incremental: bool,
) -> dict[str, str]:
    """Apply AlterConfigs (replace all) or IncrementalAlterConfigs operations.

    ``current`` holds the topic's overrides and ``effective`` every value in
    force; APPEND and SUBTRACT start from the value in force, as Kafka's do.
    """
    if not incremental:
        return {entry["name"]: entry["value"] for entry in changes if entry["value"] is not None}
    result = dict(current)
    for entry in changes:
        name, operation, value = entry["name"], entry["config_operation"], entry["value"]
        if operation == 0:  # SET
            if value is None:
                raise TopicError(ErrorCode.INVALID_CONFIG, f"SET {name} needs a value")
            result[name] = value
        elif operation == 1:  # DELETE
            result.pop(name, None)
        elif operation in (2, 3):  # APPEND, SUBTRACT on list configs
            if name != "cleanup.policy":
                raise TopicError(ErrorCode.INVALID_CONFIG, f"{name} is not a list config")
            items = [item for item in result.get(name, effective[name]).split(",") if item]
            given = [item.strip() for item in (value or "").split(",") if item.strip()]
            if operation == 2:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            result[name] = ",".join(items)
        else:
            raise TopicError(ErrorCode.INVALID_REQUEST, f"unknown config operation {operation}")
    return result


async def apply_alter_request(
    broker: Broker,
    request: Mapping[str, Any],
    *,
    incremental: bool,
    allowed: Callable[[str], bool],
    group_allowed: Callable[[str], bool] = lambda name: True,
) -> list[dict[str, Any]]:
    """Answer an AlterConfigs or IncrementalAlterConfigs request, resource by resource;
    a topic ``allowed`` refuses is TOPIC_AUTHORIZATION_FAILED, a group ``group_allowed``
    refuses GROUP_AUTHORIZATION_FAILED."""
    responses = []
    for resource in request["resources"]:
        kind, name = resource["resource_type"], resource["resource_name"]
        response: dict[str, Any] = {"resource_type": kind, "resource_name": name}
        try:
            if kind == ResourceType.GROUP:
                await _alter_group(broker, request, resource, incremental, group_allowed)
                response.update(error_code=0, error_message=None)
                responses.append(response)
                continue
            if kind != ResourceType.TOPIC:
                raise TopicError(
                    ErrorCode.INVALID_REQUEST,
                    "only topic and group configs can be altered at run time",
                )
            if not allowed(name):
                raise TopicError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "ALTER_CONFIGS")
            topic = broker.topics.get(name)
            current = topic.configs if topic is not None else {}
            effective = (topic.log_config if topic is not None else LogConfig()).to_properties()
            merged = merged_topic_configs(
                current, effective, resource["configs"], incremental=incremental
            )
            if request["validate_only"]:
                broker.topics.check_configs(name, merged)
            else:
                await broker.set_topic_configs(name, dict(merged))
            response.update(error_code=0, error_message=None)
        except TopicError as exc:
            response.update(error_code=exc.code, error_message=str(exc))
        responses.append(response)
    return responses


async def _alter_group(
    broker: Broker,
    request: Mapping[str, Any],
    resource: Mapping[str, Any],
    incremental: bool,
    allowed: Callable[[str], bool],
) -> None:
    """Set a group's config overrides (SET and DELETE; no group config is a list)."""
    from eventplatform.log.broker.group_configs import GROUP_CONFIG_DEFAULTS

    name = resource["resource_name"]
    if not name:
        raise TopicError(ErrorCode.INVALID_REQUEST, "a group config resource needs a group name")
    if not allowed(name):
        raise TopicError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "ALTER_CONFIGS")
    current = broker.group_configs.overrides(name)
    effective = {key: broker.group_configs.get(name, key) for key in GROUP_CONFIG_DEFAULTS}
    for entry in resource["configs"]:
        if entry.get("config_operation", 0) in (2, 3):
            raise TopicError(ErrorCode.INVALID_CONFIG, f"{entry['name']} is not a list config")
    merged = merged_topic_configs(current, effective, resource["configs"], incremental=incremental)
    broker.group_configs.check(name, merged)
    if not request["validate_only"]:
        await broker.membership.set_group_configs(name, dict(merged))
