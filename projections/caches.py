"""The correction path's memories of the log, each bounded: the values of records a
runner applied lately, the values one transaction read, and the contributions of
uncorrected events. They hold no IO of their own: a reader of the log sits behind
them (:data:`EventReader`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence

from eventplatform.events.erasure import ErasedRecord
from eventplatform.events.model import Position
from eventplatform.projections.model import Contribution

LogValue = bytes | ErasedRecord
"""What a position of the log holds: a record's value, or what is left of an erased record."""
EventReader = Callable[[Sequence[Position]], dict[Position, LogValue]]
"""Reads the record values at some log positions (a correction's history). A position
holding no record, or a record without a value, is left out; an erased record is
an :class:`~eventplatform.events.ErasedRecord`."""

RECENT_VALUES_BYTES_DEFAULT = 64 * 1024 * 1024
RECENT_VALUE_OVERHEAD_BYTES = 200
"""What a remembered value costs beyond its own bytes: its position and the entries."""


class RecentValues:
    """The values of records a runner applied lately, by position, up to ``bytes_max``
    (oldest forgotten first), in front of a reader of the log.

    Corrections mostly amend recent events: their originals, and the other events of
    rows they make recompute, are then found here instead of read back from the log.
    A record's value at a position never changes while its topic lives, but for an
    erasure: a value remembered from before one is what the runner applied, which
    is what a correction lagging behind the erasure must take back. A runner
    forgets them all when partitions are taken from it.
    """

    def __init__(self, reader: EventReader, bytes_max: int = RECENT_VALUES_BYTES_DEFAULT):
        self._reader = reader
        self.bytes_max = bytes_max
        self._values: dict[Position, bytes] = {}
        self._order: deque[Position] = deque()
        self._bytes = 0

    def remember(self, records: Iterable[tuple[Position, bytes | None]]) -> None:
        values, order = self._values, self._order
        added = 0
        for position, value in records:
            if value is not None and position not in values:
                values[position] = value
                order.append(position)
                added += len(value) + RECENT_VALUE_OVERHEAD_BYTES
        self._bytes += added
        while self._bytes > self.bytes_max and order:
            forgotten = values.pop(order.popleft())
            self._bytes -= len(forgotten) + RECENT_VALUE_OVERHEAD_BYTES

    def forget(self) -> None:
        self._values.clear()
        self._order.clear()
        self._bytes = 0

    def __call__(self, positions: Sequence[Position]) -> dict[Position, LogValue]:
        values = self._values
        found: dict[Position, LogValue] = {}
        missing = []
        for position in positions:
            value = values.get(position)
            if value is None:
                missing.append(position)
            else:
                found[position] = value
        if missing:
            found.update(self._reader(missing))
        return found


ORIGINAL_CONTRIBUTIONS_MAX = 100_000
"""Events whose original contributions a store keeps for recomputing rows."""


class OriginalContributions:
    """The contributions of uncorrected events, by position, the oldest used forgotten
    first beyond ``limit`` events."""

    def __init__(self, limit: int = ORIGINAL_CONTRIBUTIONS_MAX) -> None:
        self.limit = limit
        self._kept: dict[Position, list[Contribution]] = {}

    def get(self, position: Position) -> list[Contribution] | None:
        found = self._kept.pop(position, None)
        if found is not None:
            self._kept[position] = found  # used now: the newest
        return found

    def put(self, position: Position, contributions: list[Contribution]) -> None:
        kept = self._kept
        kept.pop(position, None)
        kept[position] = contributions
        while len(kept) > self.limit:
            del kept[next(iter(kept))]


class CachedReader:
    """An event reader that reads each log position once (records are immutable).

    A transaction's corrections read the same records again and again: each
    correction of one session recomputes the session's row from all its
    events. The runner also reads a whole batch's correction targets in one
    pass up front (:meth:`~.history_store.CorrectedHistory.prefetch`).
    """

    def __init__(self, reader: EventReader) -> None:
        self._reader = reader
        self._values: dict[Position, LogValue | None] = {}

    def __call__(self, positions: Sequence[Position]) -> dict[Position, LogValue]:
        missing = [position for position in positions if position not in self._values]
        if missing:
            found = self._reader(missing)
            for position in missing:
                self._values[position] = found.get(position)
        values = self._values
        return {p: value for p in positions if (value := values[p]) is not None}
