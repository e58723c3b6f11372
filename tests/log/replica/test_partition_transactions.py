"""A partition with transactions: markers written by the leader, the last stable offset,
read_committed reads, the aborted transactions a fetch gets, recovery after a clean close
and after a kill (mid-transaction, or with an index entry the kill lost), truncation, and
followers that end up with the leader's state."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing
from crash_simulation import crash_partition

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.partition import (
    ACKS_ALL,
    Partition,
    ReplicaSettings,
)
from eventplatform.log.replica.producer_state import SNAPSHOT_FILE
from eventplatform.log.storage import Cleaner, LogConfig, Record
from eventplatform.log.storage.files import TXN_INDEX_SUFFIX
from eventplatform.log.storage.record_batch import (
    decode_batch,
    decode_record_set,
    encode_batch,
)
from eventplatform.log.storage.txn_index import AbortedTransaction

TIMESTAMP_MS = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=100_000)


def batch(
    *values: bytes,
    producer_id: int = -1,
    epoch: int = 0,
    sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    records = [Record(i, TIMESTAMP_MS, b"key", value) for i, value in enumerate(values)]
    if producer_id < 0:
        epoch = -1
    return encode_batch(
        records,
        base_offset=0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )


class Producer:
    """A transactional producer's batches: its id, epoch and next sequence."""

    def __init__(self, partition: Partition, producer_id: int, epoch: int = 0) -> None:
        self.partition = partition
        self.producer_id = producer_id
        self.epoch = epoch
        self.sequence = 0

    def send(self, *values: bytes, transactional: bool = True) -> int:
        data = batch(
            *values,
            producer_id=self.producer_id,
            epoch=self.epoch,
            sequence=self.sequence,
            transactional=transactional,
        )
        result = self.partition.append(data, acks=ACKS_ALL)
        assert result.error == ErrorCode.NONE, result
        self.sequence += len(values)
        return result.base_offset

    def end(self, *, commit: bool, coordinator_epoch: int = 0) -> int:
        result = self.partition.write_marker(
            self.producer_id, self.epoch, commit, coordinator_epoch
        )
        assert result.error == ErrorCode.NONE, result
        assert result.base_offset == result.last_offset
        return result.base_offset


def open_partition(directory: Path, config: LogConfig = CONFIG) -> Partition:
    return Partition.open("payments", 0, directory, config, clock_ms=lambda: TIMESTAMP_MS)


def plain(partition: Partition, value: bytes) -> int:
    result = partition.append(batch(value))
    assert result.error == ErrorCode.NONE
    return result.base_offset


def values_read(partition: Partition, *, committed: bool, offset: int = 0) -> list[bytes | None]:
    found = partition.read(offset, 1 << 20, committed=committed)
    data = b"" if found is None else found.read_bytes()
    return [
        record.value
        for decoded in decode_record_set(data)
        if not decoded.header.is_control
        for record in decoded.records
    ]


# ---------------------------------------------------------------- markers and the LSO


def test_the_marker_is_a_control_batch_of_the_producer(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    producer = Producer(partition, 11, epoch=4)
    producer.send(b"a", b"b")
    offset = producer.end(commit=True, coordinator_epoch=2)
    assert offset == 2
    found = partition.read(offset, 1 << 20)
    assert found is not None
    decoded = decode_batch(found.read_bytes())
    header = decoded.header
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (11, 4, -1)
    assert header.base_offset == 2 and header.records_count == 1
    assert decoded.records[0].key == b"\x00\x00\x00\x01"  # version 0, COMMIT
    assert decoded.records[0].value == b"\x00\x00\x00\x00\x00\x02"  # version 0, epoch 2
    partition.close()


def test_read_committed_stops_at_the_first_open_transaction(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    plain(partition, b"before")
    first = Producer(partition, 1)
    second = Producer(partition, 2)
    first_start = first.send(b"one")
    second.send(b"two")
    plain(partition, b"behind")
    assert partition.high_watermark == 4
    assert partition.last_stable_offset == first_start == 1
    assert values_read(partition, committed=True) == [b"before"]
    assert values_read(partition, committed=False) == [b"before", b"one", b"two", b"behind"]
    first.end(commit=True)
    assert partition.last_stable_offset == 2  # the second transaction is still open
    second.end(commit=False)
    assert partition.last_stable_offset == partition.high_watermark == 6
    assert values_read(partition, committed=True) == [b"before", b"one", b"two", b"behind"]
    partition.close()


def test_aborted_transactions_are_those_overlapping_the_fetched_range(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    first = Producer(partition, 1)
    second = Producer(partition, 2)
    a = first.send(b"a1")  # 0
    b = second.send(b"b1")  # 1
    first.send(b"a2")  # 2
    a_end = first.end(commit=False)  # 3
    second.end(commit=True)  # 4
    c = first.send(b"a3")  # 5
    c_end = first.end(commit=False)  # 6
    assert partition.aborted_transactions(0, 7) == [(1, a), (1, c)]
    assert partition.aborted_transactions(a_end + 1, 7) == [(1, c)]
    assert partition.aborted_transactions(0, c) == [(1, a)]
    assert partition.aborted_transactions(c_end + 1, 7) == []
    assert b not in [first_offset for _, first_offset in partition.aborted_transactions(0, 7)]
    partition.close()


def test_a_marker_with_nothing_open_is_written_and_bumps_the_epoch(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    producer = Producer(partition, 3)
    producer.send(b"plain", transactional=False)
    result = partition.write_marker(3, 1, False, 0)
    assert result.error == ErrorCode.NONE
    assert partition.aborted_transactions(0, partition.log.log_end_offset) == []
    assert partition.last_stable_offset == partition.high_watermark
    stale = partition.append(batch(b"late", producer_id=3, epoch=0, sequence=1))
    assert stale.error == ErrorCode.INVALID_PRODUCER_EPOCH
    fresh = partition.append(batch(b"new", producer_id=3, epoch=1, sequence=0))
    assert fresh.error == ErrorCode.NONE
    partition.close()


def test_markers_of_fenced_producers_and_coordinators_are_refused(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    producer = Producer(partition, 5, epoch=2)
    producer.send(b"x")
    producer.end(commit=True, coordinator_epoch=7)
    end = partition.log.log_end_offset
    assert partition.write_marker(5, 1, True, 7).error == ErrorCode.INVALID_PRODUCER_EPOCH
    assert partition.write_marker(5, 2, True, 6).error == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert partition.log.log_end_offset == end
    partition.close()


def test_a_client_may_not_produce_a_control_batch(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    control = encode_batch(
        [Record(0, TIMESTAMP_MS, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
        producer_id=1,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    assert partition.append(control).error == ErrorCode.INVALID_RECORD
    assert partition.log.log_end_offset == 0
    partition.close()


def test_a_plain_batch_of_a_producer_in_a_transaction_is_refused(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    producer = Producer(partition, 9)
    producer.send(b"in")
    refused = partition.append(batch(b"out", producer_id=9, sequence=1))
    assert refused.error == ErrorCode.INVALID_TXN_STATE
    partition.close()


def test_a_marker_rolls_the_log_like_any_append(tmp_path: Path) -> None:
    partition = open_partition(tmp_path, LogConfig(segment_bytes=200))
    producer = Producer(partition, 1)
    starts = []
    for _ in range(6):
        starts.append(producer.send(b"x" * 40))
        producer.end(commit=False)
    assert len(partition.log.segments) > 2
    assert [first for _, first in partition.aborted_transactions(0, 1 << 30)] == starts
    # each segment indexes the aborts whose marker it holds
    assert sum(1 for path in tmp_path.glob(f"*{TXN_INDEX_SUFFIX}")) > 1
    partition.close()


# ---------------------------------------------------------------- recovery


def test_a_clean_restart_keeps_open_transactions_and_aborts(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    aborted = Producer(partition, 1)
    first = aborted.send(b"a")
    aborted.end(commit=False)
    pending = Producer(partition, 2)
    pending_start = pending.send(b"b")
    partition.close()
    reopened = open_partition(tmp_path)
    assert reopened.last_stable_offset == pending_start
    assert reopened.aborted_transactions(0, 100) == [(1, first)]
    # the reopened state goes on: the pending transaction aborts with the right start
    assert reopened.write_marker(2, 0, False, 0).error == ErrorCode.NONE
    assert reopened.aborted_transactions(0, 100) == [(1, first), (2, pending_start)]
    reopened.close()


def test_a_kill_mid_transaction_restarts_with_the_transaction_open(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    plain(partition, b"before")
    producer = Producer(partition, 4)
    start = producer.send(b"t1")
    plain(partition, b"other")
    producer.send(b"t2")
    crash_partition(partition)
    (tmp_path / SNAPSHOT_FILE).unlink(missing_ok=True)  # nothing written since the open
    reopened = open_partition(tmp_path)
    assert reopened.high_watermark == 4
    assert reopened.last_stable_offset == start == 1
    assert values_read(reopened, committed=True) == [b"before"]
    assert reopened.write_marker(4, 0, False, 0).error == ErrorCode.NONE
    assert reopened.aborted_transactions(0, 100) == [(4, start)]
    assert reopened.last_stable_offset == reopened.high_watermark == 5
    reopened.close()


def test_an_abort_entry_lost_with_a_kill_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    open_partition(tmp_path).close()  # a snapshot at offset 0
    partition = open_partition(tmp_path)
    producer = Producer(partition, 4)
    start = producer.send(b"t1")
    producer.end(commit=False)
    index = partition.log.active_segment.txn_index.path
    crash_partition(partition)
    index.unlink()  # its page never reached the disk
    reopened = open_partition(tmp_path)
    assert reopened.aborted_transactions(0, 100) == [(4, start)]
    assert index.exists()
    reopened.close()


def test_an_entry_of_a_marker_the_log_lost_is_dropped(tmp_path: Path) -> None:
    """The index reached the disk, the log's tail did not."""
    partition = open_partition(tmp_path)
    partition.close()
    partition = open_partition(tmp_path)
    producer = Producer(partition, 4)
    start = producer.send(b"t1")
    marker = producer.end(commit=False)
    crash_partition(partition)
    log_file = tmp_path / "00000000000000000000.log"
    with open(log_file, "r+b") as handle:
        handle.truncate(handle.seek(0, 2) - 10)  # the marker is torn
    reopened = open_partition(tmp_path)
    assert reopened.log.log_end_offset == marker
    assert reopened.aborted_transactions(0, 100) == []
    assert reopened.last_stable_offset == start  # open again, as the log says
    reopened.close()


def test_a_full_rescan_keeps_an_abort_whose_start_retention_removed(tmp_path: Path) -> None:
    partition = open_partition(tmp_path, LogConfig(segment_bytes=200, file_delete_delay_ms=0))
    producer = Producer(partition, 6)
    start = producer.send(b"x" * 60)
    for _ in range(3):
        plain(partition, b"y" * 60)
    producer.send(b"z" * 60)
    producer.end(commit=False)
    partition.log.advance_log_start_offset(start + 2)
    Cleaner().apply_retention(partition.log)
    assert partition.log.log_start_offset > start
    crash_partition(partition)
    (tmp_path / SNAPSHOT_FILE).unlink(missing_ok=True)
    reopened = open_partition(tmp_path, LogConfig(segment_bytes=200, file_delete_delay_ms=0))
    # the rescan starts after the transaction began: the index's entry stands
    assert reopened.aborted_transactions(reopened.log_start_offset, 100) == [(6, start)]
    reopened.close()


def test_truncation_forgets_transactions_and_aborts_past_the_point(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    first = Producer(partition, 1)
    first_start = first.send(b"a")
    first.end(commit=False)  # 1
    second = Producer(partition, 2)
    cut = second.send(b"b")  # 2
    second.end(commit=False)  # 3
    third = Producer(partition, 3)
    third.send(b"c")  # 4
    partition.truncate_to(cut)
    assert partition.log.log_end_offset == cut
    assert partition.aborted_transactions(0, 100) == [(1, first_start)]
    assert partition.producers.first_unstable_offset() is None
    assert partition.last_stable_offset == partition.high_watermark == cut
    partition.close()
    reopened = open_partition(tmp_path)
    assert reopened.aborted_transactions(0, 100) == [(1, first_start)]
    assert reopened.last_stable_offset == cut
    reopened.close()


def test_truncation_inside_a_transaction_keeps_its_start(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    producer = Producer(partition, 1)
    start = producer.send(b"a")
    cut = producer.send(b"b")
    producer.end(commit=False)
    partition.truncate_to(cut)
    assert partition.last_stable_offset == start
    assert partition.aborted_transactions(0, 100) == []
    partition.close()


# ---------------------------------------------------------------- followers

SETTINGS = ReplicaSettings(replica_lag_time_max_ms=10_000, min_insync_replicas=2)
REPLICAS = (1, 2)


def replica(directory: Path, node_id: int) -> Partition:
    partition = open_partition(directory, LogConfig(segment_bytes=250))
    partition.join_cluster(node_id)
    return partition


def replicate(leader: Partition, follower: Partition) -> None:
    while follower.log.log_end_offset < leader.log.log_end_offset:
        data = leader.read_for_replica(follower.log.log_end_offset, 300)
        assert data is not None
        follower.append_replicated(data.read_bytes(), leader.high_watermark)
        leader.on_replica_fetch(follower.node_id, follower.log.log_end_offset, 0)
    follower.append_replicated(b"", leader.high_watermark)


def test_a_follower_keeps_the_leaders_transactions_and_aborted_index(tmp_path: Path) -> None:
    leader = replica(tmp_path / "1", 1)
    follower = replica(tmp_path / "2", 2)
    leader.become_leader(1, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    follower.become_follower(1, 1, 0, REPLICAS)
    producers = [Producer(leader, number) for number in (1, 2, 3)]
    for round_number in range(4):
        for producer in producers:
            producer.send(b"v%d" % round_number * 10)
        producers[round_number % 3].end(commit=round_number % 2 == 0)
        replicate(leader, follower)
    replicate(leader, follower)
    assert leader.high_watermark == follower.high_watermark == leader.log.log_end_offset
    assert follower.last_stable_offset == leader.last_stable_offset < leader.high_watermark
    end = leader.log.log_end_offset
    assert follower.aborted_transactions(0, end) == leader.aborted_transactions(0, end)
    assert leader.aborted_transactions(0, end)
    for mine, theirs in zip(leader.log.segments, follower.log.segments, strict=True):
        assert mine.txn_index.size_bytes == theirs.txn_index.size_bytes
        assert list(mine.txn_index.entries()) == list(theirs.txn_index.entries())
    # the follower takes over: its producers' state is the leader's
    follower.become_leader(2, 1, REPLICAS, REPLICAS, SETTINGS, 0)
    assert follower.high_watermark == end
    assert follower.last_stable_offset == leader.last_stable_offset
    for producer_id, entry in leader.producers.producers.items():
        theirs = follower.producers.producers[producer_id]
        assert (theirs.epoch, theirs.transaction_first_offset) == (
            entry.epoch,
            entry.transaction_first_offset,
        )
    still_open = dict(follower.producers.ongoing)
    assert still_open
    for producer_id in still_open:
        assert follower.write_marker(producer_id, 0, False, 0).error == ErrorCode.NONE
    new_end = follower.log.log_end_offset
    aborted_now = follower.aborted_transactions(end, new_end)
    assert sorted(aborted_now) == sorted(still_open.items())
    assert len(list(follower.log.segments)) > 1
    leader.close()
    follower.close()


def test_a_lso_waits_for_the_marker_to_reach_the_isr(tmp_path: Path) -> None:
    leader = replica(tmp_path / "1", 1)
    follower = replica(tmp_path / "2", 2)
    leader.become_leader(1, 0, REPLICAS, REPLICAS, SETTINGS, 0)
    follower.become_follower(1, 1, 0, REPLICAS)
    producer = Producer(leader, 1)
    start = producer.send(b"a")
    replicate(leader, follower)
    marker = producer.end(commit=True)
    # the marker is in the leader's log only: were it to fail, the follower would still
    # hold the transaction open
    assert leader.high_watermark == marker
    assert leader.last_stable_offset == start
    replicate(leader, follower)
    assert leader.high_watermark == marker + 1
    assert leader.last_stable_offset == marker + 1
    assert not leader.producers.unreplicated
    leader.close()
    follower.close()


def test_a_marker_is_refused_while_the_isr_is_too_small(tmp_path: Path) -> None:
    leader = replica(tmp_path / "1", 1)
    leader.become_leader(1, 0, REPLICAS, (1,), SETTINGS, 0)
    result = leader.write_marker(1, 0, True, 0)
    assert result.error == ErrorCode.NOT_ENOUGH_REPLICAS
    follower = replica(tmp_path / "2", 2)
    assert follower.write_marker(1, 0, True, 0).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    leader.close()
    follower.close()


def test_a_marker_is_answered_once_the_isr_holds_it(tmp_path: Path) -> None:
    async def check() -> None:
        leader = replica(tmp_path / "1", 1)
        follower = replica(tmp_path / "2", 2)
        leader.become_leader(1, 0, REPLICAS, REPLICAS, SETTINGS, 0)
        follower.become_follower(1, 1, 0, REPLICAS)
        Producer(leader, 1).send(b"a")
        result = leader.write_marker(1, 0, False, 0)
        epoch = leader.replication_epoch(result.last_offset)
        assert epoch is not None
        answers: list[ErrorCode] = []

        async def wait() -> None:
            deadline = trio.current_time() + 5
            answers.append(await leader.wait_replicated(result.last_offset, epoch, deadline))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            assert not answers
            replicate(leader, follower)
        assert answers == [ErrorCode.NONE]
        leader.close()
        follower.close()

    trio.run(check, clock=trio.testing.MockClock(autojump_threshold=0))


def test_an_entry_names_the_transaction_its_marker_and_the_stable_offset(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    plain(partition, b"first")
    other = Producer(partition, 2)
    other_start = other.send(b"other")  # 1, still open
    producer = Producer(partition, 1)
    start = producer.send(b"a")  # 2
    marker = producer.end(commit=False)  # 3
    assert list(partition.log.active_segment.txn_index.entries()) == [
        AbortedTransaction(1, start, marker, other_start)
    ]
    partition.close()
