"""Connections: order of answers, back-pressure, garbage framing, versions, idle close, shutdown."""

from __future__ import annotations

import logging
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from eventplatform.log.broker.context import Handler
from eventplatform.log.protocol import ErrorCode, decode_response, encode_request
from eventplatform.log.protocol.apis import (
    API_VERSIONS,
    DESCRIBE_CONFIGS,
    FETCH,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
)
from eventplatform.log.storage.files import CLEAN_SHUTDOWN_FILE

TOPIC = "pipeline"
CONNECTION_LOGGER = "eventplatform.broker.connection"


def list_offsets_body(topic: str) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}],
            }
        ],
    }


# ---------------------------------------------------------------- order


async def test_pipelined_requests_are_answered_in_order_and_take_effect_in_order(
    tmp_path: Path, wire: Any
) -> None:
    """50 requests of mixed APIs go out before any answer is read."""
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        sent: list[tuple[int, str, int]] = []  # (correlation id, kind, batches produced before)
        produced = 0
        with trio.fail_after(30):
            for index in range(50):
                kind = ("produce", "fetch", "metadata", "versions", "offsets", "silent", "misc")[
                    index % 7
                ]
                correlation_id = await _send_one(client, wire, kind, index)
                if kind in ("produce", "silent"):
                    produced += 1
                if kind != "silent":
                    sent.append((correlation_id, kind, produced))
            answers = [await client.receive() for _ in sent]
        assert [correlation_id for correlation_id, _ in answers] == [item[0] for item in sent]
        for (_, kind, produced_before), (_, body) in zip(sent, answers, strict=True):
            _check_answer(wire, kind, produced_before, body)


async def _send_one(client: Any, wire: Any, kind: str, index: int) -> int:
    if kind in ("produce", "silent"):
        acks = 0 if kind == "silent" else 1
        body = wire.produce_body(TOPIC, {0: wire.batch([b"%d" % index])}, acks=acks)
        return int(await client.send(PRODUCE, 8, body, answered=kind == "produce"))
    if kind == "fetch":
        return int(await client.send(FETCH, 11, wire.fetch_body({TOPIC: [(0, 0)]})))
    if kind == "metadata":
        return int(await client.send(METADATA, 8, {"topics": [{"name": TOPIC}]}))
    if kind == "versions":
        return int(await client.send(API_VERSIONS, 3, {}))
    if kind == "offsets":
        return int(await client.send(LIST_OFFSETS, 5, list_offsets_body(TOPIC)))
    misc = [
        (INIT_PRODUCER_ID, 1, {"transactional_id": None}),
        (DESCRIBE_CONFIGS, 3, {"resources": [{"resource_type": 2, "resource_name": TOPIC}]}),
        (
            OFFSET_FOR_LEADER_EPOCH,
            3,
            {"topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "leader_epoch": 0}]}]},
        ),
    ]
    api, version, body = misc[index % len(misc)]
    return int(await client.send(api, version, body))


def _check_answer(wire: Any, kind: str, produced_before: int, body: dict[str, Any]) -> None:
    if kind == "produce":
        answer = body["responses"][0]["partition_responses"][0]
        assert (answer["error_code"], answer["base_offset"]) == (0, produced_before - 1)
    elif kind == "fetch":
        answer = body["responses"][0]["partitions"][0]
        assert answer["high_watermark"] == produced_before
        assert len(wire.records_of(answer["records"])) == produced_before
    elif kind == "offsets":
        assert body["topics"][0]["partitions"][0]["offset"] == produced_before
    elif kind == "metadata":
        assert body["topics"][0]["name"] == TOPIC
    elif kind == "versions":
        assert body["error_code"] == 0
        assert {entry["api_key"] for entry in body["api_keys"]} >= {0, 1, 3, 18}


# ---------------------------------------------------------------- back-pressure


async def test_a_client_that_never_reads_holds_the_broker_to_max_in_flight(
    tmp_path: Path, wire: Any
) -> None:
    """Answers pile up in the kernel's buffers and ``max.in.flight`` answers, then the
    broker stops reading that connection; nothing more is read, handled or buffered."""
    in_flight = 2
    request_count = 60
    async with wire.open_broker(
        tmp_path, max_in_flight_requests_per_connection=in_flight
    ) as running:
        setup = await running.connect()
        await setup.create_topic(TOPIC)
        value = bytes(range(256)) * 3900  # about 1 MB: each answer is one batch this big
        assert (await setup.produce(TOPIC, wire.batch([value])))["error_code"] == 0
        handled = _count_fetches(running)

        client = await running.connect(receive_buffer_bytes=64 * 1024)
        reader = client.stream
        body = wire.fetch_body({TOPIC: [(0, 0)]}, partition_max_bytes=2 << 20)
        with trio.fail_after(30):
            for _ in range(request_count):
                await client.send(FETCH, 11, body)
        settled = await _wait_until_settled(handled)
        local_port = reader.socket.getsockname()[1]
        connection = next(
            item
            for item in running.server._connections
            if item.stream.socket.getpeername()[1] == local_port
        )
        send_buffer = connection.stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        receive_buffer = reader.socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        answer_bytes = len(value)
        bound = (send_buffer + receive_buffer) // answer_bytes + in_flight + 2
        assert settled <= bound < request_count, (settled, bound)

        with trio.fail_after(60):
            for _ in range(request_count):
                _, response = await client.receive()
                records = wire.records_of(response["responses"][0]["partitions"][0]["records"])
                assert [record.value for record in records] == [value]
        assert handled[0] == request_count


def _count_fetches(running: Any) -> list[int]:
    handlers = running.server.handlers
    original = handlers[FETCH.key]
    count = [0]

    async def counting(context: Any, request: dict[str, Any]) -> Any:
        count[0] += 1
        return await original.handle(context, request)

    handlers[FETCH.key] = Handler(original.api, original.versions, counting)
    return count


async def _wait_until_settled(count: list[int]) -> int:
    """The counter's value once it has not moved for a while (real time; bounded)."""
    last = -1
    steady = 0
    for _ in range(200):
        await trio.sleep(0.02)
        steady = steady + 1 if count[0] == last else 0
        last = count[0]
        if steady >= 10:
            return last
    raise AssertionError(f"the broker kept handling requests: {count[0]}")


# ---------------------------------------------------------------- garbage framing


@pytest.mark.parametrize(
    ("name", "frame"),
    [
        pytest.param("oversized", struct.pack(">i", 4096) + b"\x00" * 100, id="oversized"),
        pytest.param("negative", struct.pack(">i", -5), id="negative"),
        # A well-formed header whose api key (999) no table knows.
        pytest.param(
            "unknown-api",
            struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, -1),
            id="unknown-api",
        ),
        pytest.param("short-header", struct.pack(">i", 3) + b"\x00\x03\x00", id="short-header"),
        pytest.param(
            "bad-client-id",
            struct.pack(">i", 10) + struct.pack(">hhih", 3, 8, 1, -7),
            id="bad-client-id",
        ),
    ],
)
async def test_garbage_framing_closes_only_that_connection_and_is_logged(
    tmp_path: Path, wire: Any, caplog: pytest.LogCaptureFixture, name: str, frame: bytes
) -> None:
    caplog.set_level(logging.INFO, logger=CONNECTION_LOGGER)
    async with wire.open_broker(tmp_path, socket_request_max_bytes=2048) as running:
        bystander = await running.connect()
        victim = await running.connect()
        await bystander.metadata([TOPIC])
        with trio.fail_after(10):
            await victim.send_raw(frame)
            assert await victim.wait_closed()
        answer = await bystander.metadata([TOPIC])
        assert answer["topics"][0]["name"] == TOPIC
        fresh = await running.connect()
        assert (await fresh.metadata([TOPIC]))["topics"][0]["error_code"] == 0
    warnings = [
        record.getMessage()
        for record in caplog.records
        if record.name == CONNECTION_LOGGER and record.levelno >= logging.WARNING
    ]
    assert len(warnings) == 1, warnings
    assert "closing connection" in warnings[0]
    if name in ("oversized", "negative"):
        assert "socket.request.max.bytes=2048" in warnings[0]
    if name == "unknown-api":
        assert "unknown API key 999" in warnings[0]


def produce_frame_of_size(wire: Any, size: int) -> bytes:
    """A Produce request whose frame (without its size prefix) is exactly ``size`` bytes."""
    value_bytes = size
    for _ in range(10):
        body = wire.produce_body(TOPIC, {0: wire.batch([b"x" * value_bytes])})
        frame = encode_request(PRODUCE, 8, body, correlation_id=1, client_id="c")
        if len(frame) - 4 == size:
            return frame
        value_bytes += size - (len(frame) - 4)
    raise AssertionError(f"no produce frame of exactly {size} bytes")


async def test_a_frame_of_exactly_the_size_limit_is_read_and_one_byte_more_is_not(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path, socket_request_max_bytes=2048) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        await client.send_raw(produce_frame_of_size(wire, 2048))
        client.expected.append((1, PRODUCE, 8))
        _, answer = await client.receive()
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        await client.send_raw(produce_frame_of_size(wire, 2049))
        with trio.fail_after(10):
            assert await client.read_frame() is None


# ---------------------------------------------------------------- versions


async def test_a_served_api_at_an_unsupported_version_gets_unsupported_version(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        init = await client.request(INIT_PRODUCER_ID, 5, {"transactional_id": None})
        assert init["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        fetch = await client.request(FETCH, 12, wire.fetch_body({TOPIC: [(0, 0)]}))
        assert fetch["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert fetch["responses"] == []
        # The connection stays usable.
        assert (await client.metadata([TOPIC]))["topics"][0]["name"] == TOPIC


async def test_an_unserved_version_without_an_error_field_closes_the_connection(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        body = {"acks": 1, "timeout_ms": 1000, "topic_data": []}
        await client.send(PRODUCE, 10, body, answered=False)
        with trio.fail_after(10):
            assert await client.read_frame() is None
        other = await running.connect()
        assert (await other.metadata([TOPIC]))["topics"][0]["name"] == TOPIC


def api_versions_v9_request(correlation_id: int) -> bytes:
    """An ApiVersions request at a version no broker knows, built field by field."""
    client_id = b"probe"
    frame = b"".join(
        [
            struct.pack(">h", 18),  # api_key: ApiVersions
            struct.pack(">h", 9),  # api_version
            struct.pack(">i", correlation_id),
            struct.pack(">h", len(client_id)) + client_id,  # client_id, int16-prefixed
            b"\x00",  # request header tagged fields
            b"\x05" + b"test",  # client_software_name: compact string, length + 1
            b"\x04" + b"1.0",  # client_software_version
            b"\x00",  # body tagged fields
        ]
    )
    return struct.pack(">i", len(frame)) + frame


@pytest.mark.parametrize("version", [4, 9])
async def test_api_versions_at_an_unknown_version_answers_v0_with_the_list(
    tmp_path: Path, wire: Any, version: int
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        supported = await client.request(API_VERSIONS, 3, {})
        if version == 9:
            await client.send_raw(api_versions_v9_request(77))
            correlation_expected = 77
        else:
            correlation_expected = await client.send(API_VERSIONS, version, {}, answered=False)
        with trio.fail_after(10):
            frame = await client.read_frame()
        assert frame is not None
        # Header v0 (correlation id only), then the v0 body: error_code, api_keys.
        assert frame[:4] == struct.pack(">i", correlation_expected)
        assert frame[4:6] == struct.pack(">h", ErrorCode.UNSUPPORTED_VERSION)
        correlation_id, body = decode_response(API_VERSIONS, 0, frame)
        assert correlation_id == correlation_expected
        assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert body["api_keys"] == supported["api_keys"]
        assert {"api_key": 18, "min_version": 0, "max_version": 3} in body["api_keys"]
        assert (await client.metadata([TOPIC]))["topics"][0]["name"] == TOPIC


# ---------------------------------------------------------------- idle connections


async def test_idle_connections_close_after_connections_max_idle_ms(
    tmp_path: Path, wire: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with wire.open_broker(tmp_path, connections_max_idle_ms=5_000) as running:
        client = await running.connect()
        for _ in range(3):
            await trio.sleep(4)
            assert (await client.metadata([TOPIC]))["topics"][0]["name"] == TOPIC
        quiet_since = trio.current_time()
        with trio.fail_after(60):
            assert await client.wait_closed()
        assert 5.0 <= trio.current_time() - quiet_since < 5.1


# ---------------------------------------------------------------- shutdown


async def test_shutdown_answers_the_request_in_progress_and_leaves_the_marker(
    tmp_path: Path, wire: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with wire.open_broker(tmp_path) as running:
        busy = await running.connect()
        idle = await running.connect()
        await busy.create_topic(TOPIC)
        await idle.metadata([TOPIC])
        body = wire.fetch_body({TOPIC: [(0, 0)]}, max_wait_ms=3_000, min_bytes=1)
        correlation_id = await busy.send(FETCH, 11, body)
        await trio.sleep(1)
        assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
        start = trio.current_time()
        running.server.shutdown()
        with trio.fail_after(10):
            assert await idle.wait_closed()
            assert trio.current_time() - start < 0.1
            received_id, answer = await busy.receive()
            assert received_id == correlation_id
            assert answer["responses"][0]["partitions"][0]["error_code"] == 0
            assert 2.0 <= trio.current_time() - start < 2.1
            assert await busy.wait_closed()
            await running.server.wait_stopped()
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", running.port)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / f"{TOPIC}-0" / CLEAN_SHUTDOWN_FILE).exists()


async def test_shutdown_gives_a_busy_connection_only_the_grace_period(
    tmp_path: Path, wire: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with wire.open_broker(tmp_path, shutdown_grace_ms=2_000) as running:
        busy = await running.connect()
        await busy.create_topic(TOPIC)
        body = wire.fetch_body({TOPIC: [(0, 0)]}, max_wait_ms=30_000, min_bytes=1)
        await busy.send(FETCH, 11, body)
        await trio.sleep(1)
        start = trio.current_time()
        running.server.shutdown()
        with trio.fail_after(10):
            await running.server.wait_stopped()
        assert 2.0 <= trio.current_time() - start < 2.1
        assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
        with trio.fail_after(10):
            assert await busy.read_frame() is None
