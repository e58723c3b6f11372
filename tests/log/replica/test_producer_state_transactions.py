"""ProducerStates and transactions (KIP-98): a transactional batch opens its producer's
transaction, a marker closes it, an abort yields its aborted-index entry, and the first
unstable offset holds read_committed readers; markers move epochs, the snapshot keeps open
transactions, and a rescan rebuilds them."""

from __future__ import annotations

from pathlib import Path

import orjson

from eventplatform.log.replica.producer_state import (
    NO_OFFSET,
    SNAPSHOT_FILE,
    ProducerStates,
    Verdict,
)
from eventplatform.log.storage import BatchHeader, LogConfig, PartitionLog, Record
from eventplatform.log.storage.control_records import TransactionMarker, encode_marker
from eventplatform.log.storage.record_batch import encode_batch, parse_header, split_batches
from eventplatform.log.storage.txn_index import AbortedTransaction

TIMESTAMP_MS = 1_700_000_000_000
COMMIT = TransactionMarker(commit=True, coordinator_epoch=0)
ABORT = TransactionMarker(commit=False, coordinator_epoch=0)


def data(
    base_offset: int,
    count: int = 1,
    *,
    producer_id: int = 7,
    epoch: int = 0,
    sequence: int = 0,
    transactional: bool = True,
) -> BatchHeader:
    records = [Record(i, TIMESTAMP_MS, b"k", b"v") for i in range(count)]
    encoded = encode_batch(
        records,
        base_offset=0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )
    return parse_header(encoded)._replace(base_offset=base_offset)


def marker(
    offset: int, *, producer_id: int = 7, epoch: int = 0, commit: bool, coordinator_epoch: int = 0
) -> tuple[BatchHeader, TransactionMarker]:
    encoded = encode_marker(
        producer_id=producer_id,
        producer_epoch=epoch,
        commit=commit,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=TIMESTAMP_MS,
    )
    return parse_header(encoded)._replace(base_offset=offset), TransactionMarker(
        commit, coordinator_epoch
    )


def appended(states: ProducerStates, *headers: BatchHeader) -> ProducerStates:
    for header in headers:
        assert states.check(header).verdict is Verdict.APPEND, header
        states.update(header)
    return states


# ---------------------------------------------------------------- opening and closing


def test_a_transactional_batch_opens_a_transaction_at_its_base_offset() -> None:
    states = appended(ProducerStates(), data(10, 3), data(13, 2, sequence=3))
    assert states.producers[7].transaction_first_offset == 10
    assert states.first_unstable_offset() == 10


def test_plain_idempotent_batches_open_nothing() -> None:
    states = appended(ProducerStates(), data(0, transactional=False))
    assert states.producers[7].transaction_first_offset == NO_OFFSET
    assert states.first_unstable_offset() is None


def test_a_commit_closes_the_transaction_and_adds_no_aborted_entry() -> None:
    states = appended(ProducerStates(), data(5, 2))
    assert states.complete(*marker(7, commit=True)) is None
    assert states.producers[7].transaction_first_offset == NO_OFFSET
    assert not states.ongoing


def test_an_abort_yields_the_entry_with_the_stable_offset_after_the_marker() -> None:
    states = appended(ProducerStates(), data(5, 2))
    entry = states.complete(*marker(7, commit=False))
    assert entry == AbortedTransaction(7, 5, 7, 8)


def test_an_abort_with_another_transaction_open_records_that_transaction_start() -> None:
    states = appended(
        ProducerStates(),
        data(3, producer_id=1),
        data(4, producer_id=2),
        data(5, producer_id=3),
    )
    entry = states.complete(*marker(6, producer_id=2, commit=False))
    # the earliest other open transaction holds the stable offset back
    assert entry == AbortedTransaction(2, 4, 6, 3)
    assert list(states.ongoing.items()) == [(1, 3), (3, 5)]


def test_the_first_unstable_offset_is_the_earliest_open_transaction() -> None:
    states = appended(ProducerStates(), data(3, producer_id=1), data(4, producer_id=2))
    assert states.first_unstable_offset() == 3
    states.complete(*marker(5, producer_id=1, commit=True))
    states.forget_replicated(6)
    assert states.first_unstable_offset() == 4
    states.complete(*marker(6, producer_id=2, commit=False))
    states.forget_replicated(7)
    assert states.first_unstable_offset() is None


def test_a_closed_transaction_is_unstable_until_the_high_watermark_passes_its_marker() -> None:
    """A leader that fails before its followers hold the marker leaves the transaction open
    on the next one: readers may not count on it yet (Kafka's unreplicated transactions)."""
    states = appended(ProducerStates(), data(10, 2))
    states.complete(*marker(12, commit=True))
    assert states.first_unstable_offset(high_watermark=12) == 10
    assert states.first_unstable_offset(high_watermark=13) is None
    assert not states.unreplicated


def test_a_marker_for_a_producer_with_nothing_open_changes_its_epoch_only() -> None:
    states = appended(ProducerStates(), data(0, transactional=False))
    assert states.complete(*marker(1, epoch=3, commit=False)) is None
    assert states.producers[7].epoch == 3
    assert states.first_unstable_offset() is None
    assert not states.unreplicated


def test_a_marker_for_an_unknown_producer_makes_its_entry() -> None:
    states = ProducerStates()
    made = marker(4, producer_id=9, epoch=2, commit=True, coordinator_epoch=5)
    assert states.complete(*made) is None
    assert states.producers[9].epoch == 2
    assert states.producers[9].coordinator_epoch == 5


def test_the_next_transaction_after_a_marker_opens_at_its_own_first_batch() -> None:
    states = appended(ProducerStates(), data(0, 2))
    states.complete(*marker(2, commit=False))
    appended(states, data(3, sequence=2))
    assert states.producers[7].transaction_first_offset == 3
    entry = states.complete(*marker(4, commit=False))
    assert entry is not None and entry.first_offset == 3


# ---------------------------------------------------------------- epochs and sequences


def test_a_bumped_marker_epoch_fences_the_old_epoch_and_restarts_sequences() -> None:
    states = appended(ProducerStates(), data(0, 2, epoch=0, sequence=0))
    states.complete(*marker(2, epoch=1, commit=False))
    assert states.producers[7].epoch == 1
    assert not states.producers[7].batches
    fenced = states.check(data(3, epoch=0, sequence=2))
    assert fenced.verdict is Verdict.FENCED
    # the epoch the marker brought has no sequence yet: it starts at 0
    assert states.check(data(3, epoch=1, sequence=2)).verdict is Verdict.OUT_OF_ORDER
    assert states.check(data(3, epoch=1, sequence=0)).verdict is Verdict.APPEND


def test_a_marker_of_the_same_epoch_keeps_the_sequences_going() -> None:
    states = appended(ProducerStates(), data(0, 2, sequence=0))
    states.complete(*marker(2, commit=True))
    assert states.check(data(3, sequence=2)).verdict is Verdict.APPEND
    assert states.check(data(3, sequence=0)).verdict is Verdict.OUT_OF_ORDER
    duplicate = states.check(data(3, 2, sequence=0))
    assert duplicate.verdict is Verdict.DUPLICATE


def test_a_plain_batch_while_a_transaction_is_open_is_an_invalid_state() -> None:
    states = appended(ProducerStates(), data(0, sequence=0))
    check = states.check(data(1, sequence=1, transactional=False))
    assert check.verdict is Verdict.INVALID_TXN_STATE
    assert "transaction open since offset 0" in check.message


def test_a_leader_refuses_markers_of_older_epochs() -> None:
    states = appended(ProducerStates(), data(0, epoch=4))
    states.complete(*marker(1, epoch=4, commit=True, coordinator_epoch=6))
    assert states.check_marker(7, 3, 6).verdict is Verdict.FENCED
    assert states.check_marker(7, 4, 5).verdict is Verdict.COORDINATOR_FENCED
    assert states.check_marker(7, 4, 6).verdict is Verdict.APPEND
    assert states.check_marker(7, 9, 7).verdict is Verdict.APPEND
    assert states.check_marker(8, 0, 0).verdict is Verdict.APPEND


def test_coordinator_batches_without_sequences_are_checked_for_their_epoch_only() -> None:
    """The group coordinator writes a producer's transactional offsets with no sequence."""
    states = ProducerStates()
    for offset in range(3):
        batch = data(offset, producer_id=5, epoch=2, sequence=-1)
        assert states.check(batch, sequenced=False).verdict is Verdict.APPEND
        states.update(batch)
    assert not states.producers[5].batches
    assert states.producers[5].transaction_first_offset == 0
    old = data(3, producer_id=5, epoch=1, sequence=-1)
    assert states.check(old, sequenced=False).verdict is Verdict.FENCED


def test_producers_with_an_open_transaction_never_expire() -> None:
    states = appended(
        ProducerStates(),
        data(0, producer_id=1),
        data(1, producer_id=2, transactional=False),
    )
    states.expire(now_ms=TIMESTAMP_MS + 10_000, expiration_ms=1_000)
    assert set(states.producers) == {1}


# ---------------------------------------------------------------- persistence


def open_log(directory: Path) -> PartitionLog:
    return PartitionLog.open(directory, LogConfig(segment_bytes=1024))


def test_the_snapshot_keeps_open_transactions_and_coordinator_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    states = appended(
        ProducerStates(),
        data(4, producer_id=2),
        data(2, producer_id=1, transactional=False),
    )
    states.update(data(3, producer_id=3, sequence=0))
    states.complete(*marker(5, producer_id=1, epoch=1, commit=True, coordinator_epoch=9))
    states.write_snapshot(tmp_path, 0)
    document = orjson.loads((tmp_path / SNAPSHOT_FILE).read_bytes())
    assert document["version"] == 2
    loaded = ProducerStates.load(tmp_path, log)
    assert loaded.producers[2].transaction_first_offset == 4
    assert loaded.producers[1].coordinator_epoch == 9
    assert loaded.producers[1].epoch == 1
    # in first-offset order, whatever order the producers were written in
    assert list(loaded.ongoing.items()) == [(3, 3), (2, 4)]
    assert loaded.first_unstable_offset() == 3
    log.close()


def test_a_version_1_snapshot_is_read_with_nothing_open(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    document = {"version": 1, "offset": 0, "producers": [[5, 3, TIMESTAMP_MS, [[0, 1, 0, 1, 0]]]]}
    (tmp_path / SNAPSHOT_FILE).write_bytes(orjson.dumps(document))
    loaded = ProducerStates.load(tmp_path, log)
    assert loaded.producers[5].epoch == 3
    assert loaded.producers[5].last_sequence == 1
    assert loaded.producers[5].transaction_first_offset == NO_OFFSET
    assert not loaded.ongoing
    assert loaded.check(data(0, producer_id=5, epoch=3, sequence=2)).verdict is Verdict.APPEND
    log.close()


def append_marker(log: PartitionLog, *, producer_id: int, epoch: int, commit: bool) -> int:
    """A marker appended as a partition's leader does (a client's would be refused)."""
    batch = bytearray(
        encode_marker(
            producer_id=producer_id,
            producer_epoch=epoch,
            commit=commit,
            coordinator_epoch=0,
            timestamp_ms=TIMESTAMP_MS,
        )
    )
    return log.append(batch, validated=split_batches(batch, check_crc=False)).base_offset


def test_a_rescan_reopens_a_transaction_whose_marker_never_came(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(encode_batch([Record(0, TIMESTAMP_MS, b"k", b"plain")]))
    transactional = [Record(0, TIMESTAMP_MS, b"k", b"open")]
    first = log.append(
        encode_batch(
            transactional, producer_id=4, producer_epoch=0, base_sequence=0, is_transactional=True
        )
    ).base_offset
    loaded = ProducerStates.load(tmp_path, log)
    assert loaded.producers[4].transaction_first_offset == first == 1
    assert loaded.first_unstable_offset() == 1
    append_marker(log, producer_id=4, epoch=0, commit=False)
    reloaded = ProducerStates.load(tmp_path, log)
    assert reloaded.first_unstable_offset() == 1  # the rescan's markers wait for a watermark
    assert reloaded.first_unstable_offset(high_watermark=log.log_end_offset) is None
    # the rescan wrote the abort into the marker's segment's transaction index
    assert log.collect_aborted_transactions(0, log.log_end_offset) == [
        AbortedTransaction(4, 1, 2, 3)
    ]
    log.close()
