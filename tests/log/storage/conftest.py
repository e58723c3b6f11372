from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from crash_simulation import crash as simulate_crash

from eventplatform.log.storage import Compression, PartitionLog, Record
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


@pytest.fixture
def crash() -> Callable[[PartitionLog], None]:
    return simulate_crash
