"""An in-process broker and a small wire client for the broker tests.

``open_broker(data_dir, **fields)`` runs a ``BrokerServer`` in a nursery and
yields a ``RunningBroker``; leaving the block cancels the server, which
closes every log cleanly. ``BrokerClient`` speaks the Kafka wire protocol with
the project codec: ``send`` writes one request and remembers what answer it
expects, ``receive`` reads the next frame and decodes it as the oldest
expected answer, so tests can pipeline requests and check the order of the
answers. ``batch(...)`` builds a producer-style RecordBatch v2.
"""

from __future__ import annotations

import socket
import struct
from collections import deque
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from crash_simulation import crash as crash_log

from eventplatform.log.broker.broker import run_inline
from eventplatform.log.broker.server import BrokerServer
from eventplatform.log.config import BrokerConfig
from eventplatform.log.protocol import Api, decode_response, encode_request
from eventplatform.log.protocol.apis import (
    CREATE_TOPICS,
    FETCH,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
)
from eventplatform.log.storage import Compression, Record
from eventplatform.log.storage.record_batch import decode_record_set, encode_batch

RECEIVE_BYTES = 1 << 20
ANSWER_TIMEOUT_S = 30.0
TIMESTAMP_MS = 1_700_000_000_000
PRODUCE_VERSION = 8
FETCH_VERSION = 11
_SIZE = struct.Struct(">i")


class ConnectionClosedError(Exception):
    """The broker closed the connection where the test expected an answer."""


@dataclass
class BrokerClient:
    """One connection to the broker; see the module docstring."""

    stream: trio.SocketStream
    client_id: str | None = "broker-tests"
    next_correlation_id: int = 1
    expected: deque[tuple[int, Api, int]] = field(default_factory=deque)
    buffer: bytearray = field(default_factory=bytearray)

    async def send(
        self, api: Api, version: int, body: dict[str, Any], *, answered: bool = True
    ) -> int:
        """Write one request; returns its correlation id."""
        correlation_id = self.next_correlation_id
        self.next_correlation_id += 1
        frame = encode_request(
            api, version, body, correlation_id=correlation_id, client_id=self.client_id
        )
        await self.stream.send_all(frame)
        if answered:
            self.expected.append((correlation_id, api, version))
        return correlation_id

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read_frame(self) -> bytes | None:
        """The next response frame without its size prefix; None at end of stream."""
        if not await self._fill(_SIZE.size):
            return None
        size = _SIZE.unpack_from(self.buffer)[0]
        if not await self._fill(_SIZE.size + size):
            raise ConnectionClosedError("connection closed inside a response")
        frame = bytes(self.buffer[_SIZE.size : _SIZE.size + size])
        del self.buffer[: _SIZE.size + size]
        return frame

    async def _fill(self, count: int) -> bool:
        while len(self.buffer) < count:
            try:
                data = await self.stream.receive_some(RECEIVE_BYTES)
            except trio.BrokenResourceError:
                data = b""
            if not data:
                return False
            self.buffer += data
        return True

    async def receive(self) -> tuple[int, dict[str, Any]]:
        """Decode the next frame as the oldest request still waiting for its answer."""
        frame = await self.read_frame()
        if frame is None:
            raise ConnectionClosedError("the broker closed the connection")
        correlation_id, api, version = self.expected.popleft()
        received_id, body = decode_response(api, version, frame)
        assert received_id == correlation_id, (received_id, correlation_id)
        return received_id, body

    async def request(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        with trio.fail_after(ANSWER_TIMEOUT_S):
            await self.send(api, version, body)
            return (await self.receive())[1]

    async def wait_closed(self) -> bool:
        """True when the broker closes the connection (bytes still arriving are discarded)."""
        while True:
            try:
                data = await self.stream.receive_some(RECEIVE_BYTES)
            except trio.BrokenResourceError:
                return True
            if not data:
                return True

    async def aclose(self) -> None:
        await self.stream.aclose()

    # ------------------------------------------------------------ conveniences

    async def produce(
        self,
        topic: str,
        records: bytes | None,
        *,
        partition: int = 0,
        acks: int = -1,
        version: int = PRODUCE_VERSION,
    ) -> dict[str, Any]:
        """One batch to one partition; returns that partition's answer."""
        body = produce_body(topic, {partition: records}, acks=acks)
        response = await self.request(PRODUCE, version, body)
        return response["responses"][0]["partition_responses"][0]

    async def fetch(
        self,
        topic: str,
        offset: int,
        *,
        partition: int = 0,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        partition_max_bytes: int = 1 << 20,
        max_bytes: int = 50 << 20,
        isolation_level: int = 0,
        current_leader_epoch: int = -1,
    ) -> dict[str, Any]:
        """One partition's fetch answer."""
        body = fetch_body(
            {topic: [(partition, offset)]},
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            partition_max_bytes=partition_max_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            current_leader_epoch=current_leader_epoch,
        )
        response = await self.request(FETCH, FETCH_VERSION, body)
        assert response["error_code"] == 0
        return response["responses"][0]["partitions"][0]

    async def create_topic(
        self, name: str, partitions: int = 1, configs: dict[str, str] | None = None
    ) -> None:
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [
                        {"name": key, "value": value} for key, value in (configs or {}).items()
                    ],
                }
            ]
        }
        response = await self.request(CREATE_TOPICS, 4, body)
        assert response["topics"][0]["error_code"] == 0, response

    async def metadata(self, topics: Sequence[str] | None, version: int = 8) -> dict[str, Any]:
        body = {"topics": None if topics is None else [{"name": name} for name in topics]}
        return await self.request(METADATA, version, body)

    async def init_producer_id(self) -> tuple[int, int]:
        body = {"transactional_id": None, "transaction_timeout_ms": 60_000}
        response = await self.request(INIT_PRODUCER_ID, 1, body)
        assert response["error_code"] == 0
        return response["producer_id"], response["producer_epoch"]


def produce_body(topic: str, records: dict[int, bytes | None], *, acks: int = -1) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 30_000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [
                    {"index": index, "records": data} for index, data in records.items()
                ],
            }
        ],
    }


def fetch_body(
    positions: dict[str, list[tuple[int, int]]],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    partition_max_bytes: int = 1 << 20,
    max_bytes: int = 50 << 20,
    isolation_level: int = 0,
    current_leader_epoch: int = -1,
) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation_level,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": index,
                        "current_leader_epoch": current_leader_epoch,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": partition_max_bytes,
                    }
                    for index, offset in partitions
                ],
            }
            for topic, partitions in positions.items()
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def batch(
    values: Iterable[bytes],
    *,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    keys: Sequence[bytes | None] | None = None,
    timestamp_ms: int = TIMESTAMP_MS,
) -> bytes:
    """A producer-style batch (offsets from 0) holding ``values``."""
    records = [
        Record(
            index,
            timestamp_ms + index,
            keys[index] if keys is not None else f"k{index}".encode(),
            value,
        )
        for index, value in enumerate(values)
    ]
    return encode_batch(
        records,
        base_offset=0,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


@dataclass
class RunningBroker:
    server: BrokerServer
    port: int
    nursery: trio.Nursery
    clients: list[BrokerClient] = field(default_factory=list)

    async def connect(
        self, client_id: str | None = "broker-tests", *, receive_buffer_bytes: int | None = None
    ) -> BrokerClient:
        """A new connection; a small ``receive_buffer_bytes`` makes the kernel hold little."""
        if receive_buffer_bytes is None:
            stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        else:
            sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
            await sock.connect(("127.0.0.1", self.port))
            stream = trio.SocketStream(sock)
        client = BrokerClient(stream, client_id)
        self.clients.append(client)
        return client

    @property
    def broker(self) -> Any:
        assert self.server.broker is not None
        return self.server.broker

    def crash_on_exit(self) -> None:
        """Make leaving the block drop every log as a killed process would.

        No producer snapshot, no checkpoint, no clean-shutdown marker: what a
        SIGKILL leaves behind, with the page cache intact.
        """
        broker = self.broker

        def crash() -> None:
            for partition in broker.topics.partitions():
                crash_log(partition.log)

        broker.close = crash


def broker_config(data_dir: Path, **fields: Any) -> BrokerConfig:
    """A config on a free port; one offsets partition keeps start-up fast unless overridden."""
    fields.setdefault("offsets_topic_num_partitions", 1)
    return BrokerConfig(data_dir=data_dir, listen_port=0, **fields)


@asynccontextmanager
async def open_broker(
    data_dir: Path, config: BrokerConfig | None = None, **fields: Any
) -> AsyncIterator[RunningBroker]:
    """Serve ``data_dir`` until the block ends; a crash of the server fails the test."""
    config = config or broker_config(data_dir, **fields)
    # Under the mock clock (autojump_clock) disk work runs inline: that clock jumps
    # whenever every task waits, and a worker thread's time is real.
    simulated = isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock)
    server = BrokerServer(config, off_loop=run_inline) if simulated else BrokerServer(config)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.run)
        running = RunningBroker(server, port, nursery)
        try:
            yield running
        finally:
            for client in running.clients:
                with trio.CancelScope(shield=True):
                    await client.aclose()
            nursery.cancel_scope.cancel()


def records_of(data: bytes | None) -> list[Record]:
    """Every record of a fetched record set (a trailing partial batch is ignored)."""
    return [record for decoded in decode_record_set(data or b"") for record in decoded.records]


class Wire:
    """The helpers of this module, handed to tests by the ``wire`` fixture."""

    BrokerClient = BrokerClient
    ConnectionClosedError = ConnectionClosedError
    batch = staticmethod(batch)
    broker_config = staticmethod(broker_config)
    fetch_body = staticmethod(fetch_body)
    open_broker = staticmethod(open_broker)
    produce_body = staticmethod(produce_body)
    records_of = staticmethod(records_of)


@pytest.fixture
def wire() -> type[Wire]:
    return Wire
