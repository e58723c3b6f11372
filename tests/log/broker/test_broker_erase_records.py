"""EraseRecords through the wire, on an in-process broker on its own: the records go
from every read and from the files, their neighbours stay, what cannot be erased is
refused, a partition serves nothing past an erasure it has not done yet, and a
compaction never brings an erased record back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from eventplatform.log.extensions import ERASED_HEADER
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import API_VERSIONS, ERASE_RECORDS
from eventplatform.log.protocol.apis.entities import ERASE_OFFSETS_MAX
from eventplatform.log.storage import Compression

TOPIC = "lines"
SECRET = b"password=hunter2"


def erase_body(offsets: list[int], **fields: Any) -> dict[str, Any]:
    body = {"topic": TOPIC, "partition": 0, "offsets": offsets, "timeout_ms": 10_000}
    return body | fields


def line(number: int) -> bytes:
    return SECRET if number % 5 == 2 else b"line %d" % number


async def write_lines(client: Any, wire: Any, count: int = 40) -> None:
    for first in range(0, count, 4):
        values = [line(n) for n in range(first, first + 4)]
        codec = Compression.GZIP if first % 8 else Compression.NONE
        answer = await client.produce(TOPIC, wire.batch(values, compression=codec))
        assert answer["error_code"] == 0


async def read_all(client: Any, wire: Any) -> list[Any]:
    found: list[Any] = []
    offset = 0
    for _ in range(100):
        answer = await client.fetch(TOPIC, offset)
        records = wire.records_of(answer["records"])
        if not records:
            return found
        found += [r for r in records if r.offset >= offset]
        offset = found[-1].offset + 1
    raise AssertionError("the fetches never reached the end")


async def test_erased_records_are_gone_from_reads_and_files_and_their_neighbours_stay(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs={"segment.bytes": "700"})
        await write_lines(client, wire)
        before = await read_all(client, wire)
        doomed = [r.offset for r in before if r.value == SECRET]
        answer = await client.request(ERASE_RECORDS, 0, erase_body(doomed))
        assert (answer["error_code"], answer["erased"]) == (0, len(doomed))
        after = await read_all(client, wire)
        assert [(r.offset, r.key, r.timestamp) for r in after] == [
            (r.offset, r.key, r.timestamp) for r in before
        ]
        for old, new in zip(before, after, strict=True):
            if old.offset in doomed:
                assert (new.value, new.headers) == (None, ((ERASED_HEADER, b""),))
            else:
                assert new.value == old.value
        files = list((tmp_path / f"{TOPIC}-0").glob("*.log"))
        assert files and all(SECRET not in path.read_bytes() for path in files)
        again = await client.request(ERASE_RECORDS, 0, erase_body(doomed))
        assert again["error_code"] == 0
        appended = await client.produce(TOPIC, wire.batch([b"after"]))
        assert appended["base_offset"] == before[-1].offset + 1


async def test_what_cannot_be_erased_is_refused_with_a_reason(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        await write_lines(client, wire, 4)
        ahead = await client.request(ERASE_RECORDS, 0, erase_body([4]))
        assert ahead["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert "high watermark" in ahead["error_message"]
        negative = await client.request(ERASE_RECORDS, 0, erase_body([-1]))
        assert negative["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        many = await client.request(ERASE_RECORDS, 0, erase_body([0] * (ERASE_OFFSETS_MAX + 1)))
        assert many["error_code"] == ErrorCode.INVALID_REQUEST
        missing = await client.request(ERASE_RECORDS, 0, erase_body([0], topic="nothing"))
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        fenced = await client.request(ERASE_RECORDS, 0, erase_body([0], current_leader_epoch=7))
        assert fenced["error_code"] != ErrorCode.NONE
        nothing = await client.request(ERASE_RECORDS, 0, erase_body([]))
        assert (nothing["error_code"], nothing["erased"]) == (0, 0)
        assert [r.value for r in await read_all(client, wire)] == [line(n) for n in range(4)]
        versions = await client.request(API_VERSIONS, 3, {})
        assert ERASE_RECORDS.key not in {entry["api_key"] for entry in versions["api_keys"]}


async def test_a_partition_serves_nothing_past_an_erasure_it_has_not_done(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        for number in range(8):  # a batch each: reads stop at whole batches
            assert (await client.produce(TOPIC, wire.batch([line(number)])))["error_code"] == 0
        partition = running.broker.topics.partition(TOPIC, 0)
        partition.erasures.commit([2, 7])  # committed; the erasure task not woken
        assert [r.offset for r in await read_all(client, wire)] == [0, 1]
        assert partition.read_for_replica(0, 1 << 20).read_bytes()  # up to offset 2
        running.broker.erasure_work.wake()
        with trio.fail_after(10):
            await partition.erasures.wait_done([2, 7])
        values = [r.value for r in await read_all(client, wire)]
        assert values == [line(n) if n not in (2, 7) else None for n in range(8)]


async def test_a_compaction_never_brings_an_erased_record_back(tmp_path: Path, wire: Any) -> None:
    """The erasure waits for a compaction in progress, and a compaction prepares its
    pass after any erasure before it: the two never interleave."""
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": "500",
        "min.cleanable.dirty.ratio": "0",
    }
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs=configs)
        for first in range(0, 40, 4):
            keys = [b"k%d" % (n % 11) for n in range(first, first + 4)]
            values = [line(n) for n in range(first, first + 4)]
            assert (await client.produce(TOPIC, wire.batch(values, keys=keys)))["error_code"] == 0
        broker = running.broker
        partition = broker.topics.partition(TOPIC, 0)
        doomed = [r.offset for r in await read_all(client, wire) if r.value == SECRET]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.compact_log, partition)
            nursery.start_soon(client.request, ERASE_RECORDS, 0, erase_body(doomed))
        await broker.compact_log(partition)
        assert all(r.value != SECRET for r in await read_all(client, wire))
        files = list((tmp_path / f"{TOPIC}-0").glob("*.log"))
        assert all(SECRET not in path.read_bytes() for path in files)
