"""UUIDv7 event ids (RFC 9562, section 5.7).

A v7 id starts with the Unix time in milliseconds, so ids sort roughly by
creation time and index well in SQL. Within one millisecond this generator
fills the 12-bit ``rand_a`` field with a counter (RFC 9562 "method 1"), so the
ids one process makes are strictly increasing.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_COUNTER_MAX = 0xFFF
_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7() -> uuid.UUID:
    """A new, strictly increasing (per process) UUIDv7."""
    global _last_ms, _counter
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            _last_ms = now_ms
            _counter = int.from_bytes(os.urandom(2)) & 0x3FF
        else:
            _counter += 1
            if _counter > _COUNTER_MAX:
                _last_ms += 1
                _counter = 0
        unix_ms, counter = _last_ms, _counter
    random_b = int.from_bytes(os.urandom(8)) & 0x3FFF_FFFF_FFFF_FFFF
    value = (unix_ms & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= random_b
    return uuid.UUID(int=value)


def uuid7_unix_ms(value: uuid.UUID) -> int:
    """The millisecond timestamp a UUIDv7 carries."""
    return value.int >> 80
