"""The transaction coordinator as a sans-I/O state machine: Kafka's ``TransactionCoordinator``.

For each transactional id it coordinates, the core keeps the producer id and
epoch, the transaction's state and the partitions it has written to, and
decides every answer of InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn
and EndTxn, with Kafka's error codes. The states and their moves::

    Empty --AddPartitions--> Ongoing --EndTxn(commit)--> PrepareCommit --markers--> CompleteCommit
                               |
                               +--EndTxn(abort), timeout, InitProducerId--> PrepareAbort
                                                                --markers--> CompleteAbort
    CompleteCommit, CompleteAbort --InitProducerId (epoch + 1)--> Empty

Every move is first written to ``__transaction_state``: a call that moves a
transaction returns the record to write (:class:`Step`) and marks the id
pending; the shell writes it, waits for the ISR, and calls :meth:`finish`, which
applies it (or, when the write failed, forgets it: the client retries). While
an id is pending every request for it is CONCURRENT_TRANSACTIONS, as in Kafka.

A transaction that reaches PrepareCommit or PrepareAbort has markers to write:
:meth:`finish` returns them (:class:`Markers`), the shell has every partition's
leader write them (WriteTxnMarkers), and :meth:`markers_written` returns the
Complete record to write. A transaction older than its timeout, or one whose
producer calls InitProducerId again, is aborted with the epoch raised by one,
which fences the producer that began it (PRODUCER_FENCED at its next request).

The core reads no clock (each call takes ``now_ms``, wall-clock milliseconds as
written in the records) and allocates no producer ids: :meth:`needs_producer_id`
says when the shell must bring one. One caller at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.transactions.records import TransactionRecord, TransactionStatus

NO_PRODUCER_ID = -1
NO_EPOCH = -1
EPOCH_MAX = 2**15 - 2
"""Kafka's ``Short.MaxValue - 1``: past it a producer id is exhausted and replaced."""
TRANSACTION_MAX_TIMEOUT_MS = 900_000
"""Kafka's ``transaction.max.timeout.ms``."""
TRANSACTIONAL_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000
"""Kafka's ``transactional.id.expiration.ms``."""
PARTITIONS_MAX = 100_000
"""The most partitions one transaction may write to (a bound on its record)."""

Status = TransactionStatus
_COMPLETE = frozenset({Status.EMPTY, Status.COMPLETE_COMMIT, Status.COMPLETE_ABORT})
_PREPARED = frozenset({Status.PREPARE_COMMIT, Status.PREPARE_ABORT})


@dataclass(slots=True)
class Transaction:
    """One transactional id's metadata, and the move being written, if any."""

    transactional_id: str
    record: TransactionRecord
    pending: TransactionRecord | None = None
    answer: tuple[int, int] | None = None
    """InitProducerId's (producer id, epoch), answered once the pending move is kept."""
    unwritten: bool = False
    """A new id whose first record is not kept yet: forgotten if that write fails."""


@dataclass(frozen=True, slots=True)
class Step:
    """A call's answer: an error, or the record the shell must keep before answering."""

    error: ErrorCode
    write: TransactionRecord | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class Markers:
    """Markers to write: one per partition of the transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[tuple[str, int]]


@dataclass(slots=True)
class TransactionCoordinatorCore:
    """See the module docstring."""

    max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS
    id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS
    transactions: dict[str, Transaction] = field(default_factory=dict)

    # ------------------------------------------------------------ loading

    def load(self, transactional_id: str, record: TransactionRecord | None) -> Markers | None:
        """Install what the log holds for an id (None: a tombstone). A transaction found
        prepared has its markers written again (writing one twice changes nothing)."""
        if record is None:
            self.transactions.pop(transactional_id, None)
            return None
        self.transactions[transactional_id] = Transaction(transactional_id, record)
        return _markers(transactional_id, record)

    def unload(self, transactional_ids: Iterable[str]) -> None:
        for transactional_id in transactional_ids:
            self.transactions.pop(transactional_id, None)

    # ------------------------------------------------------------ InitProducerId

    def needs_producer_id(self, transactional_id: str) -> bool:
        """Whether InitProducerId for this id needs a new producer id: a new id, or an
        epoch that cannot be raised again."""
        found = self.transactions.get(transactional_id)
        return found is None or found.record.producer_epoch >= EPOCH_MAX

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        now_ms: int,
        *,
        fresh_producer_id: int | None = None,
        expected: tuple[int, int] | None = None,
    ) -> Step:
        """InitProducerId: a producer (re)starting with this transactional id gets its
        producer id with the epoch raised, which fences every earlier producer of the
        id. ``expected`` is KIP-360's (producer id, epoch) of a producer recovering from
        an error; ``fresh_producer_id`` one the shell allocated when
        :meth:`needs_producer_id` said so."""
        if not transactional_id:
            return Step(ErrorCode.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return Step(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        found = self.transactions.get(transactional_id)
        if found is None:
            if fresh_producer_id is None:
                return Step(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            record = TransactionRecord(
                fresh_producer_id, 0, timeout_ms, Status.EMPTY, frozenset(), now_ms, -1
            )
            found = Transaction(transactional_id, record, unwritten=True)
            self.transactions[transactional_id] = found
            return self._begin(found, record, answer=(fresh_producer_id, 0))
        current = found.record
        if found.pending is not None or current.status in _PREPARED:
            return Step(ErrorCode.CONCURRENT_TRANSACTIONS)
        recovering = expected is not None and expected[0] != NO_PRODUCER_ID
        if recovering and expected != (current.producer_id, current.producer_epoch):
            return Step(ErrorCode.PRODUCER_FENCED)
        if current.status is Status.ONGOING:
            # the producer restarted inside a transaction: abort it, fencing the old one
            step = self._abort(found, now_ms, raise_epoch=True)
            return Step(ErrorCode.CONCURRENT_TRANSACTIONS, step.write)
        if current.status not in _COMPLETE:
            return Step(ErrorCode.CONCURRENT_TRANSACTIONS)
        if current.producer_epoch >= EPOCH_MAX:
            if fresh_producer_id is None:
                return Step(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            producer_id, epoch = fresh_producer_id, 0
        else:
            producer_id, epoch = current.producer_id, current.producer_epoch + 1
        record = replace(
            current,
            producer_id=producer_id,
            producer_epoch=epoch,
            timeout_ms=timeout_ms,
            status=Status.EMPTY,
            partitions=frozenset(),
            last_update_ms=now_ms,
            start_ms=-1,
        )
        return self._begin(found, record, answer=(producer_id, epoch))

    # ------------------------------------------------------------ the transaction

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
        now_ms: int,
    ) -> Step:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition)."""
        found, error = self._producer(transactional_id, producer_id, producer_epoch)
        if found is None:
            return Step(error)
        current = found.record
        wanted = frozenset(partitions)
        if found.pending is not None or current.status in _PREPARED:
            return Step(ErrorCode.CONCURRENT_TRANSACTIONS)
        if current.status is Status.ONGOING and wanted <= current.partitions:
            return Step(ErrorCode.NONE)
        if current.status not in _COMPLETE and current.status is not Status.ONGOING:
            return Step(ErrorCode.INVALID_TXN_STATE)
        merged = (current.partitions if current.status is Status.ONGOING else frozenset()) | wanted
        if len(merged) > PARTITIONS_MAX:
            return Step(ErrorCode.INVALID_REQUEST)
        start = current.start_ms if current.status is Status.ONGOING else now_ms
        record = replace(
            current, status=Status.ONGOING, partitions=merged, last_update_ms=now_ms, start_ms=start
        )
        return self._begin(found, record)

    def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> Step:
        """EndTxn: commit or abort the ongoing transaction. A retry of an end already
        reached answers NONE; ending it the other way is INVALID_TXN_STATE."""
        found, error = self._producer(transactional_id, producer_id, producer_epoch)
        if found is None:
            return Step(error)
        status = found.record.status
        if found.pending is not None:
            return Step(ErrorCode.CONCURRENT_TRANSACTIONS)
        if status is Status.ONGOING:
            if commit:
                record = replace(found.record, status=Status.PREPARE_COMMIT, last_update_ms=now_ms)
                return self._begin(found, record)
            return self._abort(found, now_ms, raise_epoch=False)
        done = Status.COMPLETE_COMMIT if commit else Status.COMPLETE_ABORT
        prepared = Status.PREPARE_COMMIT if commit else Status.PREPARE_ABORT
        if status is done:
            return Step(ErrorCode.NONE)
        if status is prepared:
            return Step(ErrorCode.CONCURRENT_TRANSACTIONS)
        return Step(ErrorCode.INVALID_TXN_STATE)

    def expire(self, now_ms: int) -> list[tuple[str, Step]]:
        """Abort every ongoing transaction older than its timeout, fencing its producer:
        each id with the step to keep."""
        steps = []
        for found in self.transactions.values():
            record = found.record
            if found.pending is not None or record.status is not Status.ONGOING:
                continue
            if record.start_ms + record.timeout_ms <= now_ms:
                steps.append((found.transactional_id, self._abort(found, now_ms, raise_epoch=True)))
        return steps

    def forget(self, transactional_id: str) -> None:
        """Drop an expired id (its tombstone was written)."""
        self.transactions.pop(transactional_id, None)

    def expired_ids(self, now_ms: int) -> list[str]:
        """Ids with no transaction in flight, idle past ``id_expiration_ms``."""
        return [
            found.transactional_id
            for found in self.transactions.values()
            if found.pending is None
            and found.record.status in _COMPLETE
            and found.record.last_update_ms + self.id_expiration_ms <= now_ms
        ]

    def markers_written(self, markers: Markers, now_ms: int) -> Step:
        """Every marker of a prepared transaction is written: complete it."""
        found = self.transactions.get(markers.transactional_id)
        if found is None or found.pending is not None:
            return Step(ErrorCode.CONCURRENT_TRANSACTIONS)
        record = found.record
        if _markers(markers.transactional_id, record) != markers:
            return Step(ErrorCode.NONE)  # already completed, or a newer move
        status = Status.COMPLETE_COMMIT if markers.commit else Status.COMPLETE_ABORT
        return self._begin(
            found, replace(record, status=status, partitions=frozenset(), last_update_ms=now_ms)
        )

    def finish(self, transactional_id: str, written: bool) -> Markers | None:
        """The pending move of ``transactional_id`` was kept (or not: it is forgotten).
        Returns the markers a move into PrepareCommit or PrepareAbort calls for."""
        found = self.transactions.get(transactional_id)
        if found is None or found.pending is None:
            return None
        record, found.pending = found.pending, None
        if not written:
            if found.unwritten:
                del self.transactions[transactional_id]
            return None
        found.record, found.unwritten = record, False
        return _markers(transactional_id, record)

    def answer(self, transactional_id: str) -> tuple[int, int]:
        """InitProducerId's answer once its move was kept."""
        found = self.transactions[transactional_id]
        return found.answer or (found.record.producer_id, found.record.producer_epoch)

    # ------------------------------------------------------------ helpers

    def _producer(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[Transaction | None, ErrorCode]:
        found = self.transactions.get(transactional_id)
        if found is None or found.record.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if found.record.producer_epoch != producer_epoch:
            return None, ErrorCode.PRODUCER_FENCED
        return found, ErrorCode.NONE

    def _abort(self, found: Transaction, now_ms: int, *, raise_epoch: bool) -> Step:
        record = found.record
        epoch = min(record.producer_epoch + 1, EPOCH_MAX) if raise_epoch else record.producer_epoch
        aborted = replace(
            record, producer_epoch=epoch, status=Status.PREPARE_ABORT, last_update_ms=now_ms
        )
        return self._begin(found, aborted)

    def _begin(
        self, found: Transaction, record: TransactionRecord, answer: tuple[int, int] | None = None
    ) -> Step:
        found.pending = record
        found.answer = answer
        return Step(ErrorCode.NONE, record, record.producer_id, record.producer_epoch)


def _markers(transactional_id: str, record: TransactionRecord) -> Markers | None:
    if record.status not in _PREPARED:
        return None
    return Markers(
        transactional_id,
        record.producer_id,
        record.producer_epoch,
        record.status is Status.PREPARE_COMMIT,
        record.partitions,
    )
