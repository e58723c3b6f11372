from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from eventplatform.log.storage import Compression, Record
from eventplatform.log.storage.record_batch import encode_batch


@dataclass
class ManualClock:
    """A wall clock in milliseconds that only moves when a test moves it."""

    now_ms: int = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, milliseconds: int) -> None:
        self.now_ms += milliseconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


BatchFactory = Callable[..., bytes]


@pytest.fixture
def make_batch() -> BatchFactory:
    """Build a producer-style batch (offsets from 0) of ``count`` records."""

    def build(
        count: int = 3,
        *,
        prefix: str = "v",
        keys: list[bytes | None] | None = None,
        values: list[bytes | None] | None = None,
        timestamp: int = 1_700_000_000_000,
        compression: Compression = Compression.NONE,
        value_bytes: int = 0,
    ) -> bytes:
        records = []
        for index in range(count):
            key = keys[index] if keys is not None else f"k{index}".encode()
            if values is not None:
                value = values[index]
            else:
                value = f"{prefix}{index}".encode() + b"x" * value_bytes
            records.append(Record(index, timestamp + index, key, value))
        return encode_batch(records, base_offset=0, compression=compression)

    return build


def _crash(log: object) -> None:
    """Drop a log as a killed process would: no flush, no trim, no checkpoint, no marker.

    Only this process's descriptors and mappings are released; the files stay
    exactly as the page cache holds them.
    """
    import mmap
    import os

    from eventplatform.log.storage import PartitionLog

    assert isinstance(log, PartitionLog)
    segments = list(log.segments) + [segment for _, segment in log._pending_deletes]
    for segment in segments:
        for index in (segment.offset_index, segment.time_index):
            mapping: mmap.mmap | None = index._map
            if mapping is not None:
                mapping.close()
            if index._descriptor >= 0:
                os.close(index._descriptor)
                index._descriptor = -1
        if segment.descriptor >= 0:
            os.close(segment.descriptor)
            segment.descriptor = -1
    os.close(log._lock_descriptor)  # the kernel drops a dead process's locks
    log._closed = True


@pytest.fixture
def crash() -> Callable[[object], None]:
    return _crash
