"""A clustered partition leader answers acks=all only once its ISR has the batch, retries
included: an idempotent producer's retry of a batch the leader already holds gets the
original offsets, and the same wait. (A leader cut off from its followers once answered
such a retry at once; the cluster simulation's seeds 3 and 30 lost the record when the new
leader, which never had it, took over.)"""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.partition import ACKS_ALL, Partition, ReplicaSettings
from eventplatform.log.storage import LogConfig
from eventplatform.log.storage.record_batch import Record, encode_batch

SETTINGS = ReplicaSettings(replica_lag_time_max_ms=10_000, min_insync_replicas=2)


def batch(sequence: int) -> bytes:
    records = [Record(i, 1_000, None, f"r{sequence + i}".encode()) for i in range(2)]
    return encode_batch(records, producer_id=7, producer_epoch=0, base_sequence=sequence)


async def check_retry_waits_for_the_isr(directory: Path) -> None:
    partition = Partition.open("t", 0, directory, LogConfig(), clock_ms=lambda: 0)
    partition.join_cluster(1)
    partition.become_leader(0, 0, (1, 2), (1, 2), SETTINGS, 0)
    first = partition.append(batch(0), acks=ACKS_ALL)
    retry = partition.append(batch(0), acks=ACKS_ALL)
    assert (first.error, first.base_offset, first.last_offset) == (ErrorCode.NONE, 0, 1)
    assert (retry.error, retry.base_offset, retry.last_offset) == (ErrorCode.NONE, 0, 1)
    assert partition.log.log_end_offset == 2  # not appended twice

    soon = trio.current_time() + 1.0
    assert await partition.wait_replicated(retry.last_offset, 0, soon) == (
        ErrorCode.REQUEST_TIMED_OUT
    )
    partition.on_replica_fetch(2, 2, 0)  # the follower now has both records
    later = trio.current_time() + 1.0
    assert await partition.wait_replicated(retry.last_offset, 0, later) == ErrorCode.NONE
    partition.close()


def test_a_retried_batch_is_acknowledged_only_once_the_isr_has_it(tmp_path: Path) -> None:
    trio.run(
        check_retry_waits_for_the_isr,
        tmp_path / "t-0",
        clock=trio.testing.MockClock(autojump_threshold=0),
    )
