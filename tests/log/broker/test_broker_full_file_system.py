"""A broker on a real, small file system that fills up: a tmpfs of a few MiB.

Unlike the fake disk, here the kernel decides: the last write that fits only
in part comes back short, the next one fails with ENOSPC, and the index files
are real memory maps. The partition goes offline (KAFKA_STORAGE_ERROR), the
broker shuts down cleanly around it, and once the file system has room again a
restart finds every acknowledged record and nothing of the write that failed.
Mounting needs root (CI runs as root, to install its tools).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tmpfs import grow, small_tmpfs

from eventplatform.log.protocol import ErrorCode

TOPIC = "orders"
FILE_SYSTEM_BYTES = 2 * 1024 * 1024
GROWN_FILE_SYSTEM_BYTES = 8 * 1024 * 1024
VALUE_BYTES = 1000
BATCH_RECORDS = 10
PRODUCE_LIMIT = 1000  # batches; the file system fills after about 200


@pytest.fixture
def small_file_system(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", FILE_SYSTEM_BYTES) as mount_point:
        yield mount_point


async def _fill(client: Any, wire: Any) -> list[bytes]:
    """Produce batches until the file system refuses one; the acknowledged values."""
    acknowledged: list[bytes] = []
    for number in range(PRODUCE_LIMIT):
        values = [b"%06d-%03d-" % (number, i) + b"x" * VALUE_BYTES for i in range(BATCH_RECORDS)]
        answer = await client.produce(TOPIC, wire.batch(values))
        if answer["error_code"] != ErrorCode.NONE:
            assert answer["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR, answer
            return acknowledged
        acknowledged += values
    pytest.fail(f"{PRODUCE_LIMIT} batches fitted in a {FILE_SYSTEM_BYTES}-byte file system")


async def _read_all(client: Any, wire: Any) -> list[bytes | None]:
    values: list[bytes | None] = []
    offset = 0
    while True:
        answer = await client.fetch(TOPIC, offset)
        assert answer["error_code"] == ErrorCode.NONE, answer
        records = [r for r in wire.records_of(answer["records"]) if r.offset >= offset]
        if not records:
            return values
        values += [record.value for record in records]
        offset = records[-1].offset + 1


async def test_a_full_file_system_takes_the_partition_offline_and_keeps_what_was_acknowledged(
    small_file_system: Path, wire: Any
) -> None:
    data_dir = small_file_system / "data"
    async with wire.open_broker(data_dir) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs={"segment.bytes": str(256 * 1024)})
        acknowledged = await _fill(client, wire)
        assert len(acknowledged) > 100
        fetched = await client.fetch(TOPIC, 0)
        assert fetched["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR, fetched
        again = await client.produce(TOPIC, wire.batch([b"later"]))
        assert again["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR, again
    grow(small_file_system, GROWN_FILE_SYSTEM_BYTES)
    async with wire.open_broker(data_dir) as running:
        client = await running.connect()
        assert await _read_all(client, wire) == acknowledged
        answer = await client.produce(TOPIC, wire.batch([b"after"]))
        assert answer["error_code"] == ErrorCode.NONE
        assert answer["base_offset"] == len(acknowledged)
