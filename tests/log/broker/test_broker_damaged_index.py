"""A broker process restarted on an index damaged between a clean stop and the start:
fetches at the offsets the damaged entry covers are answered, with the right batches."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import trio

from eventplatform.log.storage.files import CLEAN_SHUTDOWN_FILE
from eventplatform.log.storage.record_batch import parse_header
from eventplatform.testing import BrokerProcess

TOPIC = "damaged"
BATCHES = 40
OFFSET_ENTRY = struct.Struct(">ii")


async def connect(wire: Any, port: int) -> Any:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    return wire.BrokerClient(stream)


def damage_middle_entry(partition_dir: Path) -> range:
    """Point the offset index's middle entry inside its batch; returns the offsets it covers."""
    index_path = partition_dir / f"{0:020d}.index"
    data = bytearray(index_path.read_bytes())
    entries = len(data) // OFFSET_ENTRY.size
    assert entries >= 10, entries
    slot = entries // 2
    relative, position = OFFSET_ENTRY.unpack_from(data, slot * OFFSET_ENTRY.size)
    following = OFFSET_ENTRY.unpack_from(data, (slot + 1) * OFFSET_ENTRY.size)[0]
    log_bytes = (partition_dir / f"{0:020d}.log").read_bytes()
    assert parse_header(log_bytes, position).base_offset == relative
    OFFSET_ENTRY.pack_into(data, slot * OFFSET_ENTRY.size, relative, position + 9)
    index_path.write_bytes(bytes(data))
    return range(relative, following)


async def test_fetches_over_an_index_entry_damaged_while_stopped_are_answered(
    tmp_path: Path, wire: Any
) -> None:
    process = BrokerProcess(tmp_path, ["offsets.topic.num.partitions=1"])
    await trio.to_thread.run_sync(process.start)
    try:
        client = await connect(wire, process.port)
        await client.create_topic(TOPIC, configs={"index.interval.bytes": "1"})
        for number in range(BATCHES):
            values = [b"%03d-%d" % (number, index) for index in range(3)]
            assert (await client.produce(TOPIC, wire.batch(values)))["error_code"] == 0
        await client.aclose()
        assert await trio.to_thread.run_sync(process.stop) == 0
        assert (tmp_path / f"{TOPIC}-0" / CLEAN_SHUTDOWN_FILE).exists()

        covered = damage_middle_entry(tmp_path / f"{TOPIC}-0")
        await trio.to_thread.run_sync(process.restart)
        client = await connect(wire, process.port)
        for offset in range(3 * BATCHES):
            try:
                answer = await client.fetch(TOPIC, offset, partition_max_bytes=1)
            except wire.ConnectionClosedError:
                raise AssertionError(
                    f"fetch at {offset} (damaged entry covers {covered}) closed the "
                    f"connection:\n{process.log_text()[-3000:]}"
                ) from None
            assert answer["error_code"] == 0
            records = wire.records_of(answer["records"])
            assert [record.offset for record in records] == [
                offset - offset % 3 + index for index in range(3)
            ]
            assert records[offset % 3].value == b"%03d-%d" % (offset // 3, offset % 3)
        await client.aclose()
        assert "rebuilding its indexes" in process.log_text()
    finally:
        await trio.to_thread.run_sync(process.kill)
