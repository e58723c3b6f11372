"""What the tools print and plan, computed from plain values without a cluster."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import ConfigSource

from eventplatform.tools.consume import ConsumedRecord, OutputFormat, bytes_for_json, format_record
from eventplatform.tools.groups import (
    GroupSummary,
    MemberSummary,
    OffsetReset,
    PartitionLag,
    ResetKind,
    ResetTarget,
    group_description_lines,
    lag_of,
    new_offset,
    partition_lags,
    plan_reset,
)
from eventplatform.tools.tables import format_table
from eventplatform.tools.topics import (
    ConfigSummary,
    PartitionSummary,
    TopicSummary,
    config_source_name,
    topic_description_lines,
)


def test_tables_align_columns_and_show_missing_values_as_dashes() -> None:
    assert format_table(("name", "n"), [("a", 1), ("longer", None)]) == [
        "name    n",
        "a       1",
        "longer  -",
    ]


def test_a_row_of_the_wrong_width_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="cells"):
        format_table(("a", "b"), [("only one",)])


def test_topic_description_lists_partitions_then_configs() -> None:
    summary = TopicSummary(
        name="events",
        partitions=(
            PartitionSummary(0, 1, (1, 2), (1, 2)),
            PartitionSummary(1, None, (2, 1), (2,)),
        ),
        configs=(
            ConfigSummary("retention.ms", "1000", "DYNAMIC_TOPIC_CONFIG"),
            ConfigSummary("flush.ms", None, "DEFAULT_CONFIG"),
            ConfigSummary("secret", "hunter2", "DEFAULT_CONFIG", sensitive=True),
        ),
    )

    assert topic_description_lines(summary) == [
        "topic: events",
        "partitions: 2",
        "replication factor: 2",
        "",
        "partition  leader  replicas  in-sync",
        "0          1       1,2       1,2",
        "1          none    2,1       2",
        "",
        "config        value        source",
        "retention.ms  1000         DYNAMIC_TOPIC_CONFIG",
        "flush.ms      null         DEFAULT_CONFIG",
        "secret        (sensitive)  DEFAULT_CONFIG",
    ]


def test_config_sources_read_as_kafkas_names_from_enum_or_integer() -> None:
    assert config_source_name(ConfigSource.DYNAMIC_TOPIC_CONFIG) == "DYNAMIC_TOPIC_CONFIG"
    assert config_source_name(ConfigSource.DEFAULT_CONFIG.value) == "DEFAULT_CONFIG"
    assert config_source_name(999) == "UNKNOWN_CONFIG"
    assert config_source_name("odd") == "UNKNOWN_CONFIG"


def test_lag_is_log_end_minus_committed_and_unknown_without_a_commit() -> None:
    assert lag_of(3, 10) == 7
    assert lag_of(10, 10) == 0
    assert lag_of(12, 10) == 0
    assert lag_of(None, 10) is None
    assert lag_of(3, None) is None


def test_partition_lags_cover_committed_and_assigned_partitions() -> None:
    rows = partition_lags(
        committed={("t", 0): 5, ("t", 2): 1},
        log_ends={("t", 0): 9, ("t", 1): 4, ("t", 2): 1},
        owners={("t", 1): "member-a", ("t", 2): "member-b"},
    )

    assert rows == [
        PartitionLag("t", 0, 5, 9, 4, None),
        PartitionLag("t", 1, None, 4, None, "member-a"),
        PartitionLag("t", 2, 1, 1, 0, "member-b"),
    ]


def test_group_description_shows_members_and_per_partition_lag() -> None:
    summary = GroupSummary(
        group_id="projections",
        state="Stable",
        assignor="range",
        members=(MemberSummary("m-1", "runner", "/10.0.0.1", (("t", 0), ("t", 1))),),
        partitions=(
            PartitionLag("t", 0, 5, 9, 4, "m-1"),
            PartitionLag("t", 1, None, 2, None, "m-1"),
        ),
    )

    assert group_description_lines(summary) == [
        "group: projections",
        "state: Stable",
        "assignor: range",
        "members: 1",
        "",
        "member  client  host       partitions",
        "m-1     runner  /10.0.0.1  t[0] t[1]",
        "",
        "topic  partition  committed  log-end  lag  member",
        "t      0          5          9        4    m-1",
        "t      1          -          2        -    m-1",
    ]


@pytest.mark.parametrize(
    ("target", "at_timestamp", "expected"),
    [
        (ResetTarget(ResetKind.EARLIEST), None, (10, "")),
        (ResetTarget(ResetKind.LATEST), None, (50, "")),
        (ResetTarget(ResetKind.OFFSET, offset=20), None, (20, "")),
        (ResetTarget(ResetKind.OFFSET, offset=5), None, (10, "5 is before the log start")),
        (ResetTarget(ResetKind.OFFSET, offset=70), None, (50, "70 is past the log end")),
        (ResetTarget(ResetKind.DATETIME, timestamp_ms=1), 30, (30, "")),
        (
            ResetTarget(ResetKind.DATETIME, timestamp_ms=1),
            -1,
            (50, "no record at or after the datetime"),
        ),
    ],
)
def test_new_offsets_stay_within_the_log(
    target: ResetTarget, at_timestamp: int | None, expected: tuple[int, str]
) -> None:
    assert new_offset(target, earliest=10, latest=50, at_timestamp=at_timestamp) == expected


def test_a_reset_plan_names_every_partition_with_its_current_offset() -> None:
    plan = plan_reset(
        ResetTarget(ResetKind.OFFSET, offset=4),
        [0, 1],
        current={0: 9},
        earliest={0: 0, 1: 6},
        latest={0: 10, 1: 8},
        at_timestamp={},
    )

    assert plan == [OffsetReset(0, 9, 4), OffsetReset(1, None, 6, "4 is before the log start")]


def test_bytes_in_json_are_text_when_utf8_and_base64_otherwise() -> None:
    assert bytes_for_json(None) is None
    assert bytes_for_json("é".encode()) == "é"
    assert bytes_for_json(b"\xff") == {"base64": "/w=="}


def test_records_format_as_text_or_json_lines() -> None:
    record = ConsumedRecord(
        topic="t",
        partition=2,
        offset=7,
        timestamp_ms=1700000000000,
        key=b"k",
        value=b"v",
        headers=(("h", b"1"), ("h", None)),
    )

    assert format_record(record, OutputFormat.TEXT) == b"v\n"
    assert format_record(record, OutputFormat.TEXT, b"\t") == b"k\tv\n"
    line = format_record(record, OutputFormat.JSON)
    assert line.endswith(b"\n")
    assert json.loads(line) == {
        "topic": "t",
        "partition": 2,
        "offset": 7,
        "timestamp": 1700000000000,
        "key": "k",
        "value": "v",
        "headers": [["h", "1"], ["h", None]],
    }


def test_a_record_without_key_or_value_prints_an_empty_line() -> None:
    record = ConsumedRecord("t", 0, 0, None, None, None)

    assert format_record(record, OutputFormat.TEXT) == b"\n"
    assert json.loads(format_record(record, OutputFormat.JSON))["timestamp"] is None
