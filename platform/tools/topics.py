"""``platform topics``: create, list, describe, alter and delete topics through the admin API.

Each command is one function taking :class:`ClusterSettings`, its
arguments and an ``echo`` callable for output lines. The description of a
topic is first read into plain dataclasses; :func:`topic_description_lines`
lays them out without touching a client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from eventplatform.log.extensions import ENTITY_VERSIONS_CONFIG
from eventplatform.tools.arguments import ClusterSettings
from eventplatform.tools.errors import InvalidInputError, KafkaRequestError
from eventplatform.tools.kafka_clients import (
    admin_client,
    fetch_topic_description,
    translated_errors,
    wait_for,
)
from eventplatform.tools.tables import format_table

Echo = Callable[[str], Any]
BROKER_DEFAULT = -1  # NewTopic's "let the broker decide" for partitions and replication


@dataclass(frozen=True)
class PartitionSummary:
    """One partition as a describe shows it; ``leader`` is ``None`` when it has none."""

    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    in_sync_replicas: tuple[int, ...]


@dataclass(frozen=True)
class ConfigSummary:
    """One effective topic config: its value and where the value comes from (Kafka's name)."""

    name: str
    value: str | None
    source: str
    sensitive: bool = False


@dataclass(frozen=True)
class TopicSummary:
    name: str
    partitions: tuple[PartitionSummary, ...]
    configs: tuple[ConfigSummary, ...]


def create_topic(
    cluster: ClusterSettings,
    topic: str,
    *,
    partitions: int | None,
    replication_factor: int | None,
    configs: Mapping[str, str],
    echo: Echo,
) -> None:
    """Create ``topic``; ``None`` counts leave the choice to the broker's defaults."""
    new_topic = NewTopic(
        topic,
        num_partitions=BROKER_DEFAULT if partitions is None else partitions,
        replication_factor=BROKER_DEFAULT if replication_factor is None else replication_factor,
        config=dict(configs),
    )
    admin = admin_client(cluster)
    futures = admin.create_topics(
        [new_topic],
        request_timeout=cluster.request_timeout_s,
        operation_timeout=cluster.request_timeout_s,
    )
    wait_for(futures[topic], cluster, f"cannot create topic {topic!r}")
    echo(f"created topic {topic}")


def list_topics(cluster: ClusterSettings, *, echo: Echo) -> None:
    """Print every topic name the cluster reports, sorted, one per line."""
    admin = admin_client(cluster)
    metadata = wait_for_metadata(admin, cluster)
    for name in sorted(metadata.topics):
        echo(name)


def wait_for_metadata(admin: AdminClient, cluster: ClusterSettings) -> ClusterMetadata:
    """Cluster-wide metadata; the request names no topic, so it never creates one."""
    with translated_errors(cluster, "cannot list topics"):
        return admin.list_topics(timeout=cluster.request_timeout_s)


def describe_topic(cluster: ClusterSettings, topic: str, *, echo: Echo) -> None:
    """Print the topic's partitions (leader, replicas, in-sync replicas) and configs."""
    for line in topic_description_lines(read_topic_summary(cluster, topic)):
        echo(line)


def read_topic_summary(cluster: ClusterSettings, topic: str) -> TopicSummary:
    admin = admin_client(cluster)
    description = fetch_topic_description(admin, cluster, topic)
    partitions = tuple(
        PartitionSummary(
            partition=partition.id,
            leader=None if partition.leader is None else partition.leader.id,
            replicas=tuple(node.id for node in partition.replicas),
            in_sync_replicas=tuple(node.id for node in partition.isr),
        )
        for partition in sorted(description.partitions, key=lambda partition: partition.id)
    )
    resource = ConfigResource(ResourceType.TOPIC, topic)
    futures = admin.describe_configs([resource], request_timeout=cluster.request_timeout_s)
    entries: dict[str, ConfigEntry] = wait_for(
        futures[resource], cluster, f"cannot describe the configs of topic {topic!r}"
    )
    configs = tuple(
        ConfigSummary(
            name=entry.name,
            value=entry.value,
            source=config_source_name(entry.source),
            sensitive=entry.is_sensitive,
        )
        for entry in sorted(entries.values(), key=lambda entry: entry.name)
    )
    return TopicSummary(name=topic, partitions=partitions, configs=configs)


def config_source_name(source: object) -> str:
    """Kafka's name for a config source; librdkafka hands over either the enum or its int."""
    if isinstance(source, ConfigSource):
        return source.name
    if isinstance(source, int):
        try:
            return ConfigSource(source).name
        except ValueError:
            return ConfigSource.UNKNOWN_CONFIG.name
    return ConfigSource.UNKNOWN_CONFIG.name


def topic_description_lines(summary: TopicSummary) -> list[str]:
    """The describe output: a header, the partitions table, then the configs table."""
    replication_factors = {len(partition.replicas) for partition in summary.partitions}
    replication = ", ".join(str(factor) for factor in sorted(replication_factors)) or "-"
    lines = [
        f"topic: {summary.name}",
        f"partitions: {len(summary.partitions)}",
        f"replication factor: {replication}",
        "",
    ]
    lines += format_table(
        ("partition", "leader", "replicas", "in-sync"),
        (
            (
                partition.partition,
                "none" if partition.leader is None else partition.leader,
                ",".join(str(replica) for replica in partition.replicas),
                ",".join(str(replica) for replica in partition.in_sync_replicas),
            )
            for partition in summary.partitions
        ),
    )
    lines.append("")
    lines += format_table(
        ("config", "value", "source"),
        ((config.name, config_value_text(config), config.source) for config in summary.configs),
    )
    return lines


def config_value_text(config: ConfigSummary) -> str:
    if config.sensitive:
        return "(sensitive)"
    return "null" if config.value is None else config.value


def alter_topic(
    cluster: ClusterSettings,
    topic: str,
    *,
    set_configs: Mapping[str, str],
    delete_configs: Sequence[str],
    partitions: int | None,
    echo: Echo,
    force: bool = False,
) -> None:
    """Change config overrides key by key, then raise the partition count.

    Config changes go through IncrementalAlterConfigs, so overrides not
    named stay as they are. The partition count can only grow. The broker
    refuses more partitions for a topic that keeps entity versions; ``force``
    turns them off first (``eventplatform.entity.versions.enable=false``).
    """
    check_alterations(set_configs, delete_configs, partitions)
    if force and partitions is not None:
        set_configs = {**set_configs, ENTITY_VERSIONS_CONFIG: "false"}
        echo(
            f"topic {topic}: entity versions turned off: the entities whose keys move to the "
            "new partitions lose their order and versions"
        )
    admin = admin_client(cluster)
    if set_configs or delete_configs:
        entries = [
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in set_configs.items()
        ] + [
            ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)
            for name in delete_configs
        ]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        config_futures = admin.incremental_alter_configs(
            [resource], request_timeout=cluster.request_timeout_s
        )
        action = f"cannot change the configs of topic {topic!r}"
        wait_for(config_futures[resource], cluster, action)
        for line in config_change_lines(topic, set_configs, delete_configs):
            echo(line)
    if partitions is not None:
        partition_futures = admin.create_partitions(
            [NewPartitions(topic, partitions)],
            request_timeout=cluster.request_timeout_s,
            operation_timeout=cluster.request_timeout_s,
        )
        wait_for(partition_futures[topic], cluster, f"cannot add partitions to topic {topic!r}")
        echo(f"topic {topic} now has {partitions} partitions")


def check_alterations(
    set_configs: Mapping[str, str], delete_configs: Sequence[str], partitions: int | None
) -> None:
    """Reject an alter that changes nothing or both sets and deletes one key."""
    if not set_configs and not delete_configs and partitions is None:
        raise InvalidInputError("nothing to change: give --set, --delete or --partitions")
    both = sorted(set(set_configs) & set(delete_configs))
    if both:
        raise InvalidInputError(f"{', '.join(both)}: cannot both --set and --delete one config")


def config_change_lines(
    topic: str, set_configs: Mapping[str, str], delete_configs: Sequence[str]
) -> list[str]:
    lines = [f"topic {topic}: set {name}={value}" for name, value in set_configs.items()]
    lines += [f"topic {topic}: deleted {name} (back to its default)" for name in delete_configs]
    return lines


def delete_topic(cluster: ClusterSettings, topic: str, *, echo: Echo) -> None:
    """Delete ``topic`` and all its data."""
    admin = admin_client(cluster)
    futures = admin.delete_topics(
        [topic],
        request_timeout=cluster.request_timeout_s,
        operation_timeout=cluster.request_timeout_s,
    )
    try:
        wait_for(futures[topic], cluster, f"cannot delete topic {topic!r}")
    except KafkaRequestError as error:
        if error.code == "UNKNOWN_TOPIC_OR_PART":
            raise KafkaRequestError(f"topic {topic!r} does not exist", code=error.code) from error
        raise
    echo(f"deleted topic {topic}")
