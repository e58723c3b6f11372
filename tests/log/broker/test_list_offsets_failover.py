"""ListOffsets right after a failover: offsets a client was told never go backwards.

A follower learns the leader's high watermark from its next fetch, so a follower
elected leader may hold a high watermark below what the old leader answered. Until
its own catches up with the start of its epoch (the end of its log when elected,
every record of which the old leader may have acknowledged), it answers the latest
offset, and offsets for timestamps, with OFFSET_NOT_AVAILABLE, a retriable error,
as Kafka does; the earliest offset it answers at once.
"""

from __future__ import annotations

from pathlib import Path

from eventplatform.log.broker.handlers.list_offsets import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    _answer,
)
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.partition import NO_LEADER, Partition, ReplicaSettings
from eventplatform.log.storage import LogConfig
from eventplatform.log.storage.record_batch import Record, encode_batch

SETTINGS = ReplicaSettings(replica_lag_time_max_ms=10_000, min_insync_replicas=1)
REPLICAS = (1, 2)


def replica(directory: Path, node_id: int) -> Partition:
    partition = Partition.open("t", 0, directory, LogConfig(), clock_ms=lambda: 0)
    partition.join_cluster(node_id)
    return partition


def replicate(leader: Partition, follower: Partition) -> None:
    data = leader.read_for_replica(follower.log.log_end_offset, 1 << 20)
    follower.append_replicated(
        data.read_bytes() if data is not None else b"", leader.high_watermark
    )
    leader.on_replica_fetch(follower.node_id, follower.log.log_end_offset, 0)


def asked(partition: Partition, timestamp: int) -> tuple[ErrorCode, int]:
    entry = {"partition_index": 0, "timestamp": timestamp, "current_leader_epoch": -1}
    answer = _answer(partition, entry, committed=False)
    return answer["error_code"], answer["offset"]


def test_a_new_leader_behind_its_epoch_start_answers_offset_not_available(
    tmp_path: Path,
) -> None:
    old, new = replica(tmp_path / "1", 1), replica(tmp_path / "2", 2)
    old.become_leader(0, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    new.become_follower(1, 0, 0, REPLICAS)
    records = [Record(i, 1_000 + i, None, b"r%d" % i) for i in range(10)]
    old.append(encode_batch(records))
    replicate(old, new)  # the new one has the records, and hears of the old HW only later
    assert asked(old, LATEST_TIMESTAMP) == (ErrorCode.NONE, 10)
    assert new.high_watermark == 0

    old.become_follower(NO_LEADER, 1, 1, REPLICAS)
    new.become_leader(1, 1, REPLICAS, REPLICAS, SETTINGS, 0)

    assert asked(new, LATEST_TIMESTAMP)[0] == ErrorCode.OFFSET_NOT_AVAILABLE
    assert asked(new, 1_005)[0] == ErrorCode.OFFSET_NOT_AVAILABLE
    assert asked(new, EARLIEST_TIMESTAMP) == (ErrorCode.NONE, 0)
    replicate(new, old)  # the old leader, now a follower, fetches: the HW catches up
    assert asked(new, LATEST_TIMESTAMP) == (ErrorCode.NONE, 10)
    assert asked(new, 1_005) == (ErrorCode.NONE, 5)
