"""Fetch through the wire: long polling in virtual time, byte limits, errors, isolation.

Waits run on ``MockClock(autojump_threshold=0)`` (pytest-trio's
``autojump_clock``): when every task is blocked the clock jumps to the next
deadline, so a ten-second ``max_wait_ms`` costs no real time and elapsed
times are exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DELETE_RECORDS, DELETE_TOPICS, FETCH

TOPIC = "events"
VALUE_BYTES = 200


async def produce_batches(client: Any, wire: Any, count: int, *, partition: int = 0) -> int:
    """Append ``count`` one-record batches of equal size; returns the size of one."""
    sizes = set()
    for index in range(count):
        data = wire.batch([b"%04d" % index + b"x" * VALUE_BYTES])
        sizes.add(len(data))
        answer = await client.produce(TOPIC, data, partition=partition)
        assert answer["error_code"] == 0
    assert len(sizes) == 1
    return sizes.pop()


def offsets(wire: Any, answer: dict[str, Any]) -> list[int]:
    return [record.offset for record in wire.records_of(answer["records"])]


# ---------------------------------------------------------------- long polling


async def test_a_fetch_with_nothing_to_read_waits_max_wait_ms(
    tmp_path: Path, wire: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        start = trio.current_time()
        answer = await client.fetch(TOPIC, 0, max_wait_ms=7_000, min_bytes=1)
        elapsed = trio.current_time() - start
        assert answer["error_code"] == 0
        assert answer["records"] in (b"", None)
        assert 7.0 <= elapsed < 7.1


async def test_a_produce_ends_the_wait_early(
    tmp_path: Path, wire: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with wire.open_broker(tmp_path) as running:
        consumer = await running.connect()
        producer = await running.connect()
        await consumer.create_topic(TOPIC, partitions=2)
        start = trio.current_time()

        async def produce_later() -> None:
            await trio.sleep(2)
            data = wire.batch([b"late"])
            assert (await producer.produce(TOPIC, data, partition=1))["error_code"] == 0

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce_later)
            body = wire.fetch_body({TOPIC: [(0, 0), (1, 0)]}, max_wait_ms=10_000, min_bytes=1)
            response = await consumer.request(FETCH, 11, body)
        elapsed = trio.current_time() - start
        assert 2.0 <= elapsed < 2.1
        partitions = {
            entry["partition_index"]: entry for entry in response["responses"][0]["partitions"]
        }
        assert [record.value for record in wire.records_of(partitions[1]["records"])] == [b"late"]
        assert partitions[0]["records"] in (b"", None)
        assert partitions[1]["high_watermark"] == 1


async def test_min_bytes_holds_the_answer_until_enough_has_arrived(
    tmp_path: Path, wire: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with wire.open_broker(tmp_path) as running:
        consumer = await running.connect()
        producer = await running.connect()
        await consumer.create_topic(TOPIC)
        size = len(wire.batch([b"0000" + b"x" * VALUE_BYTES]))
        start = trio.current_time()
        arrivals: list[float] = []

        async def produce_twice() -> None:
            for _ in range(2):
                await trio.sleep(1)
                await produce_batches(producer, wire, 1)
                arrivals.append(trio.current_time() - start)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce_twice)
            answer = await consumer.fetch(TOPIC, 0, max_wait_ms=10_000, min_bytes=2 * size)
        elapsed = trio.current_time() - start
        assert [round(arrival, 1) for arrival in arrivals] == [1.0, 2.0]
        assert 2.0 <= elapsed < 2.1
        assert offsets(wire, answer) == [0, 1]


async def test_min_bytes_not_reached_answers_what_there_is_at_max_wait(
    tmp_path: Path, wire: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        size = await produce_batches(client, wire, 1)
        start = trio.current_time()
        answer = await client.fetch(TOPIC, 0, max_wait_ms=3_000, min_bytes=size + 1)
        assert 3.0 <= trio.current_time() - start < 3.1
        assert offsets(wire, answer) == [0]


async def test_min_bytes_already_met_answers_at_once(
    tmp_path: Path, wire: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        size = await produce_batches(client, wire, 2)
        start = trio.current_time()
        answer = await client.fetch(TOPIC, 0, max_wait_ms=30_000, min_bytes=size)
        assert trio.current_time() - start < 0.1
        assert offsets(wire, answer) == [0, 1]


async def test_deleting_the_topic_ends_a_waiting_fetch(
    tmp_path: Path, wire: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with wire.open_broker(tmp_path) as running:
        consumer = await running.connect()
        admin = await running.connect()
        await consumer.create_topic(TOPIC)
        start = trio.current_time()

        async def delete_later() -> None:
            await trio.sleep(1)
            response = await admin.request(
                DELETE_TOPICS, 3, {"topic_names": [TOPIC], "timeout_ms": 1000}
            )
            assert response["responses"][0]["error_code"] == 0

        async with trio.open_nursery() as nursery:
            nursery.start_soon(delete_later)
            answer = await consumer.fetch(TOPIC, 0, max_wait_ms=20_000, min_bytes=1)
        assert 1.0 <= trio.current_time() - start < 1.1
        assert answer["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ---------------------------------------------------------------- byte limits


async def test_partition_max_bytes_returns_whole_batches_and_always_the_first(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        size = await produce_batches(client, wire, 3)
        cases = {3 * size: [0, 1, 2], 2 * size: [0, 1], 2 * size - 1: [0], size: [0], 1: [0]}
        for limit, expected in cases.items():
            answer = await client.fetch(TOPIC, 0, partition_max_bytes=limit)
            assert offsets(wire, answer) == expected, limit
            assert len(answer["records"]) == size * len(expected)
        assert offsets(wire, await client.fetch(TOPIC, 1, partition_max_bytes=1)) == [1]


async def test_max_bytes_bounds_the_whole_response(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=3)
        for partition in range(3):
            size = await produce_batches(client, wire, 2, partition=partition)
        positions = {TOPIC: [(0, 0), (1, 0), (2, 0)]}
        body = wire.fetch_body(positions, max_bytes=3 * size, partition_max_bytes=10 * size)
        response = await client.request(FETCH, 11, body)
        got = [offsets(wire, entry) for entry in response["responses"][0]["partitions"]]
        assert got == [[0, 1], [0], []]


async def test_only_the_first_partition_with_data_may_exceed_max_bytes(
    tmp_path: Path, wire: Any
) -> None:
    """KIP-74: the first batch of the first non-empty partition is returned whole; a
    later partition gets nothing that does not fit in what is left of ``max_bytes``."""
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=3)
        for partition in (1, 2):
            size = await produce_batches(client, wire, 2, partition=partition)
        positions = {TOPIC: [(0, 0), (1, 0), (2, 0)]}
        body = wire.fetch_body(positions, max_bytes=size // 2, partition_max_bytes=10 * size)
        response = await client.request(FETCH, 11, body)
        got = [offsets(wire, entry) for entry in response["responses"][0]["partitions"]]
        assert got == [[], [0], []]
        body = wire.fetch_body(positions, max_bytes=size + size // 2, partition_max_bytes=10 * size)
        response = await client.request(FETCH, 11, body)
        got = [offsets(wire, entry) for entry in response["responses"][0]["partitions"]]
        assert got == [[], [0], []]


async def test_several_topics_and_partitions_in_one_request(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path, auto_create_topics_enable=False) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=2)
        await client.create_topic("other")
        await produce_batches(client, wire, 2, partition=0)
        await produce_batches(client, wire, 3, partition=1)
        assert (await client.produce("other", wire.batch([b"o1", b"o2"])))["error_code"] == 0
        positions = {TOPIC: [(0, 1), (1, 0), (7, 0)], "other": [(0, 1)], "missing": [(0, 0)]}
        response = await client.request(FETCH, 11, wire.fetch_body(positions))
        got = {
            (topic["topic"], entry["partition_index"]): (
                entry["error_code"],
                entry["high_watermark"],
                offsets(wire, entry),
            )
            for topic in response["responses"]
            for entry in topic["partitions"]
        }
        assert got == {
            (TOPIC, 0): (0, 2, [1]),
            (TOPIC, 1): (0, 3, [0, 1, 2]),
            (TOPIC, 7): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, []),
            # A batch is returned whole, so offset 0 rides along with offset 1.
            ("other", 0): (0, 2, [0, 1]),
            ("missing", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, []),
        }


# ---------------------------------------------------------------- errors


async def test_offsets_outside_the_log_are_out_of_range(
    tmp_path: Path, wire: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        await produce_batches(client, wire, 4)
        start = trio.current_time()
        beyond = await client.fetch(TOPIC, 5, max_wait_ms=10_000, min_bytes=1)
        assert beyond["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert trio.current_time() - start < 0.1
        assert beyond["high_watermark"] == 4
        at_end = await client.fetch(TOPIC, 4)
        assert (at_end["error_code"], offsets(wire, at_end)) == (0, [])
        body = {
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 2}]}],
            "timeout_ms": 1000,
        }
        deleted = await client.request(DELETE_RECORDS, 1, body)
        assert deleted["topics"][0]["partitions"][0]["low_watermark"] == 2
        below = await client.fetch(TOPIC, 1)
        assert below["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert below["log_start_offset"] == 2
        assert offsets(wire, await client.fetch(TOPIC, 2)) == [2, 3]


@pytest.mark.parametrize("isolation_level", [0, 1])
async def test_read_committed_gets_the_last_stable_offset_and_no_aborted_transactions(
    tmp_path: Path, wire: Any, isolation_level: int
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        await produce_batches(client, wire, 3)
        answer = await client.fetch(TOPIC, 0, isolation_level=isolation_level)
        assert answer["high_watermark"] == answer["last_stable_offset"] == 3
        assert answer["log_start_offset"] == 0
        expected = [] if isolation_level == 1 else None
        assert answer["aborted_transactions"] == expected
        assert offsets(wire, answer) == [0, 1, 2]


async def test_current_leader_epoch_is_checked(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        await produce_batches(client, wire, 1)
        assert (await client.fetch(TOPIC, 0, current_leader_epoch=0))["error_code"] == 0
        assert (await client.fetch(TOPIC, 0, current_leader_epoch=-1))["error_code"] == 0
        future = await client.fetch(TOPIC, 0, current_leader_epoch=1)
        assert future["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert future["records"] in (b"", None)
        running.broker.topics.partition(TOPIC, 0).leader_epoch = 2
        stale = await client.fetch(TOPIC, 0, current_leader_epoch=1)
        assert stale["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
        assert (await client.fetch(TOPIC, 0, current_leader_epoch=2))["error_code"] == 0
        # Before v9 the field does not exist, so nothing is checked.
        body = wire.fetch_body({TOPIC: [(0, 0)]}, current_leader_epoch=1)
        old = await client.request(FETCH, 8, body)
        assert old["responses"][0]["partitions"][0]["error_code"] == 0
