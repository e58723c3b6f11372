"""The transaction coordinator's state machine: producer ids and epochs, the moves of
a transaction and what each writes, markers, fencing, timeouts, and the records."""

from __future__ import annotations

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.transactions.core import (
    EPOCH_MAX,
    Markers,
    TransactionCoordinatorCore,
)
from eventplatform.log.transactions.records import (
    TransactionRecord,
    TransactionStatus,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

TID = "orders-tx"
Status = TransactionStatus


def keep(core: TransactionCoordinatorCore, step, tid: str = TID) -> Markers | None:
    """The shell's part: the write succeeded."""
    assert step.write is not None
    return core.finish(tid, written=True)


def started(core: TransactionCoordinatorCore) -> tuple[int, int]:
    step = core.init_producer_id(TID, 60_000, 0, fresh_producer_id=7)
    keep(core, step)
    return core.answer(TID)


def test_a_new_id_gets_a_producer_id_and_each_restart_raises_the_epoch() -> None:
    core = TransactionCoordinatorCore()
    assert core.needs_producer_id(TID)
    assert started(core) == (7, 0)
    assert not core.needs_producer_id(TID)
    again = core.init_producer_id(TID, 60_000, 5)
    keep(core, again)
    assert core.answer(TID) == (7, 1)
    # the producer of epoch 0 is fenced
    assert core.add_partitions(TID, 7, 0, [("t", 0)], 6).error is ErrorCode.PRODUCER_FENCED
    assert core.add_partitions(TID, 8, 1, [("t", 0)], 6).error is (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )


def test_commit_prepares_writes_markers_then_completes() -> None:
    core = TransactionCoordinatorCore()
    pid, epoch = started(core)
    step = core.add_partitions(TID, pid, epoch, [("t", 0), ("t", 1)], 10)
    assert step.write is not None and step.write.status is Status.ONGOING
    assert keep(core, step) is None
    # adding a partition already in is answered at once, with nothing to write
    assert core.add_partitions(TID, pid, epoch, [("t", 1)], 11).write is None
    end = core.end_transaction(TID, pid, epoch, True, 12)
    markers = keep(core, end)
    assert markers == Markers(TID, pid, epoch, True, frozenset({("t", 0), ("t", 1)}))
    # while the markers are written the client's retry is told to wait
    assert core.end_transaction(TID, pid, epoch, True, 13).error is (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    done = core.markers_written(markers, 14)
    assert done.write is not None and done.write.status is Status.COMPLETE_COMMIT
    keep(core, done)
    assert core.end_transaction(TID, pid, epoch, True, 15).error is ErrorCode.NONE  # a retry
    assert core.end_transaction(TID, pid, epoch, False, 15).error is ErrorCode.INVALID_TXN_STATE


def test_a_pending_move_makes_every_request_wait_and_a_failed_write_is_forgotten() -> None:
    core = TransactionCoordinatorCore()
    pid, epoch = started(core)
    step = core.add_partitions(TID, pid, epoch, [("t", 0)], 10)
    assert core.end_transaction(TID, pid, epoch, True, 10).error is (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )
    assert core.init_producer_id(TID, 60_000, 10).error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert step.write is not None
    assert core.finish(TID, written=False) is None
    assert core.transactions[TID].record.status is Status.EMPTY
    # a new id whose first write failed is gone
    core.init_producer_id("other", 60_000, 0, fresh_producer_id=9)
    core.finish("other", written=False)
    assert "other" not in core.transactions


def test_a_restart_inside_a_transaction_aborts_it_and_fences_the_old_producer() -> None:
    core = TransactionCoordinatorCore()
    pid, epoch = started(core)
    keep(core, core.add_partitions(TID, pid, epoch, [("t", 0)], 10))
    step = core.init_producer_id(TID, 60_000, 11)
    assert step.error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert step.write is not None and step.write.status is Status.PREPARE_ABORT
    markers = core.finish(TID, written=True)
    assert markers == Markers(TID, pid, epoch + 1, False, frozenset({("t", 0)}))
    keep(core, core.markers_written(markers, 12))
    keep(core, core.init_producer_id(TID, 60_000, 13))
    assert core.answer(TID) == (pid, epoch + 2)


def test_a_transaction_past_its_timeout_is_aborted_with_the_epoch_raised() -> None:
    core = TransactionCoordinatorCore()
    pid, epoch = started(core)
    keep(core, core.add_partitions(TID, pid, epoch, [("t", 0)], 1_000))
    assert core.expire(60_999) == []
    ((tid, step),) = core.expire(61_000)
    assert tid == TID
    assert step.write is not None
    assert (step.write.status, step.write.producer_epoch) == (Status.PREPARE_ABORT, epoch + 1)
    keep(core, step)
    assert core.end_transaction(TID, pid, epoch, True, 61_001).error is ErrorCode.PRODUCER_FENCED


def test_an_exhausted_epoch_takes_a_new_producer_id() -> None:
    core = TransactionCoordinatorCore()
    started(core)
    core.transactions[TID].record = TransactionRecord(
        7, EPOCH_MAX, 60_000, Status.COMPLETE_COMMIT, frozenset(), 0, -1
    )
    assert core.needs_producer_id(TID)
    keep(core, core.init_producer_id(TID, 60_000, 1, fresh_producer_id=12))
    assert core.answer(TID) == (12, 0)


def test_malformed_requests_and_a_recovering_producer() -> None:
    core = TransactionCoordinatorCore()
    assert core.init_producer_id("", 60_000, 0).error is ErrorCode.INVALID_REQUEST
    assert core.init_producer_id(TID, 0, 0).error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert core.init_producer_id(TID, 10**9, 0).error is ErrorCode.INVALID_TRANSACTION_TIMEOUT
    pid, epoch = started(core)
    assert core.init_producer_id(TID, 60_000, 1, expected=(pid, epoch + 5)).error is (
        ErrorCode.PRODUCER_FENCED
    )
    keep(core, core.init_producer_id(TID, 60_000, 1, expected=(pid, epoch)))
    assert core.answer(TID) == (pid, epoch + 1)


def test_a_prepared_transaction_found_at_load_has_its_markers_written_again() -> None:
    core = TransactionCoordinatorCore()
    record = TransactionRecord(4, 2, 60_000, Status.PREPARE_ABORT, frozenset({("t", 3)}), 5, 4)
    assert core.load(TID, record) == Markers(TID, 4, 2, False, frozenset({("t", 3)}))
    assert core.load(TID, None) is None and TID not in core.transactions


def test_records_round_trip_byte_for_byte() -> None:
    record = TransactionRecord(
        5, 2, 60_000, Status.ONGOING, frozenset({("t", 0), ("t", 3), ("u", 1)}), 10, 9
    )
    assert decode_value(encode_value(record)) == record
    assert decode_key(encode_key(TID)) == TID
    assert encode_key("a") == b"\x00\x00\x00\x01a"
