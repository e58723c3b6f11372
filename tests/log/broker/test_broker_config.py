"""BrokerConfig: Kafka's broker keys from a TOML file and overrides, errors that name the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from eventplatform.log.broker.runner import parse_listen
from eventplatform.log.config import BrokerConfig, BrokerConfigError
from eventplatform.log.storage import LogConfig

HOUR_MS = 3_600_000


def test_defaults_follow_kafka() -> None:
    config = BrokerConfig()
    assert config.auto_create_topics_enable is True
    assert config.num_partitions == 1
    assert config.socket_request_max_bytes == 100 * 1024 * 1024
    assert config.connections_max_idle_ms == 600_000
    assert config.offsets_topic_num_partitions == 50
    assert config.log_defaults == LogConfig()
    assert config.advertised == "127.0.0.1"


def test_a_toml_file_with_flat_and_nested_keys(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(
        "\n".join(
            [
                '"num.partitions" = 6',
                '"auto.create.topics.enable" = false',
                "[log]",
                "retention.ms = 5000",
                '"cleanup.policy" = "compact"',
                "[socket.request]",
                '"max.bytes" = 4096',
            ]
        )
    )
    config = BrokerConfig.load(path)
    assert config.num_partitions == 6
    assert config.auto_create_topics_enable is False
    assert config.socket_request_max_bytes == 4096
    assert config.log_defaults.retention_ms == 5000
    assert config.log_defaults.cleanup_policy == frozenset({"compact"})


def test_overrides_beat_the_file_and_fields_beat_both(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('"num.partitions" = 6\n"node.id" = 3\n')
    config = BrokerConfig.load(
        path, ["num.partitions = 8", "message.max.bytes=2048"], node_id=9, data_dir=tmp_path
    )
    assert (config.num_partitions, config.node_id, config.data_dir) == (8, 9, tmp_path)
    assert config.log_defaults.max_message_bytes == 2048


@pytest.mark.parametrize(
    ("override", "expected_ms"),
    [
        ("log.retention.hours=2", 2 * HOUR_MS),
        ("log.retention.minutes=3", 3 * 60_000),
        ("log.retention.ms=1234", 1234),
    ],
)
def test_retention_aliases(override: str, expected_ms: int) -> None:
    assert BrokerConfig.load(None, [override]).log_defaults.retention_ms == expected_ms


def test_log_keys_map_to_topic_configs() -> None:
    config = BrokerConfig.load(
        None,
        [
            "log.segment.bytes=1048576",
            "log.roll.hours=1",
            "log.flush.interval.messages=1",
            "log.message.timestamp.type=LogAppendTime",
        ],
    )
    defaults = config.log_defaults
    assert defaults.segment_bytes == 1048576
    assert defaults.segment_ms == HOUR_MS
    assert defaults.flush_messages == 1
    assert defaults.message_timestamp_type == "LogAppendTime"


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("no.such.key=1", "no.such.key"),
        ("num.partitions=0", "num.partitions"),
        ("num.partitions=many", "num.partitions"),
        ("auto.create.topics.enable=maybe", "auto.create.topics.enable"),
        ("default.replication.factor=3", "default.replication.factor"),
        ("socket.request.max.bytes=10", "socket.request.max.bytes"),
        ("log.retention.hours=soon", "log.retention.hours"),
        (
            "metadata.log.max.record.bytes.between.snapshots=0",
            "metadata.log.max.record.bytes.between.snapshots",
        ),
        ("metadata.log.segment.bytes=1", "metadata.log.segment.bytes"),
        ("auto.leader.rebalance.enable=sometimes", "auto.leader.rebalance.enable"),
        ("leader.imbalance.check.interval.seconds=0", "leader.imbalance.check.interval.seconds"),
        ("broker.rack=" + "r" * 256, "broker.rack"),
        ("broker.rack=a\tb", "broker.rack"),
    ],
)
def test_bad_keys_and_values_name_the_key(override: str, named: str) -> None:
    with pytest.raises(BrokerConfigError, match=named.replace(".", r"\.")):
        BrokerConfig.load(None, [override])


def test_a_broker_has_no_rack_unless_one_is_set() -> None:
    assert BrokerConfig().broker_rack == ""
    assert BrokerConfig().to_properties()["broker.rack"] == ""
    assert BrokerConfig.load(None, ["broker.rack= eu-west-1a "]).broker_rack == "eu-west-1a"


def test_a_bad_log_value_is_refused_under_the_name_the_user_wrote() -> None:
    with pytest.raises(BrokerConfigError, match=r"'abc' for log\.retention\.ms"):
        BrokerConfig.load(None, ["log.retention.ms=abc"])


@pytest.mark.parametrize("override", ["no-equals-sign", "=5", "  =x"])
def test_malformed_overrides(override: str) -> None:
    with pytest.raises(BrokerConfigError, match="key=value"):
        BrokerConfig.load(None, [override])


def test_an_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("this is = = not toml")
    with pytest.raises(BrokerConfigError, match=r"broken\.toml"):
        BrokerConfig.load(path)
    with pytest.raises(BrokerConfigError, match=r"missing\.toml"):
        BrokerConfig.load(tmp_path / "missing.toml")


def test_properties_round_trip() -> None:
    config = BrokerConfig.load(
        None,
        [
            "num.partitions=4",
            "auto.create.topics.enable=false",
            "log.retention.ms=99",
            "log.flush.interval.messages=10",
            "log.cleanup.policy=compact,delete",
        ],
    )
    properties = config.to_properties()
    assert properties["num.partitions"] == "4"
    assert properties["auto.create.topics.enable"] == "false"
    assert properties["log.retention.ms"] == "99"
    assert properties["log.cleanup.policy"] == "compact,delete"
    again = BrokerConfig.from_properties(properties)
    assert again == dataclasses.replace(config)
    assert BrokerConfig.from_properties(BrokerConfig().to_properties()) == BrokerConfig()


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        (":9093", ("127.0.0.1", 9093)),
        ("[::1]:9094", ("::1", 9094)),
    ],
)
def test_parse_listen(listen: str, expected: tuple[str, int]) -> None:
    assert parse_listen(listen) == expected


@pytest.mark.parametrize("listen", ["9092", "host:", "host:port", "host:70000", "host:-1"])
def test_parse_listen_refuses_what_is_not_host_and_port(listen: str) -> None:
    with pytest.raises(BrokerConfigError, match="--listen"):
        parse_listen(listen)


def test_metadata_snapshot_settings() -> None:
    assert BrokerConfig().metadata_log_max_record_bytes_between_snapshots == 20 * 1024 * 1024
    config = BrokerConfig.load(
        None,
        ["metadata.log.max.record.bytes.between.snapshots=4096", "metadata.log.segment.bytes=2048"],
    )
    assert config.metadata_log_max_record_bytes_between_snapshots == 4096
    assert config.metadata_log_segment_bytes == 2048


def test_leader_rebalance_settings() -> None:
    assert BrokerConfig().auto_leader_rebalance_enable is True
    assert BrokerConfig().leader_imbalance_check_interval_seconds == 300
    config = BrokerConfig.load(
        None, ["auto.leader.rebalance.enable=false", "leader.imbalance.check.interval.seconds=5"]
    )
    assert config.auto_leader_rebalance_enable is False
    assert config.leader_imbalance_check_interval_seconds == 5


def test_the_request_memory_and_connection_quotas_take_kafkas_names() -> None:
    config = BrokerConfig.load(
        None,
        [
            "queued.max.request.bytes=209715200",
            "max.connections=50",
            "max.connections.per.ip=5",
            "max.connections.per.ip.overrides=10.0.0.7:20,[::1]:2",
        ],
    )
    assert config.queued_max_request_bytes == 200 * 1024 * 1024
    assert config.max_connections == 50
    assert config.connections_max_for("10.0.0.7") == 20
    assert config.connections_max_for("::1") == 2
    assert config.connections_max_for("10.0.0.8") == 5
    assert config.to_properties()["max.connections.per.ip.overrides"] == "10.0.0.7:20,::1:2"
    with pytest.raises(BrokerConfigError, match=r"max\.connections\.per\.ip\.overrides"):
        BrokerConfig.load(None, ["max.connections.per.ip.overrides=10.0.0.7"])
