"""The entity store's wire client: its bounds (attempts, answer size, time) against a
port nobody listens on and a server that answers nonsense, and its requests against the
real broker."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from eventplatform.events.log_client import LogClient, LogClientError
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.storage.record_batch import Record, encode_batch
from eventplatform.testing import BrokerProcess


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def oversized_answers() -> Iterator[int]:
    """A server that answers every request with a frame claiming 2 GiB."""
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
                connection.recv(1 << 16)
                connection.sendall(struct.pack(">i", 2**31 - 1))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(timeout=5)
    server.close()


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
