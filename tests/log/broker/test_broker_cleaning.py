"""Compaction in a running broker: it works off the event loop, so a large clean, or a
decompression bomb on a compacted topic, never stops the broker answering others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from eventplatform.log.storage import Compression, Record
from eventplatform.log.storage.record_batch import encode_batch

TOPIC = "compacted"
BOMB_VALUE_BYTES = 8 * 1024 * 1024
BOMB_RECORDS = 24
"""192 MiB of zeros, a few KiB once compressed with zstd."""
BATCHES = 240
RECORDS_PER_BATCH = 250
ANSWER_WAIT_S_MAX = 0.2
PROBE_INTERVAL_S = 0.01


def bomb_batch() -> bytes:
    value = bytes(BOMB_VALUE_BYTES)
    records = [Record(i, 1_700_000_000_000, b"bomb-%d" % i, value) for i in range(BOMB_RECORDS)]
    return encode_batch(records, base_offset=0, compression=Compression.ZSTD)


def keyed_batch(number: int) -> bytes:
    records = [
        Record(i, 1_700_000_000_000, b"key-%d" % (i % 50), b"value-%d-%d" % (number, i))
        for i in range(RECORDS_PER_BATCH)
    ]
    return encode_batch(records, base_offset=0, compression=Compression.GZIP)


async def probe(client: Any, waits: list[float], done: trio.Event) -> None:
    """Metadata requests back to back until ``done``; each one's wait goes to ``waits``."""
    while not done.is_set():
        began = trio.current_time()
        await client.metadata([TOPIC])
        waits.append(trio.current_time() - began)
        await trio.sleep(PROBE_INTERVAL_S)


async def fill_compacted_topic(client: Any, bomb: bytes) -> None:
    """A decompression bomb, then enough superseded records for a clean of seconds."""
    await client.create_topic(
        TOPIC,
        configs={
            "cleanup.policy": "compact",
            "segment.bytes": "65536",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    assert (await client.produce(TOPIC, bomb))["error_code"] == 0
    for number in range(BATCHES):
        assert (await client.produce(TOPIC, keyed_batch(number)))["error_code"] == 0


async def test_compacting_a_decompression_bomb_and_a_large_log_keeps_the_broker_answering(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        bomb = bomb_batch()
        assert len(bomb) < 64 * 1024
        await fill_compacted_topic(client, bomb)
        partition = running.broker.topics.partition(TOPIC, 0)
        assert len(list(partition.log.segments)) > 5
        records_before = sum(1 for _ in partition.log.iter_batches())

        prober = await running.connect()
        waits: list[float] = []
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(probe, prober, waits, done)
            began = trio.current_time()
            await running.broker.clean_logs()
            cleaning_s = trio.current_time() - began
            done.set()

        assert max(waits) < ANSWER_WAIT_S_MAX, (
            f"a request waited {max(waits):.3f} s while the cleaner ran for {cleaning_s:.3f} s"
        )
        assert len(waits) >= 3, (len(waits), cleaning_s)
        # The pass did its work: old values are gone, the bomb is still there, whole.
        assert sum(1 for _ in partition.log.iter_batches()) < records_before
        answer = await client.fetch(TOPIC, 0, partition_max_bytes=1)
        fetched = answer["records"]
        assert fetched[21:] == bomb[21:]


async def test_cancelling_a_compaction_stops_its_worker_and_leaves_the_log_as_it_was(
    tmp_path: Path, wire: Any
) -> None:
    """Shutdown cancels the background work: the worker thread stops at its next batch
    rather than finishing a clean of seconds, and removes what it wrote."""
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await fill_compacted_topic(client, bomb_batch())
        partition = running.broker.topics.partition(TOPIC, 0)
        before = [(record.offset, record.value) for record in partition.log.iter_records()]
        began = trio.current_time()
        with trio.move_on_after(0.05):
            await running.broker.compact_log(partition)
        stopped_s = trio.current_time() - began
        assert stopped_s < 1.0, f"the worker ran on for {stopped_s:.3f} s"
        assert not list(partition.directory.glob("*.cleaned"))
        assert [(record.offset, record.value) for record in partition.log.iter_records()] == before


async def test_compaction_runs_on_the_cleaner_backoff_not_the_retention_interval(
    tmp_path: Path, wire: Any
) -> None:
    """Kafka's log cleaner looks for dirty logs every ``log.cleaner.backoff.ms``,
    whatever ``log.retention.check.interval.ms`` is: a compacted topic is cleaned within
    seconds though retention is checked hourly."""
    async with wire.open_broker(
        tmp_path, log_retention_check_interval_ms=3_600_000, log_cleaner_backoff_ms=200
    ) as running:
        client = await running.connect()
        await client.create_topic(
            TOPIC,
            configs={
                "cleanup.policy": "compact",
                "segment.bytes": "4096",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        for number in range(20):
            assert (await client.produce(TOPIC, keyed_batch(number)))["error_code"] == 0
        partition = running.broker.topics.partition(TOPIC, 0)
        with trio.move_on_after(10):
            while partition.log.cleaner_offset == 0:
                await trio.sleep(0.1)
        assert partition.log.cleaner_offset > 0, "no compaction pass ran in 10 s"
