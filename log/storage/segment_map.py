"""Ordered map from base offset to :class:`Segment`.

Lookups by offset are ``bisect`` over a sorted list of base offsets, so a log
with thousands of segments still finds the right one in microseconds. Owned by
one :class:`PartitionLog`; not thread-safe.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from eventplatform.log.invariants import require
from eventplatform.log.storage.segment import Segment


class SegmentMap:
    def __init__(self) -> None:
        self._bases: list[int] = []
        self._segments: dict[int, Segment] = {}

    def __len__(self) -> int:
        return len(self._bases)

    def __iter__(self) -> Iterator[Segment]:
        return (self._segments[base] for base in list(self._bases))

    def add(self, segment: Segment) -> None:
        require(segment.base_offset not in self._segments, "duplicate segment base offset")
        bisect.insort(self._bases, segment.base_offset)
        self._segments[segment.base_offset] = segment

    def remove(self, segment: Segment) -> None:
        require(self._segments.get(segment.base_offset) is segment, "removing an unknown segment")
        del self._segments[segment.base_offset]
        self._bases.remove(segment.base_offset)

    @property
    def first(self) -> Segment:
        return self._segments[self._bases[0]]

    @property
    def last(self) -> Segment:
        return self._segments[self._bases[-1]]

    def floor(self, offset: int) -> Segment | None:
        """The segment with the greatest base offset <= ``offset``."""
        slot = bisect.bisect_right(self._bases, offset) - 1
        return None if slot < 0 else self._segments[self._bases[slot]]

    def higher(self, base_offset: int) -> Segment | None:
        """The segment right after the one at ``base_offset``."""
        slot = bisect.bisect_right(self._bases, base_offset)
        return None if slot >= len(self._bases) else self._segments[self._bases[slot]]

    def from_offset(self, offset: int) -> Iterator[Segment]:
        """Segments that may hold ``offset`` or later offsets, in order."""
        start = max(0, bisect.bisect_right(self._bases, offset) - 1)
        return (self._segments[base] for base in self._bases[start:])
