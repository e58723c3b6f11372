"""The log's own wire client: its bounds (attempts, answer size, time) against a port
nobody listens on and a server that answers nonsense, its reading of metadata a broker
gives while it is not ready, and its requests (produce, EntityRead, EraseRecords)
against the real broker."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

from eventplatform.events import Position, erase_events
from eventplatform.events.log_client import LogClient, LogClientError
from eventplatform.log.extensions import ERASED_HEADER
from eventplatform.log.protocol import (
    ErrorCode,
    decode_request_header,
    encode_response,
    flatten,
)
from eventplatform.log.protocol.apis import METADATA
from eventplatform.log.protocol.apis.entities import ERASE_OFFSETS_MAX
from eventplatform.log.storage.record_batch import Record, encode_batch
from eventplatform.testing import BrokerProcess

if TYPE_CHECKING:
    from conftest import Log


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serving(converse: Callable[[socket.socket], None]) -> Iterator[int]:
    """A loopback server that runs ``converse`` on each connection it accepts, one at a
    time, on a thread of its own; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(5)
                converse(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


@pytest.fixture
def oversized_answers() -> Iterator[int]:
    """A server that answers every request with a frame claiming 2 GiB."""

    def converse(connection: socket.socket) -> None:
        connection.recv(1 << 16)
        connection.sendall(struct.pack(">i", 2**31 - 1))

    with serving(converse) as port:
        yield port


@contextmanager
def metadata_server(answers: list[int | None]) -> Iterator[tuple[int, list[int]]]:
    """A server answering Metadata for one topic with ``answers[n]`` partitions (led by
    itself) to the n-th request, the last one from then on; None is the topic-level
    error LEADER_NOT_AVAILABLE, 0 a topic with no partitions and no error. Yields its
    port and the count of requests it answered."""
    answered: list[int] = [0]

    def body(count: int | None, topic: str) -> dict[str, object]:
        partitions = [
            {
                "error_code": 0,
                "partition_index": index,
                "leader_id": 1,
                "leader_epoch": 0,
                "replica_nodes": [1],
                "isr_nodes": [1],
                "offline_replicas": [],
            }
            for index in range(count or 0)
        ]
        return {
            "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": port, "rack": None}],
            "cluster_id": "test",
            "controller_id": 1,
            "topics": [
                {
                    "error_code": ErrorCode.LEADER_NOT_AVAILABLE if count is None else 0,
                    "name": topic,
                    "topic_id": bytes(16),
                    "is_internal": False,
                    "partitions": partitions,
                }
            ],
        }

    def converse(connection: socket.socket) -> None:
        while frame := _frame(connection):
            header, _ = decode_request_header(frame)
            count = answers[min(answered[0], len(answers) - 1)]
            answered[0] += 1
            reply = flatten(
                encode_response(
                    METADATA, header.api_version, header.correlation_id, body(count, "orders")
                )
            )
            connection.sendall(struct.pack(">i", len(reply)) + reply)

    with serving(converse) as port:
        yield port, answered


def _frame(connection: socket.socket) -> bytes:
    """One request frame without its size; b"" once the client closed."""
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = connection.recv(1 << 16)
        if not chunk:
            return b""
        data += chunk
    return data[4:]


def test_a_topic_a_broker_has_not_laid_out_is_asked_about_again() -> None:
    """A broker that knows a topic but not its partitions yet (one that had just started
    once answered so) is not believed: the count is asked again, never taken as 0."""
    with (
        metadata_server([0, None, 3]) as (port, answered),
        LogClient(f"127.0.0.1:{port}", attempts=4, request_timeout_s=2.0) as client,
    ):
        assert client.partition_count("orders") == 3
    assert answered == [3]


def test_a_topic_never_laid_out_is_a_clear_retriable_error() -> None:
    with (
        metadata_server([0]) as (port, answered),
        LogClient(f"127.0.0.1:{port}", attempts=3, request_timeout_s=2.0) as client,
        pytest.raises(LogClientError, match="LEADER_NOT_AVAILABLE") as failed,
    ):
        client.partition_count("orders")
    assert "failed 3 times" in str(failed.value)
    assert answered == [3]


def test_no_broker_is_a_clear_error_soon() -> None:
    client = LogClient(f"127.0.0.1:{closed_port()}", attempts=2, request_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(LogClientError, match="no broker answered"):
        client.partition_count("anything")
    assert time.monotonic() - started < 5
    client.close()


def test_an_answer_over_the_size_bound_is_refused(oversized_answers: int) -> None:
    client = LogClient(f"127.0.0.1:{oversized_answers}", attempts=2, request_timeout_s=2.0)
    with pytest.raises(LogClientError, match="an answer of 2147483647 bytes"):
        client.partition_count("anything")
    client.close()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="attempts"):
        LogClient("127.0.0.1:9092", attempts=0)
    with pytest.raises(ValueError, match="not host:port"):
        LogClient("nowhere")


def test_produce_and_entity_read_against_the_broker(
    broker: BrokerProcess, unique_name: str
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    config = {"eventplatform.entity.versions.enable": "true"}
    admin.create_topics([NewTopic(unique_name, 1, 1, config=config)])[unique_name].result(15)
    with LogClient(broker.bootstrap) as client:
        assert client.partition_count(unique_name) == 1
        batch = encode_batch([Record(0, 1_000, b"k", b"v")])
        answer = client.produce(unique_name, 0, batch, timeout_ms=10_000)
        assert (answer.error, answer.body["base_offset"]) == (ErrorCode.NONE, 0)
        read = client.entity_read(unique_name, 0, b"k", 0, 1 << 20)
        assert read.error is ErrorCode.NONE and read.body["next_offset"] == 1
        started = time.monotonic()
        with pytest.raises(LogClientError, match="has 1 partitions: no partition 3"):
            client.entity_read(unique_name, 3, b"k", 0, 1 << 20)
        assert time.monotonic() - started < 1, "not retried: it cannot get better"


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    """``(partition, key, value)`` records, each with a header and timestamp 1000 + its
    index, appended in order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for index, (partition, key, value) in enumerate(records):
        producer.produce(
            topic,
            value,
            key,
            partition=partition,
            headers=[("source", b"test")],
            timestamp=1_000 + index,
        )
    assert producer.flush(30) == 0


def test_erase_records_empties_the_records_named_and_leaves_their_neighbours(
    broker: BrokerProcess, log: Log, unique_name: str
) -> None:
    topic = log.create_topic(unique_name)
    _produce(
        broker.bootstrap, topic, [(0, f"k{n}".encode(), f"secret {n}".encode()) for n in range(5)]
    )

    with LogClient(broker.bootstrap) as client:
        answer = client.erase_records(topic, 0, [3, 1, 3], timeout_ms=10_000)

    assert (answer.error, answer.body["erased"]) == (ErrorCode.NONE, 2)
    records = log.records(topic)
    assert [record.offset() for record in records] == [0, 1, 2, 3, 4]
    for record in records:
        offset = record.offset()
        assert record.key() == f"k{offset}".encode()
        assert record.timestamp()[1] == 1_000 + offset
        if offset in (1, 3):
            assert record.value() is None
            assert record.headers() == [(ERASED_HEADER, b"")]
        else:
            assert record.value() == f"secret {offset}".encode()
            assert record.headers() == [("source", b"test")]


def test_erase_records_sends_more_offsets_than_one_request_takes_in_several(
    broker: BrokerProcess, log: Log, unique_name: str
) -> None:
    count = ERASE_OFFSETS_MAX + 50
    topic = log.create_topic(unique_name)
    _produce(broker.bootstrap, topic, [(0, b"k", b"v")] * count)

    with LogClient(broker.bootstrap) as client:
        answer = client.erase_records(topic, 0, range(count), timeout_ms=60_000)

    assert answer.body["erased"] == count
    records = log.records(topic)
    assert len(records) == count
    assert all(record.value() is None for record in records)


def test_erase_records_refusals_raise_the_brokers_reason_at_once(
    broker: BrokerProcess, log: Log, unique_name: str
) -> None:
    topic = log.create_topic(unique_name)
    _produce(broker.bootstrap, topic, [(0, b"k", b"v")] * 3)
    with LogClient(broker.bootstrap) as client:
        started = time.monotonic()
        with pytest.raises(LogClientError, match=r"high watermark.*OFFSET_OUT_OF_RANGE") as past:
            client.erase_records(topic, 0, [1, 3], timeout_ms=10_000)
        assert past.value.error is ErrorCode.OFFSET_OUT_OF_RANGE
        assert time.monotonic() - started < 1, "not retried: it cannot get better"
    assert [record.value() for record in log.records(topic)] == [b"v"] * 3, "nothing erased"


def test_erase_events_erases_the_events_named_in_each_of_their_partitions(
    broker: BrokerProcess, log: Log, unique_name: str
) -> None:
    topic = log.create_topic(unique_name, partitions=2)
    _produce(broker.bootstrap, topic, [(n % 2, b"k", f"v{n}".encode()) for n in range(6)])
    refs = [Position(topic, 0, 0), Position(topic, 1, 2), Position(topic, 1, 0)]

    erased = erase_events(broker.bootstrap, refs)

    assert erased == {(topic, 0): 1, (topic, 1): 2}
    left = {(r.partition(), r.offset()): r.value() for r in log.records(topic)}
    assert left == {
        (0, 0): None,
        (0, 1): b"v2",
        (0, 2): b"v4",
        (1, 0): None,
        (1, 1): b"v3",
        (1, 2): None,
    }
