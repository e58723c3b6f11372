"""The cluster's own frames: a 4-byte big-endian length, then a JSON document.

Controllers exchange quorum messages in them (:mod:`.quorum`), and brokers
send their requests to the active controller in them (:mod:`.rpc`). A frame
longer than :data:`FRAME_BYTES_MAX`, or one that is not a JSON object,
raises :class:`FrameError`; the reader closes that connection and nothing
else notices.

What a document may hold is declared, as the Kafka protocol's tables are
(:mod:`eventplatform.log.protocol.schema`): one table of :class:`Field`\\ s
per message kind, each naming its type and range (:class:`Integer`,
:class:`Text`, :class:`Hex`, :class:`ListOf`, :class:`Record`, ...).
:func:`check` walks a table over a decoded document before anything reads
it, so an epoch past its range, an unknown voter, an absurd offset, a
missing or an unexpected field is a :class:`FrameError` at the boundary,
never a value that reaches the consensus or is persisted. The ranges are
Kafka's: epochs and offsets are non-negative int32 and int64.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

FRAME_BYTES_MAX = 16 * 1024 * 1024
LENGTH = struct.Struct(">I")

INT16_MAX = (1 << 15) - 1
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
NAME_CHARS_MAX = 249
"""A topic name's longest (Kafka's limit)."""
TEXT_CHARS_MAX = 32_767
"""Any other string's longest: a Kafka STRING's length is an int16."""
ITEMS_MAX = 100_000
"""The most items of any list a frame carries."""

_HEX = re.compile(r"[0-9a-f]*")


class FrameError(ValueError):
    """A frame that is too long, is not a JSON object, or breaks its table."""


# ---------------------------------------------------------------- the vocabulary


@dataclass(frozen=True, slots=True)
class Integer:
    """A JSON integer (not a boolean) in ``[low, high]``; with ``voter``, also one of the
    quorum's voters."""

    low: int
    high: int
    voter: bool = False


@dataclass(frozen=True, slots=True)
class Text:
    """A string of at most ``chars_max`` characters."""

    chars_max: int = TEXT_CHARS_MAX


@dataclass(frozen=True, slots=True)
class Number:
    """A finite JSON number (integer or not) in ``[low, high]``: a quota's value."""

    low: float = 0.0
    high: float = 1e18


@dataclass(frozen=True, slots=True)
class OrNull:
    """``item`` or null, inside a list or tuple (a field says ``nullable`` instead)."""

    item: FieldType


@dataclass(frozen=True, slots=True)
class Boolean:
    """``true`` or ``false``."""


@dataclass(frozen=True, slots=True)
class Hex:
    """Bytes as a lowercase hex string (the frame's size bounds it)."""


@dataclass(frozen=True, slots=True)
class ListOf:
    """A list of at most ``items_max`` items of one type."""

    item: FieldType
    items_max: int = ITEMS_MAX


@dataclass(frozen=True, slots=True)
class Tuple:
    """A list of exactly these types, in order (an entry as ``[epoch, payload]``)."""

    items: tuple[FieldType, ...]

    def __init__(self, *items: FieldType) -> None:
        object.__setattr__(self, "items", items)


@dataclass(frozen=True, slots=True)
class TextMap:
    """An object of at most ``items_max`` string keys and string values (configs)."""

    items_max: int = ITEMS_MAX


@dataclass(frozen=True, slots=True)
class Record:
    """A nested object with a table of its own."""

    fields: tuple[Field, ...]

    def __init__(self, *fields: Field) -> None:
        object.__setattr__(self, "fields", fields)


@dataclass(frozen=True, slots=True)
class Body:
    """An object whose table depends on another field (a message's ``type``, a request's
    ``method``): :func:`check` sees only that it is an object; :func:`check_kind` checks it
    against its own table."""


FieldType = (
    Integer | Number | OrNull | Text | Boolean | Hex | ListOf | Tuple | TextMap | Record | Body
)


@dataclass(frozen=True, slots=True)
class Field:
    """One member of an object: its name and type; ``nullable`` lets it be null, and
    ``optional`` lets it be absent."""

    name: str
    type: FieldType
    nullable: bool = False
    optional: bool = False


Table = tuple[Field, ...]

EPOCH = Integer(0, INT32_MAX)
"""A quorum or leader epoch (Kafka's int32)."""
OFFSET = Integer(0, INT64_MAX)
"""A log offset, a count of bytes or a position in a file (Kafka's int64)."""
BROKER_EPOCH = Integer(0, INT64_MAX)
"""A broker's registration epoch (Kafka's int64)."""
NODE_ID = Integer(0, INT32_MAX)
"""A broker's id (Kafka's int32)."""
VOTER = Integer(0, INT32_MAX, voter=True)
"""A voter's id: one of the quorum's."""


def check(table: Table, document: Any, *, voters: Collection[int] = (), where: str = "") -> None:
    """Raise :class:`FrameError`, naming the field, unless ``document`` is an object that
    holds exactly what ``table`` declares, each value of its type and within its range."""
    if not isinstance(document, dict):
        raise FrameError(f"{where or 'the document'}: an object expected")
    declared = {field.name for field in table}
    unexpected = [name for name in document if name not in declared]
    if unexpected:
        raise FrameError(f"{where or 'the document'}: unexpected field {unexpected[0]!r}")
    for field in table:
        path = f"{where}.{field.name}" if where else field.name
        if field.name not in document:
            if not field.optional:
                raise FrameError(f"{path}: missing")
            continue
        value = document[field.name]
        if value is None:
            if not field.nullable:
                raise FrameError(f"{path}: may not be null")
            continue
        _check_value(field.type, value, voters, path)


def _check_value(kind: FieldType, value: Any, voters: Collection[int], path: str) -> None:
    if isinstance(kind, Integer):
        if not isinstance(value, int) or isinstance(value, bool):
            raise FrameError(f"{path}: an integer expected")
        if not kind.low <= value <= kind.high:
            raise FrameError(f"{path}: {value} is outside [{kind.low}, {kind.high}]")
        if kind.voter and value not in voters:
            raise FrameError(f"{path}: {value} is not a voter")
    elif isinstance(kind, Number):
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise FrameError(f"{path}: a number expected")
        if not kind.low <= value <= kind.high:  # NaN fails this too
            raise FrameError(f"{path}: {value} is outside [{kind.low}, {kind.high}]")
    elif isinstance(kind, OrNull):
        if value is not None:
            _check_value(kind.item, value, voters, path)
    elif isinstance(kind, Text):
        _check_text(value, kind.chars_max, path)
    elif isinstance(kind, Boolean):
        if not isinstance(value, bool):
            raise FrameError(f"{path}: a boolean expected")
    elif isinstance(kind, Hex):
        if not isinstance(value, str) or len(value) % 2 or not _HEX.fullmatch(value):
            raise FrameError(f"{path}: lowercase hex expected")
    elif isinstance(kind, ListOf):
        _check_length(value, kind.items_max, path)
        for number, item in enumerate(value):
            _check_value(kind.item, item, voters, f"{path}[{number}]")
    elif isinstance(kind, Tuple):
        if not isinstance(value, list) or len(value) != len(kind.items):
            raise FrameError(f"{path}: a list of {len(kind.items)} items expected")
        for number, (item_kind, item) in enumerate(zip(kind.items, value, strict=True)):
            _check_value(item_kind, item, voters, f"{path}[{number}]")
    elif isinstance(kind, TextMap):
        if not isinstance(value, dict) or len(value) > kind.items_max:
            raise FrameError(f"{path}: an object of at most {kind.items_max} strings expected")
        for key, item in value.items():
            _check_text(key, TEXT_CHARS_MAX, f"{path} key")
            _check_text(item, TEXT_CHARS_MAX, f"{path}[{key!r}]")
    elif isinstance(kind, Body):
        if not isinstance(value, dict):
            raise FrameError(f"{path}: an object expected")
    else:
        check(kind.fields, value, voters=voters, where=path)


def _check_text(value: Any, chars_max: int, path: str) -> None:
    if not isinstance(value, str):
        raise FrameError(f"{path}: a string expected")
    if len(value) > chars_max:
        raise FrameError(f"{path}: {len(value)} characters (at most {chars_max})")


def _check_length(value: Any, items_max: int, path: str) -> None:
    if not isinstance(value, list):
        raise FrameError(f"{path}: a list expected")
    if len(value) > items_max:
        raise FrameError(f"{path}: {len(value)} items (at most {items_max})")


def check_kind(tables: Mapping[str, Table], kind: Any, document: Any, **options: Any) -> Table:
    """The table of message kind ``kind``, once ``document`` is checked against it."""
    table = tables.get(kind) if isinstance(kind, str) else None
    if table is None:
        raise FrameError(f"an unknown message kind {str(kind)[:80]!r}")
    check(table, document, **options)
    return table


# ---------------------------------------------------------------- frames


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
        found.append(parse(payload))
    return found


def parse(payload: bytes) -> dict[str, Any]:
    """The JSON object ``payload`` holds; raises FrameError for anything else."""
    try:
        document = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"a frame that is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise FrameError("a frame that is not a JSON object")
    return document
