"""Produce through the wire: per-partition error codes, acks, idempotence, storage form.

Every request goes through the project codec to an in-process broker; what
the log holds afterwards is checked through Fetch, ListOffsets or the segment
file itself.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import trio
from crc32c import crc32c

from eventplatform.log.config import BrokerConfig
from eventplatform.log.protocol import ErrorCode, decode_response, encode_request
from eventplatform.log.protocol.apis import LIST_OFFSETS, METADATA, PRODUCE
from eventplatform.log.storage import Compression
from eventplatform.log.storage.files import CLEAN_SHUTDOWN_FILE
from eventplatform.log.storage.record_batch import (
    CONTROL_BIT,
    CRC_START,
    HEADER_BYTES,
    parse_header,
)
from eventplatform.testing import BrokerProcess

TOPIC = "orders"
PRODUCER_ID = 4242
SEQUENCE_MAX = 2**31 - 1
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")


def reseal(data: bytes | bytearray) -> bytes:
    """Recompute the CRC-32C of a one-batch buffer after a deliberate edit."""
    buffer = bytearray(data)
    _CRC.pack_into(buffer, 17, crc32c(bytes(buffer[CRC_START:])))
    return bytes(buffer)


def with_attributes(data: bytes, attributes: int) -> bytes:
    buffer = bytearray(data)
    _ATTRIBUTES.pack_into(buffer, 21, attributes)
    return reseal(buffer)


async def log_end(client: Any, topic: str = TOPIC, partition: int = 0) -> int:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}
                ],
            }
        ],
    }
    response = await client.request(LIST_OFFSETS, 5, body)
    answer = response["topics"][0]["partitions"][0]
    assert answer["error_code"] == 0
    return int(answer["offset"])


async def fetched_values(client: Any, wire: Any, topic: str = TOPIC) -> list[bytes | None]:
    """Every value from offset 0 to the high watermark (a fetch reads one segment at a time)."""
    values: list[bytes | None] = []
    offset = 0
    for _ in range(100):
        answer = await client.fetch(topic, offset, partition_max_bytes=10 << 20)
        assert answer["error_code"] == 0
        records = [
            record for record in wire.records_of(answer["records"]) if record.offset >= offset
        ]
        values += [record.value for record in records]
        if not records or records[-1].offset + 1 >= answer["high_watermark"]:
            return values
        offset = records[-1].offset + 1
    raise AssertionError("the partition never reached its high watermark")


# ---------------------------------------------------------------- error codes


async def test_a_good_batch_is_appended_at_the_log_end(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        first = await client.produce(TOPIC, wire.batch([b"a", b"b", b"c"]))
        second = await client.produce(TOPIC, wire.batch([b"d"]))
        assert (first["error_code"], first["base_offset"]) == (0, 0)
        assert (second["error_code"], second["base_offset"]) == (0, 3)
        assert first["log_start_offset"] == 0
        assert await fetched_values(client, wire) == [b"a", b"b", b"c", b"d"]


@pytest.mark.parametrize(
    ("name", "corrupt"),
    [
        # A flipped bit in the last record: the CRC-32C no longer matches.
        ("crc", lambda data: data[:-1] + bytes([data[-1] ^ 0x01])),
        # Magic 1 at byte 16; the CRC does not cover the magic, so only the magic is wrong.
        ("magic", lambda data: data[:16] + b"\x01" + data[17:]),
        # batchLength claims more bytes than the request carries.
        ("length", lambda data: data[:8] + struct.pack(">i", len(data)) + data[12:]),
        # Only part of a header.
        ("truncated", lambda data: data[: HEADER_BYTES - 5]),
    ],
    ids=["crc", "magic", "length", "truncated"],
)
async def test_a_damaged_batch_is_corrupt_message_and_not_appended(
    tmp_path: Path, wire: Any, name: str, corrupt: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        answer = await client.produce(TOPIC, corrupt(wire.batch([b"a", b"b"])))
        assert answer["error_code"] == ErrorCode.CORRUPT_MESSAGE, name
        assert answer["base_offset"] == -1
        assert answer["error_message"]
        assert await log_end(client) == 0


async def test_a_partition_entry_without_records_is_corrupt_message(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        for records in (None, b""):
            answer = await client.produce(TOPIC, records)
            assert answer["error_code"] == ErrorCode.CORRUPT_MESSAGE
        assert await log_end(client) == 0


async def test_a_batch_over_max_message_bytes_is_message_too_large(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs={"max.message.bytes": "300"})
        small = wire.batch([b"x" * 100])
        large = wire.batch([b"x" * 300])
        assert len(small) <= 300 < len(large)
        assert (await client.produce(TOPIC, large))["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
        assert (await client.produce(TOPIC, small))["error_code"] == 0
        assert await log_end(client) == 1


async def test_the_broker_wide_message_max_bytes_is_the_topic_default(
    tmp_path: Path, wire: Any
) -> None:
    config = BrokerConfig.load(
        None,
        ["message.max.bytes=300", "offsets.topic.num.partitions=1"],
        data_dir=tmp_path,
        listen_port=0,
    )
    async with wire.open_broker(tmp_path, config) as running:
        client = await running.connect()
        answer = await client.produce(TOPIC, wire.batch([b"x" * 300]))
        assert answer["error_code"] == ErrorCode.MESSAGE_TOO_LARGE


async def test_control_batches_and_two_batches_in_one_entry_are_invalid_record(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        control = with_attributes(wire.batch([b"a"]), CONTROL_BIT)
        two = wire.batch([b"a"]) + wire.batch([b"b"])
        for records in (control, two):
            answer = await client.produce(TOPIC, records)
            assert answer["error_code"] == ErrorCode.INVALID_RECORD
        assert await log_end(client) == 0


@pytest.mark.parametrize("codec", [5, 6, 7])
async def test_an_unknown_codec_is_refused(tmp_path: Path, wire: Any, codec: int) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        answer = await client.produce(TOPIC, with_attributes(wire.batch([b"a"]), codec))
        assert answer["error_code"] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        assert await log_end(client) == 0


async def test_unknown_partitions_and_topics_are_unknown_topic_or_partition(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path, auto_create_topics_enable=False) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=2)
        body = wire.produce_body(
            TOPIC, {0: wire.batch([b"a"]), 2: wire.batch([b"b"]), -1: wire.batch([b"c"])}
        )
        response = await client.request(PRODUCE, 8, body)
        answers = {
            entry["index"]: entry["error_code"]
            for entry in response["responses"][0]["partition_responses"]
        }
        assert answers == {
            0: ErrorCode.NONE,
            2: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            -1: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        missing = await client.produce("missing", wire.batch([b"a"]))
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        metadata = await client.metadata(["missing"])
        assert metadata["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_acks_2_is_invalid_required_acks_for_every_partition(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=2)
        body = wire.produce_body(TOPIC, {0: wire.batch([b"a"]), 1: wire.batch([b"b"])}, acks=2)
        response = await client.request(PRODUCE, 8, body)
        errors = [entry["error_code"] for entry in response["responses"][0]["partition_responses"]]
        assert errors == [ErrorCode.INVALID_REQUIRED_ACKS] * 2
        assert await log_end(client, partition=0) == 0
        assert await log_end(client, partition=1) == 0


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_old_produce_versions_are_unsupported_per_partition(
    tmp_path: Path, wire: Any, version: int
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=2)
        body = wire.produce_body(TOPIC, {0: wire.batch([b"a"]), 1: wire.batch([b"b"])}, acks=1)
        response = await client.request(PRODUCE, version, body)
        errors = [entry["error_code"] for entry in response["responses"][0]["partition_responses"]]
        assert errors == [ErrorCode.UNSUPPORTED_VERSION] * 2
        assert await log_end(client) == 0


async def test_acks_0_gets_no_response_even_for_an_error(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        good = wire.produce_body(TOPIC, {0: wire.batch([b"a"])}, acks=0)
        bad = wire.produce_body(TOPIC, {0: wire.batch([b"b"])[:-1]}, acks=0)
        with trio.fail_after(10):
            silent = [
                await client.send(PRODUCE, 8, good, answered=False),
                await client.send(PRODUCE, 8, bad, answered=False),
            ]
            metadata_id = await client.send(METADATA, 8, {"topics": [{"name": TOPIC}]})
            received_id, body = await client.receive()
        assert received_id == metadata_id
        assert metadata_id not in silent
        assert body["topics"][0]["name"] == TOPIC
        assert await fetched_values(client, wire) == [b"a"]


# ---------------------------------------------------------------- idempotence


def idempotent(
    wire: Any, values: list[bytes], sequence: int, *, epoch: int = 0, producer_id: int = PRODUCER_ID
) -> bytes:
    return wire.batch(values, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


async def test_a_retried_batch_gets_its_original_offset_and_is_not_appended_again(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        first = await client.produce(TOPIC, idempotent(wire, [b"a", b"b"], 0))
        second = await client.produce(TOPIC, idempotent(wire, [b"c"], 2))
        retry_first = await client.produce(TOPIC, idempotent(wire, [b"a", b"b"], 0))
        retry_second = await client.produce(TOPIC, idempotent(wire, [b"c"], 2))
        assert (first["error_code"], first["base_offset"]) == (0, 0)
        assert (second["error_code"], second["base_offset"]) == (0, 2)
        assert (retry_first["error_code"], retry_first["base_offset"]) == (0, 0)
        assert (retry_second["error_code"], retry_second["base_offset"]) == (0, 2)
        assert await fetched_values(client, wire) == [b"a", b"b", b"c"]


async def test_only_the_last_five_batches_are_recognised_as_retries(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        for sequence in range(7):
            answer = await client.produce(TOPIC, idempotent(wire, [b"%d" % sequence], sequence))
            assert answer["error_code"] == 0
        recent = await client.produce(TOPIC, idempotent(wire, [b"2"], 2))
        assert (recent["error_code"], recent["base_offset"]) == (0, 2)
        forgotten = await client.produce(TOPIC, idempotent(wire, [b"1"], 1))
        assert forgotten["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert await log_end(client) == 7


async def test_a_sequence_gap_is_out_of_order(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert (await client.produce(TOPIC, idempotent(wire, [b"a"], 0)))["error_code"] == 0
        gap = await client.produce(TOPIC, idempotent(wire, [b"c"], 2))
        assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        overlap = await client.produce(TOPIC, idempotent(wire, [b"x", b"b"], 0))
        assert overlap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert (await client.produce(TOPIC, idempotent(wire, [b"b"], 1)))["error_code"] == 0
        assert await fetched_values(client, wire) == [b"a", b"b"]


async def test_epochs_fence_older_producers_and_a_new_epoch_starts_at_zero(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert (await client.produce(TOPIC, idempotent(wire, [b"a"], 0, epoch=1)))[
            "error_code"
        ] == 0
        older = await client.produce(TOPIC, idempotent(wire, [b"b"], 1, epoch=0))
        assert older["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
        not_from_zero = await client.produce(TOPIC, idempotent(wire, [b"b"], 1, epoch=2))
        assert not_from_zero["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        bumped = await client.produce(TOPIC, idempotent(wire, [b"b"], 0, epoch=2))
        assert (bumped["error_code"], bumped["base_offset"]) == (0, 1)
        fenced = await client.produce(TOPIC, idempotent(wire, [b"c"], 1, epoch=1))
        assert fenced["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
        assert await fetched_values(client, wire) == [b"a", b"b"]


async def test_sequences_wrap_after_int32_max(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        last = await client.produce(TOPIC, idempotent(wire, [b"a", b"b"], SEQUENCE_MAX - 1))
        assert last["error_code"] == 0
        wrapped = await client.produce(TOPIC, idempotent(wire, [b"c"], 0))
        assert (wrapped["error_code"], wrapped["base_offset"]) == (0, 2)
        retried = await client.produce(TOPIC, idempotent(wire, [b"a", b"b"], SEQUENCE_MAX - 1))
        assert (retried["error_code"], retried["base_offset"]) == (0, 0)


async def test_producers_do_not_share_sequences(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        one = await client.produce(TOPIC, idempotent(wire, [b"a"], 0, producer_id=1))
        two = await client.produce(TOPIC, idempotent(wire, [b"b"], 0, producer_id=2))
        plain = await client.produce(TOPIC, wire.batch([b"c"]))
        plain_again = await client.produce(TOPIC, wire.batch([b"c"]))
        assert [one["base_offset"], two["base_offset"]] == [0, 1]
        assert [plain["base_offset"], plain_again["base_offset"]] == [2, 3]


async def _produce_history(client: Any, wire: Any) -> None:
    """Epoch 0 then epoch 1 of one producer: offsets 0-1 (epoch 0) and 2-4 (epoch 1)."""
    answers = [
        await client.produce(TOPIC, idempotent(wire, [b"a", b"b"], 0)),
        await client.produce(TOPIC, idempotent(wire, [b"c"], 0, epoch=1)),
        await client.produce(TOPIC, idempotent(wire, [b"d", b"e"], 1, epoch=1)),
    ]
    assert [answer["base_offset"] for answer in answers] == [0, 2, 3]


async def _check_history_survived(client: Any, wire: Any) -> None:
    retry = await client.produce(TOPIC, idempotent(wire, [b"d", b"e"], 1, epoch=1))
    assert (retry["error_code"], retry["base_offset"]) == (0, 3)
    gap = await client.produce(TOPIC, idempotent(wire, [b"g"], 4, epoch=1))
    assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    fenced = await client.produce(TOPIC, idempotent(wire, [b"x"], 2, epoch=0))
    assert fenced["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
    following = await client.produce(TOPIC, idempotent(wire, [b"f"], 3, epoch=1))
    assert (following["error_code"], following["base_offset"]) == (0, 5)
    assert await fetched_values(client, wire) == [b"a", b"b", b"c", b"d", b"e", b"f"]


async def test_producer_state_survives_a_clean_restart(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        await _produce_history(await running.connect(), wire)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    async with wire.open_broker(tmp_path) as running:
        await _check_history_survived(await running.connect(), wire)


@pytest.mark.parametrize("segment_bytes", [None, "150"], ids=["one-segment", "rolling"])
async def test_producer_state_survives_a_crash(
    tmp_path: Path, wire: Any, segment_bytes: str | None
) -> None:
    """After a kill -9 the state comes from the last snapshot plus the batches after it."""
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        if segment_bytes is not None:
            await client.create_topic(TOPIC, configs={"segment.bytes": segment_bytes})
        await _produce_history(client, wire)
        running.crash_on_exit()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    partition_directory = tmp_path / f"{TOPIC}-0"
    assert not (partition_directory / CLEAN_SHUTDOWN_FILE).exists()
    segments = sorted(partition_directory.glob("*.log"))
    assert len(segments) == (1 if segment_bytes is None else 3)
    async with wire.open_broker(tmp_path) as running:
        await _check_history_survived(await running.connect(), wire)


def _sync_request(sock: socket.socket, api: Any, version: int, body: dict[str, Any]) -> Any:
    sock.sendall(encode_request(api, version, body, correlation_id=7, client_id="sync"))
    size = struct.unpack(">i", _receive_exactly(sock, 4))[0]
    correlation_id, answer = decode_response(api, version, _receive_exactly(sock, size))
    assert correlation_id == 7
    return answer


def _receive_exactly(sock: socket.socket, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        data += chunk
    return bytes(data)


def _sync_produce(port: int, wire: Any, records: bytes) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        answer = _sync_request(sock, PRODUCE, 8, wire.produce_body(TOPIC, {0: records}))
    return answer["responses"][0]["partition_responses"][0]


async def test_producer_state_survives_sigkill_of_a_broker_process(
    tmp_path: Path, wire: Any
) -> None:
    process = BrokerProcess(tmp_path, ["offsets.topic.num.partitions=1"])
    await trio.to_thread.run_sync(process.start)
    try:
        for values, sequence in (([b"a", b"b"], 0), ([b"c"], 2)):
            answer = await trio.to_thread.run_sync(
                _sync_produce, process.port, wire, idempotent(wire, values, sequence)
            )
            assert answer["error_code"] == 0
        await trio.to_thread.run_sync(process.kill)
        assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
        await trio.to_thread.run_sync(process.restart)
        assert process.process is not None
        assert process.process.poll() is None, process.log_text()
        retry = await trio.to_thread.run_sync(
            _sync_produce, process.port, wire, idempotent(wire, [b"c"], 2)
        )
        assert (retry["error_code"], retry["base_offset"]) == (0, 2)
        gap = await trio.to_thread.run_sync(
            _sync_produce, process.port, wire, idempotent(wire, [b"e"], 4)
        )
        assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        following = await trio.to_thread.run_sync(
            _sync_produce, process.port, wire, idempotent(wire, [b"d"], 3)
        )
        assert (following["error_code"], following["base_offset"]) == (0, 3)
    finally:
        await trio.to_thread.run_sync(process.kill)


# ---------------------------------------------------------------- storage form


@pytest.mark.parametrize(
    "codec",
    [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD],
    ids=lambda codec: codec.name.lower(),
)
async def test_batches_keep_their_compression_on_disk(
    tmp_path: Path, wire: Any, codec: Compression
) -> None:
    values = [b"value-%03d " % index * 20 for index in range(50)]
    sent = wire.batch(values, compression=codec)
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        assert (await client.produce(TOPIC, wire.batch([b"first"])))["error_code"] == 0
        assert (await client.produce(TOPIC, sent))["base_offset"] == 1
        fetched = await client.fetch(TOPIC, 1)
        assert [record.value for record in wire.records_of(fetched["records"])] == values
    segment = (tmp_path / f"{TOPIC}-0" / f"{0:020d}.log").read_bytes()
    first = parse_header(segment, 0)
    stored = parse_header(segment, first.size_bytes)
    assert stored.compression is codec
    assert stored.base_offset == 1
    assert stored.size_bytes == len(sent) < sum(len(value) for value in values)
    # Everything the CRC covers is byte for byte what the producer sent.
    start = first.size_bytes
    assert segment[start + CRC_START : start + stored.size_bytes] == sent[CRC_START:]
    assert stored.crc == parse_header(sent).crc


async def test_a_slow_fsync_does_not_stall_produce_requests(
    tmp_path: Path, wire: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The periodic flush (``flush.ms``) runs in a worker thread: while a disk takes seconds
    to fsync, produce requests are still answered at once, and the recovery point moves
    only when the fsync has returned."""
    import os
    import threading

    from eventplatform.log.storage import LogConfig

    real_fsync = os.fsync
    started, release = threading.Event(), threading.Event()

    def slow_fsync(descriptor: int) -> None:
        started.set()
        release.wait(2)
        real_fsync(descriptor)

    config = wire.broker_config(tmp_path, log_defaults=LogConfig(flush_ms=100))
    async with wire.open_broker(tmp_path, config) as running:
        client = await running.connect()
        assert (await client.produce(TOPIC, wire.batch([b"a"])))["error_code"] == 0
        partition = running.broker.topics.partition(TOPIC, 0)
        monkeypatch.setattr(os, "fsync", slow_fsync)
        with trio.fail_after(5):
            while not started.is_set():
                await trio.sleep(0.01)
        try:
            answered = []
            for value in (b"b", b"c", b"d"):
                began = trio.current_time()
                answer = await client.produce(TOPIC, wire.batch([value]))
                answered.append(trio.current_time() - began)
                assert answer["error_code"] == 0
            assert max(answered) < 0.5, f"produce waited for the fsync: {answered}"
            assert partition.log.recovery_point == 0, "claimed durable before the fsync returned"
        finally:
            release.set()
        with trio.fail_after(5):
            while partition.log.recovery_point < 4:
                await trio.sleep(0.02)


async def test_acks_all_produces_on_one_connection_wait_for_their_replicas_together(
    tmp_path: Path, wire: Any
) -> None:
    """An acks=all produce is appended before the next request on its connection is read,
    and the connection reads on while it waits for the replicas: the requests behind it
    are appended meanwhile, and the answers still come back in request order."""
    from eventplatform.log.replica.partition import ReplicaSettings

    settings = ReplicaSettings(replica_lag_time_max_ms=60_000, min_insync_replicas=2)
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert (await client.produce(TOPIC, wire.batch([b"seed"]), acks=1))["error_code"] == 0
        partition = running.broker.topics.partition(TOPIC, 0)
        partition.join_cluster(1)
        partition.become_leader(0, 0, (1, 2), (1, 2), settings, 0)
        sent = []
        for value in (b"a", b"b", b"c"):
            body = wire.produce_body(TOPIC, {0: wire.batch([value])}, acks=-1)
            sent.append(await client.send(PRODUCE, 8, body))
        with trio.fail_after(5):
            while partition.log.log_end_offset < 4:
                await trio.sleep(0.01)
        with trio.move_on_after(0.3):
            await client.receive()
            raise AssertionError("an acks=all produce was answered before the ISR had it")
        partition.on_replica_fetch(2, partition.log.log_end_offset, 0)
        with trio.fail_after(5):
            answers = [await client.receive() for _ in sent]
        assert [correlation for correlation, _ in answers] == sent
        offsets = [
            body["responses"][0]["partition_responses"][0]["base_offset"] for _, body in answers
        ]
        assert offsets == [1, 2, 3]


async def test_an_acks_all_retry_of_a_replicated_batch_succeeds_while_the_isr_is_small(
    tmp_path: Path, wire: Any
) -> None:
    """The retry of a batch that min.insync.replicas replicas hold is answered with its
    offset though the ISR is smaller: an error there (NOT_ENOUGH_REPLICAS, or
    NOT_ENOUGH_REPLICAS_AFTER_APPEND) keeps the client resending a batch the log holds,
    and an idempotent librdkafka producer may resend it under a new producer epoch."""
    from eventplatform.log.replica.partition import ReplicaSettings

    settings = ReplicaSettings(replica_lag_time_max_ms=60_000, min_insync_replicas=2)
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert (await client.produce(TOPIC, wire.batch([b"seed"]), acks=1))["error_code"] == 0
        partition = running.broker.topics.partition(TOPIC, 0)
        partition.join_cluster(1)
        partition.become_leader(0, 0, (1, 2), (1, 2), settings, 0)
        original = idempotent(wire, [b"a"], 0)
        body = wire.produce_body(TOPIC, {0: original}, acks=-1)
        sent = await client.send(PRODUCE, 8, body)
        with trio.fail_after(5):
            while partition.log.log_end_offset < 2:
                await trio.sleep(0.01)
        partition.on_replica_fetch(2, partition.log.log_end_offset, 0)
        with trio.fail_after(5):
            correlation, answer = await client.receive()
        assert correlation == sent
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        # the follower is dropped from the ISR, and fetches again before it is back in;
        # the client retries, unsure of its answer
        partition.become_leader(0, 1, (1, 2), (1,), settings, 0)
        partition.on_replica_fetch(2, partition.log.log_end_offset, 0)
        with trio.fail_after(5):
            retried = await client.produce(TOPIC, original, acks=-1)
        assert (retried["error_code"], retried["base_offset"]) == (0, 1)
        fresh = await client.produce(TOPIC, idempotent(wire, [b"b"], 1), acks=-1)
        assert fresh["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
        assert partition.log.log_end_offset == 2
