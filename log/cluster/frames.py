"""The cluster's own frames: a 4-byte big-endian length, then a JSON document.

Controllers exchange quorum messages in them (:mod:`.quorum`), and brokers
send their requests to the active controller in them (:mod:`.rpc`). A frame
longer than :data:`FRAME_BYTES_MAX`, or one that is not a JSON object,
raises :class:`FrameError`; the reader closes that connection and nothing
else notices.
"""

from __future__ import annotations

import struct
from typing import Any

import orjson

FRAME_BYTES_MAX = 16 * 1024 * 1024
LENGTH = struct.Struct(">I")


class FrameError(ValueError):
    """A frame that is too long or is not a JSON object."""


def frame(document: Any) -> bytes:
    payload = orjson.dumps(document)
    return LENGTH.pack(len(payload)) + payload


def split_frames(buffer: bytearray) -> list[dict[str, Any]]:
    """Take every whole frame off the front of ``buffer``; the documents they hold."""
    found = []
    while len(buffer) >= LENGTH.size:
        (length,) = LENGTH.unpack_from(buffer)
        if length > FRAME_BYTES_MAX:
            raise FrameError(f"a frame of {length} bytes (at most {FRAME_BYTES_MAX})")
        if len(buffer) < LENGTH.size + length:
            break
        payload = bytes(buffer[LENGTH.size : LENGTH.size + length])
        del buffer[: LENGTH.size + length]
        try:
            document = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise FrameError(f"a frame that is not JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise FrameError("a frame that is not a JSON object")
        found.append(document)
    return found
