"""ProducerStates on its own: Kafka's sequence rules, the snapshot, and the header rescan."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from eventplatform.log.replica import producer_state
from eventplatform.log.replica.producer_state import (
    BATCHES_RETAINED,
    REFUSALS_RETAINED,
    SEQUENCE_MAX,
    SNAPSHOT_FILE,
    ProducerStates,
    Verdict,
)
from eventplatform.log.storage import BatchHeader, LogConfig, PartitionLog, Record
from eventplatform.log.storage.record_batch import encode_batch, parse_header

TIMESTAMP_MS = 1_700_000_000_000


def encoded(
    count: int, *, producer_id: int, epoch: int, sequence: int, timestamp_ms: int = TIMESTAMP_MS
) -> bytes:
    records = [Record(index, timestamp_ms + index, b"k", b"v%d" % index) for index in range(count)]
    return encode_batch(
        records,
        base_offset=0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


def header(
    count: int = 1,
    *,
    producer_id: int = 7,
    epoch: int = 0,
    sequence: int = 0,
    base_offset: int = 0,
    timestamp_ms: int = TIMESTAMP_MS,
) -> BatchHeader:
    data = encoded(
        count, producer_id=producer_id, epoch=epoch, sequence=sequence, timestamp_ms=timestamp_ms
    )
    return parse_header(data)._replace(base_offset=base_offset)


def appended(states: ProducerStates, *headers: BatchHeader) -> ProducerStates:
    for item in headers:
        assert states.check(item).verdict is Verdict.APPEND
        states.update(item)
    return states


# ---------------------------------------------------------------- rules


def test_a_producer_the_partition_has_never_seen_may_start_anywhere() -> None:
    states = ProducerStates()
    assert states.check(header(sequence=0)).verdict is Verdict.APPEND
    assert states.check(header(sequence=1234)).verdict is Verdict.APPEND
    assert states.check(header(producer_id=-1, epoch=-1, sequence=-1)).verdict is Verdict.APPEND


def test_non_idempotent_batches_leave_no_state() -> None:
    states = ProducerStates()
    states.update(header(producer_id=-1, epoch=-1, sequence=-1))
    assert states.producers == {}


def test_a_retry_of_a_retained_batch_is_a_duplicate_naming_its_offsets() -> None:
    states = appended(
        ProducerStates(),
        header(2, sequence=0, base_offset=10),
        header(3, sequence=2, base_offset=12),
    )
    check = states.check(header(2, sequence=0))
    assert check.verdict is Verdict.DUPLICATE
    assert check.duplicate_of is not None
    assert (check.duplicate_of.first_offset, check.duplicate_of.last_offset) == (10, 11)
    assert states.check(header(3, sequence=2)).verdict is Verdict.DUPLICATE
    # Same first sequence, different length: not the same batch, and out of order.
    assert states.check(header(1, sequence=0)).verdict is Verdict.OUT_OF_ORDER


def test_only_the_last_batches_are_retained() -> None:
    states = appended(
        ProducerStates(),
        *(header(sequence=index, base_offset=index) for index in range(BATCHES_RETAINED + 2)),
    )
    assert len(states.producers[7].batches) == BATCHES_RETAINED
    assert states.check(header(sequence=2)).verdict is Verdict.DUPLICATE
    assert states.check(header(sequence=1)).verdict is Verdict.OUT_OF_ORDER


@pytest.mark.parametrize("sequence", [2, 5, -1])
def test_within_an_epoch_a_batch_must_follow_the_last_sequence(sequence: int) -> None:
    states = appended(ProducerStates(), header(sequence=0))
    check = states.check(header(sequence=sequence))
    assert check.verdict is Verdict.OUT_OF_ORDER
    assert "expected sequence 1" in check.message
    assert states.check(header(sequence=1)).verdict is Verdict.APPEND


def test_an_older_epoch_is_fenced() -> None:
    states = appended(ProducerStates(), header(epoch=3, sequence=0))
    check = states.check(header(epoch=2, sequence=1))
    assert check.verdict is Verdict.FENCED
    assert "older" in check.message


def test_a_new_epoch_starts_at_sequence_zero_and_forgets_the_old_batches() -> None:
    states = appended(ProducerStates(), header(epoch=0, sequence=0), header(epoch=0, sequence=1))
    assert states.check(header(epoch=1, sequence=2)).verdict is Verdict.OUT_OF_ORDER
    appended(states, header(epoch=1, sequence=0, base_offset=2))
    entry = states.producers[7]
    assert entry.epoch == 1
    assert [batch.first_sequence for batch in entry.batches] == [0]
    assert states.check(header(epoch=0, sequence=2)).verdict is Verdict.FENCED


def test_sequences_wrap_to_zero_after_int32_max() -> None:
    states = appended(ProducerStates(), header(2, sequence=SEQUENCE_MAX - 1))
    assert states.producers[7].last_sequence == SEQUENCE_MAX
    assert states.check(header(sequence=0)).verdict is Verdict.APPEND
    # A batch that crosses the wrap: its last sequence is counted modulo 2**31.
    states = appended(ProducerStates(), header(3, sequence=SEQUENCE_MAX - 1))
    assert states.producers[7].last_sequence == 0
    assert states.check(header(sequence=0)).verdict is Verdict.OUT_OF_ORDER
    assert states.check(header(sequence=1)).verdict is Verdict.APPEND
    assert states.check(header(3, sequence=SEQUENCE_MAX - 1)).verdict is Verdict.DUPLICATE


def test_expiry_forgets_producers_silent_for_longer_than_the_expiration() -> None:
    states = appended(
        ProducerStates(),
        header(producer_id=1, timestamp_ms=1_000),
        header(producer_id=2, timestamp_ms=5_000),
    )
    states.expire(now_ms=7_000, expiration_ms=3_000)
    assert set(states.producers) == {2}
    assert states.check(header(producer_id=1, sequence=9)).verdict is Verdict.APPEND


# ---------------------------------------------------------------- batches behind a refusal

NOT_ENOUGH_REPLICAS = 19


def test_a_batch_behind_a_refused_one_gets_the_refusal_instead_of_out_of_order() -> None:
    """A pipelined batch read after its predecessor was refused (and after the refusal's
    cause went away) is answered like its predecessor, so the client retries both in order;
    OUT_OF_ORDER would make librdkafka renumber every unacknowledged message."""
    states = appended(ProducerStates(), header(2, sequence=0))
    refused = header(3, sequence=2)
    assert states.check(refused).verdict is Verdict.APPEND
    states.note_refused(refused, NOT_ENOUGH_REPLICAS)

    behind = states.check(header(4, sequence=5))
    assert behind.verdict is Verdict.BEHIND_REFUSED
    assert behind.refusal is not None and behind.refusal.error == NOT_ENOUGH_REPLICAS
    assert "sequence 2" in behind.message
    # a later refusal of the batch behind keeps the earliest one: that is the one resent first
    states.note_refused(header(4, sequence=5), NOT_ENOUGH_REPLICAS)
    assert states.refusals[7].first_sequence == 2

    appended(states, header(3, sequence=2, base_offset=2))
    assert states.refusals == {}
    appended(states, header(4, sequence=5, base_offset=5))
    # with nothing refused, a gap is out of order again
    assert states.check(header(sequence=20)).verdict is Verdict.OUT_OF_ORDER


def test_a_gap_that_no_refusal_explains_is_still_out_of_order() -> None:
    states = appended(ProducerStates(), header(2, sequence=0))
    states.note_refused(header(sequence=4), NOT_ENOUGH_REPLICAS)  # not the next batch
    assert states.check(header(sequence=6)).verdict is Verdict.OUT_OF_ORDER
    states.note_refused(header(epoch=1, sequence=2), NOT_ENOUGH_REPLICAS)  # another epoch
    assert states.check(header(sequence=6)).verdict is Verdict.OUT_OF_ORDER


def test_a_new_epoch_behind_its_refused_first_batch() -> None:
    states = appended(ProducerStates(), header(epoch=0, sequence=0))
    states.note_refused(header(epoch=1, sequence=0), NOT_ENOUGH_REPLICAS)
    assert states.check(header(epoch=1, sequence=1)).verdict is Verdict.BEHIND_REFUSED
    appended(states, header(epoch=1, sequence=0, base_offset=1))
    assert states.refusals == {}


def test_a_replicated_batch_before_the_refused_one_keeps_the_refusal() -> None:
    """A follower refuses a batch (not the leader yet), then replicates the batches before
    it from the old leader: the refusal still explains the next gap once it leads."""
    states = appended(ProducerStates(), header(sequence=0))
    states.note_refused(header(sequence=3), 6)
    states.update(header(2, sequence=1, base_offset=1))  # replicated, up to sequence 2
    check = states.check(header(sequence=4))
    assert check.verdict is Verdict.BEHIND_REFUSED
    assert check.refusal is not None and check.refusal.error == 6


def test_refusals_are_remembered_for_a_bounded_number_of_producers() -> None:
    states = ProducerStates()
    for producer_id in range(REFUSALS_RETAINED + 10):
        states.note_refused(header(producer_id=producer_id, sequence=1), NOT_ENOUGH_REPLICAS)
    assert len(states.refusals) == REFUSALS_RETAINED
    assert 0 not in states.refusals and REFUSALS_RETAINED + 9 in states.refusals


# ---------------------------------------------------------------- persistence


def open_log(directory: Path, **config: int) -> PartitionLog:
    return PartitionLog.open(directory, LogConfig(**config))


def produce(log: PartitionLog, count: int, *, producer_id: int, epoch: int, sequence: int) -> int:
    """Append one idempotent batch; returns its base offset."""
    data = encoded(count, producer_id=producer_id, epoch=epoch, sequence=sequence)
    return log.append(data).base_offset


def write_foreign_snapshot(directory: Path, offset: int) -> None:
    """A snapshot naming producer 99, which no batch in the log carries.

    After a load, producer 99 is known exactly when the snapshot was used.
    """
    states = ProducerStates()
    states.update(header(producer_id=99, epoch=4, sequence=0, base_offset=0))
    states.write_snapshot(directory, offset)


def test_load_rebuilds_every_producer_from_the_batch_headers(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 2, producer_id=1, epoch=0, sequence=0)
    produce(log, 1, producer_id=2, epoch=5, sequence=0)
    produce(log, 3, producer_id=1, epoch=0, sequence=2)
    states = ProducerStates.load(tmp_path, log)
    assert states.snapshot_offset == log.log_end_offset == 6
    assert states.producers[1].epoch == 0
    assert states.producers[1].last_sequence == 4
    assert states.producers[2].epoch == 5
    duplicate = states.check(header(3, producer_id=1, sequence=2))
    assert duplicate.verdict is Verdict.DUPLICATE
    assert duplicate.duplicate_of is not None
    assert duplicate.duplicate_of.first_offset == 3
    log.close()


def test_load_scans_every_segment_in_small_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(producer_state, "SCAN_CHUNK_BYTES", 10)
    log = open_log(tmp_path, segment_bytes=200)
    for sequence in range(8):
        produce(log, 1, producer_id=1, epoch=0, sequence=sequence)
    assert len(list(log.segments)) > 3
    states = ProducerStates.load(tmp_path, log)
    assert states.producers[1].last_sequence == 7
    assert [batch.first_offset for batch in states.producers[1].batches] == [3, 4, 5, 6, 7]
    log.close()


def test_load_takes_the_snapshot_then_the_batches_after_it(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    produce(log, 2, producer_id=1, epoch=0, sequence=0)
    write_foreign_snapshot(tmp_path, log.log_end_offset)
    produce(log, 1, producer_id=2, epoch=0, sequence=0)
    states = ProducerStates.load(tmp_path, log)
    # Producer 1 is before the snapshot offset: only a rescan from 0 would find it.
    assert set(states.producers) == {99, 2}
    assert states.producers[99].epoch == 4
    log.close()


def test_a_snapshot_past_the_log_end_is_ignored(tmp_path: Path) -> None:
    """As after a crash that lost the unflushed tail the snapshot had seen."""
    log = open_log(tmp_path)
    produce(log, 2, producer_id=1, epoch=0, sequence=0)
    write_foreign_snapshot(tmp_path, log.log_end_offset + 5)
    states = ProducerStates.load(tmp_path, log)
    assert set(states.producers) == {1}
    log.close()


def test_a_snapshot_below_the_log_start_is_ignored(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200)
    for sequence in range(4):
        produce(log, 1, producer_id=1, epoch=0, sequence=sequence)
    write_foreign_snapshot(tmp_path, 1)
    log.advance_log_start_offset(3)
    states = ProducerStates.load(tmp_path, log)
    assert 99 not in states.producers
    assert states.producers[1].last_sequence == 3
    log.close()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        orjson.dumps({"version": 99, "offset": 0, "producers": []}),
        orjson.dumps({"version": 1, "offset": 0}),
        orjson.dumps({"version": 1, "offset": 0, "producers": [[1, 2]]}),
    ],
    ids=["empty", "garbage", "version", "no-producers", "short-entry"],
)
def test_an_unreadable_snapshot_means_a_full_rescan(tmp_path: Path, content: bytes) -> None:
    log = open_log(tmp_path)
    produce(log, 2, producer_id=1, epoch=0, sequence=0)
    (tmp_path / SNAPSHOT_FILE).write_bytes(content)
    states = ProducerStates.load(tmp_path, log)
    assert set(states.producers) == {1}
    assert states.producers[1].last_sequence == 1
    log.close()


def test_a_snapshot_round_trip_keeps_every_field_and_the_retention_bound(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    states = ProducerStates()
    for sequence in range(BATCHES_RETAINED + 1):
        batch = header(2, producer_id=5, epoch=3, sequence=2 * sequence, base_offset=sequence)
        states.update(batch)
    states.write_snapshot(tmp_path, 0)
    loaded = ProducerStates.load(tmp_path, log)
    assert loaded.producers[5].epoch == 3
    assert loaded.producers[5].last_timestamp_ms == states.producers[5].last_timestamp_ms
    assert list(loaded.producers[5].batches) == list(states.producers[5].batches)
    loaded.update(header(2, producer_id=5, epoch=3, sequence=12, base_offset=9))
    assert len(loaded.producers[5].batches) == BATCHES_RETAINED
    log.close()
