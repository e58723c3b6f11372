"""``platform produce`` and ``platform consume`` against a real broker."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer

from eventplatform.events import ERASED_HEADER
from eventplatform.events.partitioner import partition_for_key

if TYPE_CHECKING:
    from conftest import Platform

    from eventplatform.testing import BrokerProcess

WAIT_S = "5"  # idle timeout: a guard only; every read below also has --max-messages


def json_records(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines()]


def test_keyed_lines_land_where_murmur2_says_and_read_back(
    platform: Platform, unique_name: str
) -> None:
    platform.ok("topics", "create", unique_name, "--partitions", "5")
    lines = [f"user-{number}|event-{number}" for number in range(40)]

    produced = platform.ok(
        "produce", unique_name, "--key-separator", "|", input="\n".join(lines).encode() + b"\n"
    )
    assert f"produced 40 records to {unique_name}" in produced.stderr

    consumed = platform.ok(
        "consume",
        unique_name,
        "--from-beginning",
        "--format",
        "json",
        "--max-messages",
        "40",
        "--timeout",
        WAIT_S,
    )
    records = json_records(consumed.stdout)
    assert sorted(record["value"] for record in records) == sorted(
        line.split("|")[1] for line in lines
    )
    for record in records:
        assert record["topic"] == unique_name
        assert record["partition"] == partition_for_key(record["key"].encode(), 5)
        assert record["value"] == record["key"].replace("user", "event")
        assert record["headers"] == []
        assert isinstance(record["timestamp"], int)
    assert "consumed 40 records" in consumed.stderr


def test_key_separator_edge_cases(platform: Platform, unique_name: str) -> None:
    """No separator: no key. Separator first: an empty key. Only the first one splits."""
    platform.ok("topics", "create", unique_name, "--partitions", "1")

    platform.ok(
        "produce", unique_name, "--key-separator", "::", input=b"plain\n::empty\nk::a::b\r\n"
    )

    records = json_records(
        platform.ok(
            "consume",
            unique_name,
            "--from-beginning",
            "--format",
            "json",
            "--max-messages",
            "3",
            "--timeout",
            WAIT_S,
        ).stdout
    )
    assert [(record["key"], record["value"]) for record in records] == [
        (None, "plain"),
        ("", "empty"),
        ("k", "a::b"),
    ]


def test_partition_option_writes_every_record_to_that_partition(
    platform: Platform, unique_name: str
) -> None:
    platform.ok("topics", "create", unique_name, "--partitions", "3")

    platform.ok(
        "produce",
        unique_name,
        "--partition",
        "2",
        "--key-separator",
        "=",
        input=b"a=1\nb=2\nc=3\n",
    )

    records = json_records(
        platform.ok(
            "consume",
            unique_name,
            "--from-beginning",
            "--format",
            "json",
            "--max-messages",
            "3",
            "--timeout",
            WAIT_S,
        ).stdout
    )
    assert [(record["partition"], record["offset"]) for record in records] == [
        (2, 0),
        (2, 1),
        (2, 2),
    ]


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_compression_codec_round_trips(
    platform: Platform, unique_name: str, compression: str
) -> None:
    lines = [f"{compression}-{number}-" + "x" * number for number in range(50)]

    platform.ok(
        "produce",
        unique_name,
        "--compression",
        compression,
        input="\n".join(lines).encode() + b"\n",
    )

    consumed = platform.ok(
        "consume", unique_name, "--from-beginning", "--max-messages", "50", "--timeout", WAIT_S
    )
    assert sorted(consumed.stdout.splitlines()) == sorted(lines)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_every_acks_setting_delivers(platform: Platform, unique_name: str, acks: str) -> None:
    platform.ok("topics", "create", unique_name, "--partitions", "1")

    produced = platform.ok("produce", unique_name, "--acks", acks, input=b"one\ntwo\n")

    assert "produced 2 records" in produced.stderr
    consumed = platform.ok(
        "consume", unique_name, "--from-beginning", "--max-messages", "2", "--timeout", WAIT_S
    )
    assert consumed.stdout.splitlines() == ["one", "two"]


def test_rejected_records_are_reported_and_the_exit_status_is_one(
    platform: Platform, unique_name: str
) -> None:
    platform.ok(
        "topics", "create", unique_name, "--partitions", "1", "--config", "max.message.bytes=1024"
    )

    result = platform("produce", unique_name, input=b"small\n" + b"x" * 5000 + b"\n")

    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    stderr = result.stderr.splitlines()
    assert any(
        line.startswith("line 2 not delivered:") and "MSG_SIZE_TOO_LARGE" in line for line in stderr
    ), stderr
    assert stderr[-1].startswith("Error: ")
    assert f"records were not delivered to {unique_name}" in stderr[-1]
    assert "Traceback" not in result.output


def test_a_partition_outside_the_topic_fails_before_producing(
    platform: Platform, unique_name: str
) -> None:
    platform.ok("topics", "create", unique_name, "--partitions", "2")

    error = platform.fails("produce", unique_name, "--partition", "5", input=b"x\n")

    assert error == (f"Error: topic '{unique_name}' has 2 partitions; partition 5 does not exist")


def test_produce_to_an_unreachable_cluster_is_one_line() -> None:
    from click.testing import CliRunner

    from eventplatform.cli import main

    result = CliRunner().invoke(
        main,
        ["produce", "t", "--bootstrap", "127.0.0.1:1", "--request-timeout", "1"],
        input=b"x\n",
    )

    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: cannot produce to 't': no answer from the cluster at ")


def test_consume_starts_at_the_end_by_default(platform: Platform, unique_name: str) -> None:
    platform.ok("produce", unique_name, input=b"old\n")

    consumed = platform.ok("consume", unique_name, "--timeout", "1")

    assert consumed.stdout == ""
    assert "consumed 0 records" in consumed.stderr


def test_consume_from_an_offset_of_one_partition(platform: Platform, unique_name: str) -> None:
    platform.ok("topics", "create", unique_name, "--partitions", "2")
    platform.ok("produce", unique_name, "--partition", "1", input=b"r0\nr1\nr2\nr3\n")
    platform.ok("produce", unique_name, "--partition", "0", input=b"other\n")

    consumed = platform.ok(
        "consume",
        unique_name,
        "--partition",
        "1",
        "--offset",
        "2",
        "--timeout",
        "2",
        "--max-messages",
        "2",
    )

    assert consumed.stdout.splitlines() == ["r2", "r3"]


@pytest.mark.parametrize("as_datetime", [False, True], ids=["milliseconds", "iso-datetime"])
def test_consume_from_a_timestamp(platform: Platform, unique_name: str, as_datetime: bool) -> None:
    platform.ok("topics", "create", unique_name, "--partitions", "2")
    platform.ok("produce", unique_name, input=b"before-1\nbefore-2\n")
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    platform.ok("produce", unique_name, input=b"after-1\nafter-2\n")
    start = (
        datetime.fromtimestamp(boundary_ms / 1000, UTC).isoformat()
        if as_datetime
        else str(boundary_ms)
    )

    consumed = platform.ok(
        "consume", unique_name, "--from-timestamp", start, "--timeout", "2", "--max-messages", "2"
    )

    assert sorted(consumed.stdout.splitlines()) == ["after-1", "after-2"]


def test_json_output_of_binary_bytes_and_headers(
    platform: Platform, broker: BrokerProcess, unique_name: str
) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(
        unique_name,
        key=b"\xff\xfe",
        value=b"text",
        headers=[("trace", b"abc"), ("trace", b"\x00\x80"), ("empty", None)],
    )
    producer.produce(unique_name, key=None, value=None)
    assert producer.flush(10) == 0

    records = json_records(
        platform.ok(
            "consume",
            unique_name,
            "--from-beginning",
            "--format",
            "json",
            "--max-messages",
            "2",
            "--timeout",
            WAIT_S,
        ).stdout
    )

    assert records[0]["key"] == {"base64": base64.b64encode(b"\xff\xfe").decode()}
    assert records[0]["value"] == "text"
    assert records[0]["headers"] == [
        ["trace", "abc"],
        ["trace", {"base64": base64.b64encode(b"\x00\x80").decode()}],
        ["empty", None],
    ]
    assert records[1]["key"] is None
    assert records[1]["value"] is None


def test_text_output_with_a_key_separator(platform: Platform, unique_name: str) -> None:
    platform.ok("topics", "create", unique_name, "--partitions", "1")
    platform.ok("produce", unique_name, "--key-separator", ":", input=b"k1:v1\nno-key\n")

    consumed = platform.ok(
        "consume",
        unique_name,
        "--from-beginning",
        "--key-separator",
        "=",
        "--max-messages",
        "2",
        "--timeout",
        WAIT_S,
    )

    assert consumed.stdout.splitlines() == ["k1=v1", "=no-key"]


def test_consume_of_a_missing_topic_fails_and_does_not_create_it(
    platform: Platform, unique_name: str
) -> None:
    assert platform.fails("consume", unique_name, "--timeout", "1") == (
        f"Error: topic '{unique_name}' does not exist"
    )
    assert unique_name not in platform.ok("topics", "list").stdout.splitlines()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--offset", "3"], "--offset needs --partition"),
        (["--from-beginning", "--partition", "0", "--offset", "1"], "different starting points"),
        (["--group", "g", "--partition", "0"], "--partition cannot be used with --group"),
        (["--group", "g", "--from-timestamp", "0"], "--from-timestamp cannot be used with --group"),
    ],
)
def test_conflicting_start_options_are_refused(
    platform: Platform, arguments: list[str], message: str
) -> None:
    assert message in platform.fails("consume", "any-topic", *arguments)


def test_an_erased_record_prints_as_a_marker_with_its_offset(
    platform: Platform, broker: BrokerProcess, unique_name: str
) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(unique_name, key=b"k", value=b"kept", partition=0)
    producer.produce(unique_name, key=b"k", value=None, headers=[(ERASED_HEADER, b"")], partition=0)
    producer.produce(unique_name, key=b"k", value=None, partition=0)  # a tombstone
    assert producer.flush(10) == 0
    read = ["consume", unique_name, "--from-beginning", "--max-messages", "3", "--timeout", WAIT_S]

    text = platform.ok(*read).stdout
    keyed = platform.ok(*read, "--key-separator", "=").stdout
    records = json_records(platform.ok(*read, "--format", "json").stdout)

    assert text.splitlines() == ["kept", "<erased: partition 0 offset 1>", ""]
    assert keyed.splitlines() == ["k=kept", "k=<erased: partition 0 offset 1>", "k="]
    assert [record.get("erased", False) for record in records] == [False, True, False]
    assert records[1]["value"] is None
    assert records[1]["headers"] == [[ERASED_HEADER, ""]]
