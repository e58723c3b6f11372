"""A failing disk under the broker: the partition goes offline, nothing acknowledged is lost.

The fake disk (``sim_disk``) stands behind the storage's calls to the
operating system. A full partition directory makes the next produce's write
short; a failing one refuses the flusher's fsync. Either way that partition
answers KAFKA_STORAGE_ERROR to produce, fetch and ListOffsets until the broker
restarts, while the broker and its other partitions go on serving. After a
restart (with space again) every acknowledged record is there and nothing of
the failed write is.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import trio
from sim_disk import FakeDisk, fake_disk

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import LIST_OFFSETS
from eventplatform.log.replica.partition import Partition
from eventplatform.log.storage import KafkaStorageError, LogConfig, PartitionLog

TOPIC = "orders"
OFFLINE_WAIT_S = 5.0


async def _list_offsets_error(client: Any, partition: int) -> int:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}
                ],
            }
        ],
    }
    response = await client.request(LIST_OFFSETS, 5, body)
    return int(response["topics"][0]["partitions"][0]["error_code"])


async def _values(client: Any, wire: Any, partition: int) -> list[bytes | None]:
    answer = await client.fetch(TOPIC, 0, partition=partition)
    assert answer["error_code"] == ErrorCode.NONE, answer
    return [record.value for record in wire.records_of(answer["records"])]


async def _assert_offline(client: Any, wire: Any) -> None:
    produced = await client.produce(TOPIC, wire.batch([b"late"]), partition=0)
    assert produced["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR, produced
    fetched = await client.fetch(TOPIC, 0, partition=0)
    assert fetched["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR, fetched
    assert await _list_offsets_error(client, 0) == ErrorCode.KAFKA_STORAGE_ERROR
    # the broker and its other partition go on serving
    assert (await client.produce(TOPIC, wire.batch([b"other"]), partition=1))["error_code"] == 0


async def _restart_and_check(tmp_path: Path, wire: Any, acknowledged: list[bytes]) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert await _values(client, wire, 0) == acknowledged
        produced = await client.produce(TOPIC, wire.batch([b"after"]), partition=0)
        assert produced["error_code"] == 0 and produced["base_offset"] == len(acknowledged)


async def test_a_full_disk_takes_the_partition_offline_and_loses_nothing_acknowledged(
    tmp_path: Path, wire: Any
) -> None:
    disk = FakeDisk(random.Random(5))
    acknowledged = [b"a", b"b", b"c"]
    with fake_disk(disk):
        async with wire.open_broker(tmp_path) as running:
            client = await running.connect()
            await client.create_topic(TOPIC, partitions=2)
            for value in acknowledged:
                assert (await client.produce(TOPIC, wire.batch([value])))["error_code"] == 0
            disk.fill(tmp_path / f"{TOPIC}-0", space_bytes=30)
            failed = await client.produce(TOPIC, wire.batch([b"x" * 200]), partition=0)
            assert failed["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR, failed
            disk.free(tmp_path / f"{TOPIC}-0")
            await _assert_offline(client, wire)
    await _restart_and_check(tmp_path, wire, acknowledged)


async def test_a_failed_fsync_of_the_flusher_takes_the_partition_offline(
    tmp_path: Path, wire: Any
) -> None:
    disk = FakeDisk(random.Random(6))
    acknowledged = [b"a", b"b"]
    with fake_disk(disk):
        async with wire.open_broker(tmp_path) as running:
            client = await running.connect()
            await client.create_topic(TOPIC, partitions=2, configs={"flush.ms": "50"})
            for value in acknowledged:
                assert (await client.produce(TOPIC, wire.batch([value])))["error_code"] == 0
            disk.fail_fsyncs(tmp_path / f"{TOPIC}-0")
            with trio.fail_after(OFFLINE_WAIT_S):
                while (TOPIC, 0) not in running.broker.offline_partitions:
                    await trio.sleep(0.05)
            disk.free(tmp_path / f"{TOPIC}-0")
            await _assert_offline(client, wire)
    await _restart_and_check(tmp_path, wire, acknowledged)


def test_a_follower_whose_epoch_checkpoint_cannot_be_written_goes_offline(
    tmp_path: Path, wire: Any
) -> None:
    """A follower appending the first batch of a new leader epoch writes its epoch
    checkpoint; a failing disk there is a storage error of that partition (the replica
    fetcher goes on with the others), not an OSError that ends the fetcher."""
    leader_log = PartitionLog.open(tmp_path / "leader")
    leader_log.append(wire.batch([b"a", b"b"]), leader_epoch=3)
    record_set = leader_log.read(0, 1 << 20)
    assert record_set is not None
    follower = Partition.open(TOPIC, 0, tmp_path / "follower", LogConfig())
    follower.join_cluster(2)
    follower.become_follower(1, 3, 0, (1, 2))
    disk = FakeDisk(random.Random(7))
    with fake_disk(disk):
        disk.fail_fsyncs(tmp_path / "follower")
        with pytest.raises(KafkaStorageError):
            follower.append_replicated(record_set.read_bytes(), 2)
    assert follower.offline
    assert follower.check_leader() == ErrorCode.KAFKA_STORAGE_ERROR
    follower.close()
    leader_log.close()
