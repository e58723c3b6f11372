"""Broker-wide limits: request memory, connection quotas, file descriptors.

Large partial frames on many connections stay within ``queued.max.request.bytes``
while other clients are served; ``max.connections`` and
``max.connections.per.ip`` refuse what is over them; a CreateTopics that
would leave the broker without descriptors for its clients is refused with a
clear error, and a broker out of descriptors says so and recovers.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import trio
from admin_requests import create_topics_body, new_topic

from eventplatform.log.broker.context import Deferred, Handler
from eventplatform.log.broker.descriptors import (
    DESCRIPTORS_FOR_ENTITY_VERSIONS,
    DESCRIPTORS_PER_NEW_PARTITION,
)
from eventplatform.log.extensions import ENTITY_VERSIONS_CONFIG
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import API_VERSIONS, CREATE_PARTITIONS, CREATE_TOPICS
from eventplatform.log.replica.topics import TopicRegistry
from eventplatform.log.storage import LogConfig
from eventplatform.testing import BrokerProcess

MIB = 1024 * 1024
_SIZE = struct.Struct(">i")
SERVER_LOGGER = "eventplatform.broker"
CONNECTION_LOGGER = "eventplatform.broker.connection"


async def raw_connection(port: int, *, send_buffer_bytes: int = 64 * 1024) -> trio.SocketStream:
    """A client socket whose small send buffer keeps the kernel from holding much."""
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
    await sock.connect(("127.0.0.1", port))
    return trio.SocketStream(sock)


async def send_partial_frames(
    streams: list[trio.SocketStream], *, frame_bytes: int, body_bytes: int, timeout_s: float
) -> None:
    """Each stream announces a ``frame_bytes`` frame and sends ``body_bytes`` of its body,
    for as long as the broker reads them (at most ``timeout_s``)."""
    chunk = b"\0" * MIB

    async def send_one(stream: trio.SocketStream) -> None:
        await stream.send_all(_SIZE.pack(frame_bytes))
        remaining = body_bytes
        while remaining > 0:
            await stream.send_all(chunk[: min(remaining, len(chunk))])
            remaining -= len(chunk)

    with trio.move_on_after(timeout_s):
        async with trio.open_nursery() as nursery:
            for stream in streams:
                nursery.start_soon(send_one, stream)


async def served(wire: Any, port: int) -> bool:
    """Whether a new client gets its ApiVersions answered within a few seconds."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    client = wire.BrokerClient(stream)
    try:
        with trio.move_on_after(5):
            response = await client.request(API_VERSIONS, 3, _api_versions_body())
            return bool(response["error_code"] == 0)
        return False
    except (wire.ConnectionClosedError, trio.BrokenResourceError):
        return False
    finally:
        await client.aclose()


def _api_versions_body() -> dict[str, Any]:
    return {"client_software_name": "limits", "client_software_version": "1"}


# ---------------------------------------------------------------- request memory


async def test_partial_large_frames_on_many_connections_leave_the_broker_rss_within_the_pool(
    tmp_path: Path, wire: Any
) -> None:
    """12 connections each announce an 8 MiB frame and send 7 MiB of it. Only one frame
    fits ``queued.max.request.bytes`` (12 MiB), so the others are not read: the broker's
    resident memory grows by about one frame, and a new client is answered meanwhile."""
    broker = BrokerProcess(
        tmp_path, ["queued.max.request.bytes=12582912", "offsets.topic.num.partitions=1"]
    ).start()
    streams: list[trio.SocketStream] = []
    try:
        assert await served(wire, broker.port)
        before = broker.resident_bytes()
        streams = [await raw_connection(broker.port) for _ in range(12)]
        await send_partial_frames(streams, frame_bytes=8 * MIB, body_bytes=7 * MIB, timeout_s=3)
        grown = broker.resident_bytes() - before
        assert await served(wire, broker.port)
        assert grown < 40 * MIB, f"the broker grew by {grown / MIB:.0f} MiB"
    finally:
        for stream in streams:
            await stream.aclose()
        broker.kill()


async def test_the_pool_reserves_each_frame_before_its_body_and_releases_it_on_close(
    tmp_path: Path, wire: Any
) -> None:
    """With room for one 2 MiB frame, five connections that announce one each get one
    reservation between them; a small request is still answered; closing them
    gives every byte back."""
    async with wire.open_broker(tmp_path, queued_max_request_bytes=3 * MIB) as running:
        pool = running.broker.request_memory
        streams = [await raw_connection(running.port) for _ in range(5)]
        await send_partial_frames(streams, frame_bytes=2 * MIB, body_bytes=MIB, timeout_s=1)
        assert pool.used_bytes == 2 * MIB
        assert pool.used_bytes_peak <= pool.capacity_bytes
        assert await served(wire, running.port)
        for stream in streams:
            await stream.aclose()
        with trio.fail_after(5):
            while pool.used_bytes:
                await trio.sleep(0.01)


async def test_a_frame_larger_than_the_whole_pool_closes_only_that_connection(
    tmp_path: Path, wire: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=CONNECTION_LOGGER)
    async with wire.open_broker(tmp_path, queued_max_request_bytes=64 * 1024) as running:
        client = await running.connect()
        await client.send_raw(_SIZE.pack(100 * 1024) + b"\0" * 1024)
        with trio.fail_after(5):
            assert await client.wait_closed()
        assert await served(wire, running.port)
    assert any("queued.max.request.bytes=65536" in r.getMessage() for r in caplog.records)


async def test_a_deferred_answer_keeps_its_request_bytes_reserved_until_it_is_sent(
    tmp_path: Path, wire: Any
) -> None:
    """An acks=all produce answers later, and its body may still refer to the request
    frame: the frame's bytes stay counted until the answer leaves, then return."""
    released = trio.Event()
    async with wire.open_broker(tmp_path) as running:
        handlers = running.server.handlers
        original = handlers[API_VERSIONS.key]

        async def deferred(context: Any, request: dict[str, Any]) -> Any:
            body = await original.handle(context, request)

            async def later() -> Any:
                await released.wait()
                return body

            return Deferred(later)

        handlers[API_VERSIONS.key] = Handler(original.api, original.versions, deferred)
        pool = running.broker.request_memory
        client = await running.connect()
        await client.send(API_VERSIONS, 3, _api_versions_body())
        with trio.fail_after(5):
            while pool.used_bytes == 0:
                await trio.sleep(0.01)
        await trio.sleep(0.1)
        assert pool.used_bytes > 0
        released.set()
        with trio.fail_after(5):
            _, response = await client.receive()
        assert response["error_code"] == 0
        with trio.fail_after(5):
            while pool.used_bytes:
                await trio.sleep(0.01)


# ---------------------------------------------------------------- connection quotas


async def test_max_connections_holds_a_new_client_back_until_another_closes(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path, max_connections=3) as running:
        clients = [await running.connect() for _ in range(3)]
        for client in clients:
            assert (await client.request(API_VERSIONS, 3, _api_versions_body()))["error_code"] == 0
        waiting = await running.connect()
        await waiting.send(API_VERSIONS, 3, _api_versions_body())
        with trio.move_on_after(0.5) as unanswered:
            await waiting.receive()
        assert unanswered.cancelled_caught, "a fourth connection was served"
        await clients[0].aclose()
        with trio.fail_after(5):
            _, response = await waiting.receive()
        assert response["error_code"] == 0
        assert running.server.open_connections == 3


async def test_max_connections_per_ip_closes_the_extra_connection_and_an_override_raises_it(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path, max_connections_per_ip=2) as running:
        first, second = await running.connect(), await running.connect()
        third = await running.connect()
        with trio.fail_after(5):
            assert await third.wait_closed()
        for client in (first, second):
            assert (await client.request(API_VERSIONS, 3, _api_versions_body()))["error_code"] == 0
    overrides = (("127.0.0.1", 3),)
    async with wire.open_broker(
        tmp_path, max_connections_per_ip=1, max_connections_per_ip_overrides=overrides
    ) as running:
        clients = [await running.connect() for _ in range(3)]
        for client in clients:
            assert (await client.request(API_VERSIONS, 3, _api_versions_body()))["error_code"] == 0
        with trio.fail_after(5):
            assert await (await running.connect()).wait_closed()


# ---------------------------------------------------------------- descriptors


def test_the_descriptor_cost_of_a_new_partition_is_what_the_budget_counts(tmp_path: Path) -> None:
    """The budget's per-partition figure is measured, not guessed: if storage holds
    more or fewer files per partition, this fails until the figure follows."""

    def open_now() -> int:
        return len(list(Path("/proc/self/fd").iterdir()))

    registry = TopicRegistry.open(tmp_path, LogConfig(), lambda: 0)
    try:
        before = open_now()
        registry.create("counted", 20, {})
        assert open_now() - before == 20 * DESCRIPTORS_PER_NEW_PARTITION
    finally:
        registry.close()


def test_a_partition_with_entity_versions_holds_the_files_the_budget_adds(
    tmp_path: Path,
) -> None:
    def open_now() -> int:
        return len(list(Path("/proc/self/fd").iterdir()))

    registry = TopicRegistry.open(tmp_path, LogConfig(), lambda: 0)
    try:
        before = open_now()
        registry.create("versioned", 20, {ENTITY_VERSIONS_CONFIG: "true"})
        each = DESCRIPTORS_PER_NEW_PARTITION + DESCRIPTORS_FOR_ENTITY_VERSIONS
        assert open_now() - before == 20 * each
    finally:
        registry.close()


OPEN_FILES_LIMIT = 512


async def test_a_create_topics_beyond_the_descriptor_budget_is_refused_and_clients_still_connect(
    tmp_path: Path, wire: Any
) -> None:
    """At ``ulimit -n 512`` a topic whose partitions would take nearly every descriptor
    left is refused before any file is created, with the figures in its message; new
    clients still connect, and produce and fetch still work."""
    broker = BrokerProcess(
        tmp_path, ["offsets.topic.num.partitions=1"], open_files_limit=OPEN_FILES_LIMIT
    ).start()
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", broker.port)
        client = wire.BrokerClient(stream)
        left = OPEN_FILES_LIMIT - broker.open_descriptors()
        partitions = (left - 8) // DESCRIPTORS_PER_NEW_PARTITION
        body = create_topics_body(new_topic("wide", partitions))
        response = await client.request(CREATE_TOPICS, 4, body)
        (result,) = response["topics"]
        assert result["error_code"] == ErrorCode.POLICY_VIOLATION, result
        assert "open-file limit of 512" in result["error_message"]
        assert not list(tmp_path.glob("wide-*"))
        body = create_topics_body(new_topic("wide", partitions), validate_only=True)
        (checked,) = (await client.request(CREATE_TOPICS, 4, body))["topics"]
        assert checked["error_code"] == ErrorCode.POLICY_VIOLATION, checked
        others = [await trio.open_tcp_stream("127.0.0.1", broker.port) for _ in range(20)]
        for other in others:
            answer = await wire.BrokerClient(other).request(API_VERSIONS, 3, _api_versions_body())
            assert answer["error_code"] == 0
            await other.aclose()
        await client.create_topic("narrow", 2)
        grow = {"topics": [{"name": "narrow", "count": 400, "assignments": None}]}
        grow |= {"timeout_ms": 1000, "validate_only": False}
        grown = (await client.request(CREATE_PARTITIONS, 1, grow))["results"][0]
        assert grown["error_code"] == ErrorCode.POLICY_VIOLATION, grown
        appended = await client.produce("narrow", wire.batch([b"still", b"serving"]))
        assert appended["error_code"] == 0
        fetched = await client.fetch("narrow", 0)
        assert [r.value for r in wire.records_of(fetched["records"])] == [b"still", b"serving"]
        await client.aclose()
    finally:
        broker.kill()


async def test_a_broker_out_of_descriptors_logs_it_once_and_accepts_again_when_clients_leave(
    tmp_path: Path, wire: Any
) -> None:
    """Connections alone exhaust ``ulimit -n 128``: accept fails with EMFILE, which the
    broker reports in one clear line (not once per retry) and survives; once clients
    leave, a new one is served."""
    broker = BrokerProcess(
        tmp_path, ["offsets.topic.num.partitions=1"], open_files_limit=128
    ).start()
    streams: list[trio.SocketStream] = []
    try:
        streams = [await trio.open_tcp_stream("127.0.0.1", broker.port) for _ in range(140)]
        await trio.sleep(1.0)
        assert broker.process is not None and broker.process.poll() is None
        reports = [line for line in broker.output if "cannot accept connections" in line]
        assert len(reports) == 1, broker.log_text()[-3000:]
        assert "Too many open files" in reports[0] and "open-file limit 128" in reports[0]
        for stream in streams:
            await stream.aclose()
        streams = []
        with trio.fail_after(10):
            while not await served(wire, broker.port):
                await trio.sleep(0.1)
    finally:
        for stream in streams:
            await stream.aclose()
        broker.kill()


async def test_a_periodic_flush_that_finds_no_descriptor_left_is_put_off_and_logged(
    tmp_path: Path, wire: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Out of descriptors (connections can use them all), the flusher cannot duplicate a
    segment's files: it says so and tries again on its next round instead of taking the
    broker down."""
    caplog.set_level(logging.WARNING, logger=SERVER_LOGGER)
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic("flushed", configs={"flush.ms": "1"})
        assert (await client.produce("flushed", wire.batch([b"w"])))["error_code"] == 0
        partition_log = running.broker.topics.partition("flushed", 0).log
        with trio.fail_after(5):
            while partition_log.recovery_point < 1 or not partition_log.background_flush:
                await trio.sleep(0.05)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        lowest_free = os.dup(0)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
        try:
            partition_log.append(wire.batch([b"x"]))
            await trio.sleep(0.3)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert any("open-file limit" in r.getMessage() for r in caplog.records)
        with trio.fail_after(5):
            while partition_log.recovery_point < 2:
                await trio.sleep(0.05)
        assert (await client.produce("flushed", wire.batch([b"y"])))["error_code"] == 0
