"""One share-partition: which records of a partition a share group has delivered,
to whom, and what became of them (KIP-932), as a sans-I/O state machine.

A share group reads a partition cooperatively: any member may be handed any
record, and each record is settled one by one. The partition's leader keeps,
for each share group reading it:

- the **start offset**: every record below it is settled (acknowledged or
  archived), and no record below it is handed out again;
- the **end offset**: the first record never handed out; ``[start, end)`` is
  the in-flight window, and each of its offsets has a state:

  ========== ====================================================================
  AVAILABLE  may be handed out (again)
  ACQUIRED   handed to one member, under a lock that ends at a deadline
  ACKNOWLEDGED  settled: processed (ACCEPT)
  ARCHIVED   settled: rejected, a gap, or handed out ``delivery_count_limit`` times
  ========== ====================================================================

:meth:`SharePartition.acquire` hands a member the acquirable records of a
span the caller read from the log (whole batches), at most ``max_records``,
and counts each delivery. :meth:`SharePartition.acknowledge` settles or
releases what a member holds: ACCEPT (1), RELEASE (2, available again), REJECT
(3) or GAP (0, an offset the log does not hold: a compacted or erased record).
A lock that runs out (:meth:`advance`) or a member that goes away
(:meth:`release_member`) makes its records available again; a record released
when it has been delivered ``delivery_count_limit`` times is archived
instead, so one poison record cannot stall the group. Each settled prefix
moves the start offset.

The window is bounded: at most ``max_in_flight`` records are in it, so a
group that acquires and never acknowledges cannot make the leader keep an
unbounded map. Records below the log's start offset (retention, DeleteRecords)
are settled as archived (:meth:`move_log_start`).

:meth:`snapshot` is what the state store keeps (the start offset and the
window's runs, an ACQUIRED record kept as AVAILABLE since its lock dies with
this leader), and :meth:`restore` starts a leader from one. Every method takes
``now_ms``, a monotonic time in milliseconds; nothing here reads a clock or
does I/O. One caller at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from eventplatform.log.invariants import require
from eventplatform.log.protocol import ErrorCode

DELIVERY_COUNT_LIMIT = 5
"""Kafka's ``group.share.delivery.count.limit``: deliveries before a record is archived."""
MAX_IN_FLIGHT_RECORDS = 2_000
"""Kafka's ``group.share.partition.max.record.locks``: the in-flight window's bound."""
RECORD_LOCK_DURATION_MS = 30_000
"""Kafka's ``group.share.record.lock.duration.ms``."""


class RecordState(IntEnum):
    """A record's state in the window, with the numbers Kafka persists them by."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


SETTLED = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})


@dataclass(slots=True)
class _InFlight:
    state: RecordState
    delivery_count: int = 0
    member: str | None = None
    lock_deadline_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Acquired:
    """A run of acquired offsets with one delivery count, as ShareFetch reports it."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One acknowledgement batch: one type for the whole run, or one per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets with one state and delivery count, as the state store keeps it."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a share-partition leaves in the state store."""

    state_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]


class SharePartition:
    """See the module docstring."""

    def __init__(
        self,
        start_offset: int,
        *,
        state_epoch: int = 0,
        delivery_count_limit: int = DELIVERY_COUNT_LIMIT,
        max_in_flight: int = MAX_IN_FLIGHT_RECORDS,
    ) -> None:
        require(start_offset >= 0, "a share-partition starts at a real offset")
        require(delivery_count_limit >= 1 and max_in_flight >= 1, "share-partition bounds")
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.state_epoch = state_epoch
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self._window: dict[int, _InFlight] = {}

    # ------------------------------------------------------------ queries

    def next_acquirable(self, log_end: int) -> int | None:
        """The lowest offset :meth:`acquire` could hand out now, given the log's
        readable end, or None (nothing available, or the window is full)."""
        for offset in range(self.start_offset, self.end_offset):
            if self._window[offset].state is RecordState.AVAILABLE:
                return offset
        if self.end_offset < log_end and self.end_offset - self.start_offset < self.max_in_flight:
            return self.end_offset
        return None

    def state_of(self, offset: int) -> RecordState:
        """The state of ``offset``: settled below the window, available past it."""
        if offset < self.start_offset:
            return RecordState.ARCHIVED
        entry = self._window.get(offset)
        return RecordState.AVAILABLE if entry is None else entry.state

    def holder(self, offset: int) -> str | None:
        entry = self._window.get(offset)
        return None if entry is None else entry.member

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            entry.lock_deadline_ms
            for entry in self._window.values()
            if entry.lock_deadline_ms is not None
        ]
        return min(deadlines, default=None)

    # ------------------------------------------------------------ changes

    def acquire(
        self,
        member: str,
        first: int,
        last: int,
        *,
        max_records: int,
        now_ms: int,
        lock_duration_ms: int = RECORD_LOCK_DURATION_MS,
    ) -> list[Acquired]:
        """Hand ``member`` the acquirable offsets of ``[first, last]`` (the span of whole
        batches the caller read), at most ``max_records`` of them and never past the
        window's bound; each delivery counts. Returns the runs acquired, in order."""
        require(max_records >= 1, "acquire at least one record")
        acquired: list[Acquired] = []
        taken = 0
        deadline = now_ms + lock_duration_ms
        offset = max(first, self.start_offset)
        while offset <= last and taken < max_records:
            entry = self._window.get(offset)
            if entry is None:
                if offset != self.end_offset or self.in_flight() >= self.max_in_flight:
                    break  # past the window's end only in order, and only within its bound
                entry = self._window[offset] = _InFlight(RecordState.AVAILABLE)
                self.end_offset += 1
            if entry.state is RecordState.AVAILABLE:
                entry.state = RecordState.ACQUIRED
                entry.delivery_count += 1
                entry.member = member
                entry.lock_deadline_ms = deadline
                _extend(acquired, offset, entry.delivery_count)
                taken += 1
            offset += 1
        return acquired

    def acknowledge(self, member: str, batches: Iterable[AckBatch]) -> ErrorCode:
        """Settle or release what ``member`` holds: all the batches, or none of them
        (INVALID_RECORD_STATE for an offset it does not hold, INVALID_REQUEST for a
        malformed batch)."""
        batches = list(batches)
        changes: list[tuple[int, AcknowledgeType]] = []
        for batch in batches:
            error = _check_batch(batch)
            if error != ErrorCode.NONE:
                return error
            if batch.first_offset < self.start_offset or batch.last_offset >= self.end_offset:
                return ErrorCode.INVALID_RECORD_STATE  # outside the window: never held
            for index, offset in enumerate(range(batch.first_offset, batch.last_offset + 1)):
                kind = AcknowledgeType(batch.types[0 if len(batch.types) == 1 else index])
                entry = self._window.get(offset)
                if entry is None or entry.state is not RecordState.ACQUIRED:
                    return ErrorCode.INVALID_RECORD_STATE
                if entry.member != member:
                    return ErrorCode.INVALID_RECORD_STATE
                changes.append((offset, kind))
        if len({offset for offset, _ in changes}) != len(changes):
            return ErrorCode.INVALID_REQUEST  # one offset acknowledged twice
        for offset, kind in changes:
            entry = self._window[offset]
            if kind is AcknowledgeType.ACCEPT:
                self._settle(entry, RecordState.ACKNOWLEDGED)
            elif kind is AcknowledgeType.RELEASE:
                self._release(entry)
            else:
                self._settle(entry, RecordState.ARCHIVED)
        self._advance_start()
        return ErrorCode.NONE

    def advance(self, now_ms: int) -> bool:
        """Release every record whose lock ran out; whether any became available."""
        released = False
        for entry in self._window.values():
            if entry.lock_deadline_ms is not None and entry.lock_deadline_ms <= now_ms:
                released = self._release(entry) or released
        self._advance_start()
        return released

    def release_member(self, member: str) -> bool:
        """Release everything ``member`` holds (its session ended); whether any record
        became available."""
        released = False
        for entry in self._window.values():
            if entry.state is RecordState.ACQUIRED and entry.member == member:
                released = self._release(entry) or released
        self._advance_start()
        return released

    def move_log_start(self, log_start: int) -> None:
        """The log no longer holds the records below ``log_start``: settle them."""
        if log_start <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start, self.end_offset)):
            del self._window[offset]
        self.start_offset = log_start
        self.end_offset = max(self.end_offset, log_start)

    def _settle(self, entry: _InFlight, state: RecordState) -> None:
        entry.state = state
        entry.member = None
        entry.lock_deadline_ms = None

    def _release(self, entry: _InFlight) -> bool:
        """Make a held record available again, or archive it when its deliveries are
        spent; whether it is available."""
        exhausted = entry.delivery_count >= self.delivery_count_limit
        self._settle(entry, RecordState.ARCHIVED if exhausted else RecordState.AVAILABLE)
        return not exhausted

    def _advance_start(self) -> None:
        while self.start_offset < self.end_offset:
            if self._window[self.start_offset].state not in SETTLED:
                break
            del self._window[self.start_offset]
            self.start_offset += 1

    # ------------------------------------------------------------ the state store

    def snapshot(self) -> Snapshot:
        """The state to keep: an acquired record as available, with its delivery count."""
        batches: list[StateBatch] = []
        for offset in range(self.start_offset, self.end_offset):
            entry = self._window[offset]
            state = RecordState.AVAILABLE if entry.state is RecordState.ACQUIRED else entry.state
            last = batches[-1] if batches else None
            if (
                last is not None
                and last.last_offset == offset - 1
                and last.state is state
                and last.delivery_count == entry.delivery_count
            ):
                batches[-1] = StateBatch(last.first_offset, offset, state, entry.delivery_count)
            else:
                batches.append(StateBatch(offset, offset, state, entry.delivery_count))
        return Snapshot(self.state_epoch, self.start_offset, tuple(batches))

    @classmethod
    def restore(
        cls,
        snapshot: Snapshot,
        *,
        delivery_count_limit: int = DELIVERY_COUNT_LIMIT,
        max_in_flight: int = MAX_IN_FLIGHT_RECORDS,
    ) -> SharePartition:
        """A share-partition that carries on from ``snapshot``. Batches need not cover
        the window: an offset between them was never delivered, so it is available."""
        partition = cls(
            snapshot.start_offset,
            state_epoch=snapshot.state_epoch,
            delivery_count_limit=delivery_count_limit,
            max_in_flight=max_in_flight,
        )
        known: dict[int, _InFlight] = {}
        for batch in snapshot.batches:
            require(batch.state is not RecordState.ACQUIRED, "a kept state is never acquired")
            for offset in range(
                max(batch.first_offset, snapshot.start_offset), batch.last_offset + 1
            ):
                known[offset] = _InFlight(batch.state, batch.delivery_count)
        end = max(known, default=snapshot.start_offset - 1) + 1
        for offset in range(snapshot.start_offset, end):
            partition._window[offset] = known.get(offset) or _InFlight(RecordState.AVAILABLE)
        partition.end_offset = end
        partition._advance_start()
        return partition

    def runs(self) -> Iterator[tuple[int, int, RecordState, str | None]]:
        """The window as runs of (first, last, state, holder), for descriptions and tests."""
        run: list[Any] = []
        for offset in range(self.start_offset, self.end_offset):
            entry = self._window[offset]
            if run and run[2] is entry.state and run[3] == entry.member:
                run[1] = offset
            else:
                if run:
                    yield (run[0], run[1], run[2], run[3])
                run = [offset, offset, entry.state, entry.member]
        if run:
            yield (run[0], run[1], run[2], run[3])


def _extend(runs: list[Acquired], offset: int, delivery_count: int) -> None:
    last = runs[-1] if runs else None
    if (
        last is not None
        and last.last_offset == offset - 1
        and last.delivery_count == delivery_count
    ):
        runs[-1] = Acquired(last.first_offset, offset, delivery_count)
    else:
        runs.append(Acquired(offset, offset, delivery_count))


def _check_batch(batch: AckBatch) -> ErrorCode:
    span = batch.last_offset - batch.first_offset + 1
    if batch.first_offset < 0 or span < 1 or not batch.types:
        return ErrorCode.INVALID_REQUEST
    if len(batch.types) not in (1, span):
        return ErrorCode.INVALID_REQUEST
    if any(kind not in AcknowledgeType._value2member_map_ for kind in batch.types):
        return ErrorCode.INVALID_REQUEST
    return ErrorCode.NONE
