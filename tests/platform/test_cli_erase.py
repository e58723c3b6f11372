"""``platform erase`` against real brokers: what a consumer reading from offset 0 finds
afterwards, and the refusals an operator meets (offsets past the end, an unknown topic
or partition, no DELETE permission, input that is not a list of positions)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from eventplatform.cli import main
from eventplatform.log.extensions import ERASED_HEADER
from eventplatform.testing import BrokerProcess

if TYPE_CHECKING:
    from conftest import Platform

READ_TIMEOUT_S = 30.0


def produce(settings: dict[str, str], topic: str, partitions: int, per_partition: int) -> None:
    """``per_partition`` records in each partition: key ``p{P}-{N}``, value ``secret {P}-{N}``."""
    producer = Producer({**settings, "linger.ms": 0})
    for partition in range(partitions):
        for number in range(per_partition):
            name = f"{partition}-{number}"
            producer.produce(
                topic, f"secret {name}".encode(), f"p{name}".encode(), partition=partition
            )
    assert producer.flush(READ_TIMEOUT_S) == 0


def read_all(settings: dict[str, str], topic: str, partitions: int, count: int) -> list[Message]:
    """The first ``count`` records of the topic's partitions, from offset 0, by position."""
    consumer = Consumer(
        {**settings, "group.id": f"erase-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
    )
    found: list[Message] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(found) < count:
            assert time.monotonic() < deadline, f"read {len(found)} of {count} records"
            for message in consumer.consume(100, timeout=0.5):
                if message.error() is not None:
                    raise KafkaException(message.error())
                found.append(message)
    finally:
        consumer.close()
    return sorted(found, key=lambda message: (message.partition(), message.offset()))


def erased_positions(records: list[Message]) -> set[tuple[int, int]]:
    """The positions of the erased records; every other record must be as produced."""
    erased = set()
    for record in records:
        name = f"{record.partition()}-{record.offset()}"
        assert record.key() == f"p{name}".encode(), "keys stay"
        if record.value() is None:
            assert record.headers() == [(ERASED_HEADER, b"")]
            erased.add((record.partition(), record.offset()))
        else:
            assert record.value() == f"secret {name}".encode()
    return erased


def test_erase_empties_the_records_named_and_leaves_the_rest_readable(
    platform: Platform, broker: BrokerProcess, unique_name: str, tmp_path: Path
) -> None:
    settings = {"bootstrap.servers": broker.bootstrap}
    platform.ok("topics", "create", unique_name, "--partitions", "2")
    produce(settings, unique_name, partitions=2, per_partition=4)
    listed = tmp_path / "positions.txt"
    listed.write_text("# leaked on 2026-05-01\n1 0\n\n1 3  # the retry\n0 2\n")

    by_option = platform.ok("erase", unique_name, "--partition", "0", "--offset", "1")
    by_file = platform.ok("erase", unique_name, "--offsets-from", str(listed))

    assert by_option.stdout == f"erased 1 record from {unique_name}[0]\n"
    assert by_file.stdout == (
        f"erased 1 record from {unique_name}[0]\nerased 2 records from {unique_name}[1]\n"
    )
    records = read_all(settings, unique_name, partitions=2, count=8)
    assert len(records) == 8, "an erased record keeps its offset"
    assert erased_positions(records) == {(0, 1), (0, 2), (1, 0), (1, 3)}


def test_erase_reads_positions_from_standard_input(
    platform: Platform, broker: BrokerProcess, unique_name: str
) -> None:
    settings = {"bootstrap.servers": broker.bootstrap}
    platform.ok("topics", "create", unique_name)
    produce(settings, unique_name, partitions=1, per_partition=3)

    done = platform.ok("erase", unique_name, "--offsets-from", "-", input=b"0 2\n0 0\n")

    assert done.stdout == f"erased 2 records from {unique_name}[0]\n"
    assert erased_positions(read_all(settings, unique_name, 1, 3)) == {(0, 0), (0, 2)}


def test_offsets_past_the_end_are_refused_and_nothing_is_erased(
    platform: Platform, broker: BrokerProcess, unique_name: str
) -> None:
    settings = {"bootstrap.servers": broker.bootstrap}
    platform.ok("topics", "create", unique_name, "--partitions", "2")
    produce(settings, unique_name, partitions=2, per_partition=3)

    error = platform.fails("erase", unique_name, "--offsets-from", "-", input=b"0 1\n1 3\n1 7\n")

    assert f"{unique_name}[1] offset 3, {unique_name}[1] offset 7 past the end" in error
    assert f"{unique_name}[1] ends at 3" in error and "nothing was erased" in error
    assert erased_positions(read_all(settings, unique_name, 2, 6)) == set()


def test_an_unknown_topic_or_partition_is_a_clear_error(
    platform: Platform, unique_name: str
) -> None:
    missing = platform.fails("erase", unique_name, "--partition", "0", "--offset", "0")
    assert f"topic {unique_name!r} does not exist" in missing

    platform.ok("topics", "create", unique_name)
    beyond = platform.fails("erase", unique_name, "--partition", "4", "--offset", "0")
    assert f"topic {unique_name!r} has 1 partitions: no partition 4" in beyond


@pytest.mark.parametrize(
    ("arguments", "stdin", "complaint"),
    [
        (["--offset", "1"], None, "--offset needs --partition"),
        (["--partition", "0"], None, "--partition needs at least one --offset"),
        ([], None, "name the records"),
        (["--offsets-from", "-"], b"0 1\n0 x\n", "standard input, line 2: '0 x' is not"),
        (["--offsets-from", "-"], b"1 2 3\n", "line 1: '1 2 3' is not 'PARTITION OFFSET'"),
    ],
)
def test_input_that_names_no_records_is_refused_before_any_request(
    platform: Platform, arguments: list[str], stdin: bytes | None, complaint: str
) -> None:
    error = platform.fails("erase", "anything", *arguments, input=stdin)
    assert complaint in error


# ---------------------------------------------------------------- permissions


def run(*arguments: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(arguments), input=stdin)


def sasl(broker: BrokerProcess, user: str, password: str) -> dict[str, str]:
    return {
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
    }


def properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    """A broker with ACLs and its super user's client config."""
    directory = tmp_path_factory.mktemp("guarded")
    seeded = run(
        "users",
        "add",
        "admin",
        "--data-dir",
        str(directory / "data"),
        "--password-stdin",
        stdin="root password\n",
    )
    assert seeded.exit_code == 0, seeded.output
    broker = BrokerProcess(
        directory / "data",
        [
            "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "authorizer.class.name=StandardAuthorizer",
            "super.users=User:admin",
        ],
    ).start()
    try:
        yield (
            broker,
            properties(directory / "admin.properties", sasl(broker, "admin", "root password")),
        )
    finally:
        broker.kill()


def test_erasing_needs_delete_on_the_topic(
    guarded: tuple[BrokerProcess, Path], tmp_path: Path
) -> None:
    broker, admin = guarded
    as_admin = ["--client-config", str(admin)]
    topic = f"erase-{uuid.uuid4().hex[:8]}"
    assert run("topics", "create", topic, *as_admin).exit_code == 0
    produce(sasl(broker, "admin", "root password"), topic, partitions=1, per_partition=2)
    added = run("users", "add", "carol", "--password-stdin", *as_admin, stdin="carol's\n")
    assert added.exit_code == 0, added.output
    carol = properties(tmp_path / "carol.properties", sasl(broker, "carol", "carol's"))
    erase = ["erase", topic, "--partition", "0", "--offset", "1", "--client-config", str(carol)]

    def grant(operation: str) -> None:
        granted = run(
            "acls",
            "add",
            "--topic",
            topic,
            "--principal",
            "User:carol",
            "--operation",
            operation,
            *as_admin,
        )
        assert granted.exit_code == 0, granted.output

    grant("describe")
    refused = run(*erase)
    assert refused.exit_code == 1
    assert refused.stderr.strip() == (
        f"Error: cannot erase records: {topic}-0: DELETE on the topic is needed "
        "(TOPIC_AUTHORIZATION_FAILED)"
    )
    admin_view = sasl(broker, "admin", "root password")
    assert erased_positions(read_all(admin_view, topic, 1, 2)) == set()

    grant("delete")
    allowed = run(*erase)
    assert allowed.exit_code == 0, allowed.output
    assert allowed.stdout == f"erased 1 record from {topic}[0]\n"
    assert erased_positions(read_all(admin_view, topic, 1, 2)) == {(0, 1)}
