"""The bounded memories of the correction path, without IO: recent record values in
front of the log reader, and the contributions of uncorrected events."""

from __future__ import annotations

from collections.abc import Sequence

from eventplatform.events import Position
from eventplatform.projections.caches import (
    RECENT_VALUE_OVERHEAD_BYTES,
    OriginalContributions,
    RecentValues,
)


class CountingLog:
    """A log reader that holds ``b"v<offset>"`` at every offset and counts what it reads."""

    def __init__(self) -> None:
        self.read: list[Position] = []

    def __call__(self, positions: Sequence[Position]) -> dict[Position, bytes]:
        self.read.extend(positions)
        return {p: f"v{p.offset}".encode() for p in positions}


def at(offset: int) -> Position:
    return Position("t", 0, offset)


def test_recent_values_are_served_from_memory_and_the_rest_from_the_log() -> None:
    log = CountingLog()
    recent = RecentValues(log)
    recent.remember([(at(1), b"one"), (at(2), None)])

    found = recent([at(1), at(2), at(3)])

    assert found == {at(1): b"one", at(2): b"v2", at(3): b"v3"}
    assert log.read == [at(2), at(3)]  # a record without a value is not remembered


def test_recent_values_forget_the_oldest_beyond_their_bound() -> None:
    log = CountingLog()
    each = 10 + RECENT_VALUE_OVERHEAD_BYTES
    recent = RecentValues(log, bytes_max=3 * each)
    recent.remember((at(offset), b"x" * 10) for offset in range(5))

    recent([at(offset) for offset in range(5)])

    assert log.read == [at(0), at(1)]
    recent.forget()
    recent([at(4)])
    assert log.read[-1] == at(4)


def test_original_contributions_forget_the_least_used_beyond_their_limit() -> None:
    kept = OriginalContributions(limit=2)
    kept.put(at(1), [])
    kept.put(at(2), [])
    assert kept.get(at(1)) == []  # now the most recently used
    kept.put(at(3), [])

    assert kept.get(at(2)) is None
    assert kept.get(at(1)) == [] and kept.get(at(3)) == []
