"""An idempotent confluent-kafka producer whose first Produce answer is lost on the way.

A TCP proxy between librdkafka and a real broker process reads the frames in
both directions, remembers the API key of every correlation id it forwards,
and swallows the answer to the first Produce request. The batch itself did
reach the broker, so the producer times out, reconnects and sends the same
batch again (same producer id, epoch and sequence). The broker must answer
the retry with the original offset instead of appending it twice: the
producer reports every record delivered, and the log holds each exactly once.

Metadata answers are rewritten to name the proxy, so every connection the
client opens goes through it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from eventplatform.log.protocol import (
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_response,
    flatten,
)
from eventplatform.log.protocol.apis import APIS, METADATA, PRODUCE
from eventplatform.log.storage.record_batch import split_batches
from eventplatform.testing import BrokerProcess, running_broker

TOPIC = "idempotence"
RECORD_COUNT = 200
BATCH_RECORDS = 40
REQUEST_TIMEOUT_MS = 1_500
DELIVERY_TIMEOUT_S = 60.0
CONSUME_TIMEOUT_S = 30.0
PROXY_TIMEOUT_S = 10.0
BROKER_OVERRIDES = ("num.partitions=1", "offsets.topic.num.partitions=1")
_SIZE = struct.Struct(">i")

# This module starts its own broker per test, behind a proxy that drops answers on its
# one port (a cluster's clients would go around the proxy).
BROKER_NODES = ()


def read_exactly(sock: socket.socket, count: int) -> bytes | None:
    data = bytearray()
    while len(data) < count:
        try:
            chunk = sock.recv(count - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def read_frame(sock: socket.socket) -> bytes | None:
    prefix = read_exactly(sock, _SIZE.size)
    if prefix is None:
        return None
    return read_exactly(sock, _SIZE.unpack(prefix)[0])


@dataclass(frozen=True)
class SentBatch:
    """One batch of a forwarded Produce request."""

    correlation_id: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: int


@dataclass
class DroppingProxy:
    """See the module docstring: the answer to Produce number ``victim`` (from 0) is swallowed."""

    upstream_port: int
    victim: int = 0
    produce_answers: int = 0
    dropped: list[int] = field(default_factory=list)
    batches: list[SentBatch] = field(default_factory=list)
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    sockets: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), PROXY_TIMEOUT_S)
            upstream.settimeout(None)
            with self.lock:
                self.connections += 1
                self.sockets += [client, upstream]
            requests: dict[int, tuple[int, int]] = {}
            threading.Thread(
                target=self._forward_requests, args=(client, upstream, requests), daemon=True
            ).start()
            threading.Thread(
                target=self._forward_responses, args=(upstream, client, requests), daemon=True
            ).start()

    def _forward_requests(
        self, client: socket.socket, upstream: socket.socket, requests: dict[int, tuple[int, int]]
    ) -> None:
        while (frame := read_frame(client)) is not None:
            header, position = decode_request_header(frame)
            with self.lock:
                requests[header.correlation_id] = (header.api_key, header.api_version)
                if header.api_key == PRODUCE.key:
                    self._note_batches(header.correlation_id, header.api_version, frame, position)
            try:
                upstream.sendall(_SIZE.pack(len(frame)) + frame)
            except OSError:
                break
        _close(client, upstream)

    def _note_batches(self, correlation_id: int, version: int, frame: bytes, position: int) -> None:
        body = decode_request_body(PRODUCE, version, frame, position)
        for topic in body["topic_data"]:
            for partition in topic["partition_data"]:
                for batch in split_batches(partition["records"] or b"", check_crc=True):
                    self.batches.append(
                        SentBatch(
                            correlation_id,
                            batch.producer_id,
                            batch.producer_epoch,
                            batch.base_sequence,
                            batch.records_count,
                        )
                    )

    def _forward_responses(
        self, upstream: socket.socket, client: socket.socket, requests: dict[int, tuple[int, int]]
    ) -> None:
        while (frame := read_frame(upstream)) is not None:
            correlation_id = _SIZE.unpack_from(frame)[0]
            with self.lock:
                api_key, version = requests.pop(correlation_id)
                if api_key == PRODUCE.key:
                    self.produce_answers += 1
                    if self.produce_answers == self.victim + 1:
                        self.dropped.append(correlation_id)
                        continue
            if api_key == METADATA.key:
                frame = self._point_at_proxy(version, frame)
            try:
                client.sendall(_SIZE.pack(len(frame)) + frame)
            except OSError:
                break
        _close(client, upstream)

    def _point_at_proxy(self, version: int, frame: bytes) -> bytes:
        correlation_id, body = decode_response(METADATA, version, frame)
        for broker in body["brokers"]:
            broker["port"] = self.port
        return flatten(encode_response(APIS[METADATA.key], version, correlation_id, body))

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        with self.lock:
            for sock in self.sockets:
                _close(sock)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "broker", BROKER_OVERRIDES) as process:
        yield process


@pytest.fixture(params=[0, 2], ids=["first-answer-lost", "third-answer-lost"])
def proxy(broker: BrokerProcess, request: pytest.FixtureRequest) -> Iterator[DroppingProxy]:
    dropping = DroppingProxy(broker.port, victim=request.param)
    yield dropping
    dropping.close()


def produce_all(bootstrap: str, values: list[bytes]) -> list[tuple[KafkaError | None, int, bytes]]:
    """Produce ``values`` idempotently; returns (error, offset, value) per delivery report."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            # Several batches in flight at once: the lost one is not the only one.
            "batch.num.messages": BATCH_RECORDS,
            "max.in.flight.requests.per.connection": 5,
            "socket.timeout.ms": REQUEST_TIMEOUT_MS,
            "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000),
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
        }
    )
    reports: list[tuple[KafkaError | None, int, bytes]] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        reports.append((error, message.offset(), message.value()))

    for value in values:
        producer.produce(TOPIC, value=value, on_delivery=on_delivery)
        producer.poll(0)
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    while len(reports) < len(values) and time.monotonic() < deadline:
        producer.poll(0.1)
    assert producer.flush(5) == 0
    return reports


def consume_all(bootstrap: str, expected: int) -> list[tuple[int, bytes]]:
    """Every record of partition 0 from the beginning, as (offset, value)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "idempotence-reader",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    records: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                if len(records) >= expected:
                    break
                continue
            assert message.error() is None, message.error()
            records.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return records


def test_a_lost_produce_answer_is_retried_and_the_log_holds_each_record_once(
    broker: BrokerProcess, proxy: DroppingProxy
) -> None:
    values = [b"record-%04d" % index for index in range(RECORD_COUNT)]
    reports = produce_all(proxy.bootstrap, values)

    failures = [(error, value) for error, _, value in reports if error is not None]
    assert not failures
    assert sorted(value for _, _, value in reports) == values

    # One Produce answer was swallowed, and its batch went out again unchanged.
    assert len(proxy.dropped) == 1
    lost = next(batch for batch in proxy.batches if batch.correlation_id == proxy.dropped[0])
    assert lost.producer_id >= 0
    resent = [
        batch
        for batch in proxy.batches
        if batch.correlation_id != lost.correlation_id
        and (batch.producer_id, batch.producer_epoch, batch.base_sequence)
        == (lost.producer_id, lost.producer_epoch, lost.base_sequence)
    ]
    assert resent, proxy.batches
    assert proxy.connections >= 2
    assert len({batch.base_sequence for batch in proxy.batches}) >= RECORD_COUNT // BATCH_RECORDS

    records = consume_all(broker.bootstrap, RECORD_COUNT)
    counts = Counter(value for _, value in records)
    assert {value: count for value, count in counts.items() if count != 1} == {}
    assert sorted(counts) == values
    assert [offset for offset, _ in records] == list(range(RECORD_COUNT))
    # Every delivery report names the offset where that value sits in the log.
    by_offset = dict(records)
    assert all(by_offset[offset] == value for _, offset, value in reports)
