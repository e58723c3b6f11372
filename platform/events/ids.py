"""UUIDv7 event ids (RFC 9562, section 5.7).

A v7 id starts with the Unix time in milliseconds, so ids sort roughly by
creation time and index well in SQL. Within one millisecond this generator
fills the 12-bit ``rand_a`` field with a counter (RFC 9562 "method 1"), so the
ids one process makes are strictly increasing.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid

_COUNTER_MAX = 0xFFF
_VARIANT = 0b10 << 62
_RANDOM_B = 0x3FFF_FFFF_FFFF_FFFF
_SAFE_UNKNOWN = uuid.SafeUUID.unknown
_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7() -> uuid.UUID:
    """A new, strictly increasing (per process) UUIDv7."""
    return uuid7s(1)[0]


def uuid7s(count: int) -> list[uuid.UUID]:
    """``count`` new UUIDv7s, strictly increasing (per process), made together."""
    global _last_ms, _counter
    stamps: list[int] = []
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            _last_ms = now_ms
            _counter = int.from_bytes(os.urandom(2)) & 0x3FF
        else:
            _counter += 1
        for _ in range(count):
            if _counter > _COUNTER_MAX:
                _last_ms += 1
                _counter = 0
            stamps.append((_last_ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | _counter << 64)
            _counter += 1
        _counter -= 1
    randomness = struct.unpack(f">{count}Q", os.urandom(8 * count))
    ids = []
    new, set_ = object.__new__, object.__setattr__
    for stamp, random_b in zip(stamps, randomness, strict=True):
        value = new(uuid.UUID)
        set_(value, "int", stamp | _VARIANT | random_b & _RANDOM_B)
        set_(value, "is_safe", _SAFE_UNKNOWN)
        ids.append(value)
    return ids


def uuid7_unix_ms(value: uuid.UUID) -> int:
    """The millisecond timestamp a UUIDv7 carries."""
    return value.int >> 80
