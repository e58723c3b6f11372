"""Entity versions of one partition: for every record key, how many records with that key
the partition's log holds, and the check of conditional appends against them.

A topic with ``eventplatform.entity.versions.enable=true`` keeps them. A record whose
header ``eventplatform.expected.version`` holds an ASCII decimal ``n`` is appended only
if its key has exactly ``n`` records before it, counting the records ahead of it in the
same batch (``0``: the entity must not exist yet). Otherwise the whole batch is refused,
and :class:`Conflict` names the record, the key, the expected version and the current
one; nothing of the batch is appended. A record without the header appends
unconditionally, and counts. A record without a key belongs to no entity: it cannot be
conditional, and it is not counted.

The module is pure. The partition turns a batch's records into :class:`Condition`\\ s
(:func:`batch_conditions`) and asks :func:`first_conflict` before it appends, with the
versions of its :class:`~eventplatform.log.replica.version_table.VersionTable`, which
counts every batch appended, the leader's and the ones a follower replicates: so a new
leader enforces the versions from its first request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from eventplatform.log.extensions import EXPECTED_VERSION_HEADER
from eventplatform.log.storage.errors import CorruptRecordError
from eventplatform.log.storage.record_batch import (
    Record,
    keyed_records,
    named_headers,
    skip_value,
)

EXPECTED_VERSION_DIGITS_MAX = 18
"""An expected version has at most 18 decimal digits: it stays below 2**63."""


class VersionHeaderError(ValueError):
    """A record's ``eventplatform.expected.version`` header is not a version; ``record``
    is the record's number in its batch (0 first)."""

    def __init__(self, message: str, record: int = 0) -> None:
        super().__init__(message)
        self.record = record


class Condition(NamedTuple):
    """One record as the check sees it: its key, and the version it expects its key to
    have before it (None: it appends whatever the version)."""

    key: bytes | None
    expected: int | None = None


class Conflict(NamedTuple):
    """Why a batch is refused: its record number ``record`` (0 first) expected ``key`` at
    ``expected``, and the key is at ``current`` (counting the records ahead of it in the
    batch)."""

    record: int
    key: bytes | None
    expected: int
    current: int

    @property
    def message(self) -> str:
        if self.key is None:
            return (
                f"record {self.record} expects version {self.expected} but has no key: "
                "only a keyed record belongs to an entity"
            )
        return (
            f"record {self.record}: entity {_shown(self.key)} is at version {self.current}, "
            f"not the expected {self.expected}"
        )


def parse_expected_version(value: bytes | None) -> int:
    """The version an ``eventplatform.expected.version`` header value expects: ASCII
    decimal digits, 0 or more, with no sign, space or leading zero."""
    if value is None or not value or len(value) > EXPECTED_VERSION_DIGITS_MAX:
        raise VersionHeaderError(
            f"{EXPECTED_VERSION_HEADER} must be 1 to {EXPECTED_VERSION_DIGITS_MAX} ASCII digits"
        )
    if not value.isdigit() or not value.isascii() or (value[:1] == b"0" and len(value) > 1):
        raise VersionHeaderError(
            f"{EXPECTED_VERSION_HEADER} must be a decimal number such as 0 or 12, "
            f"not {value[:EXPECTED_VERSION_DIGITS_MAX]!r}"
        )
    return int(value)


def conditions_of(records: Iterable[Record]) -> list[Condition]:
    """Each record's key and expected version, in batch order; raises VersionHeaderError
    (with the record's index) for a header that is not a version or given twice."""
    found = []
    for index, record in enumerate(records):
        expected = None
        for name, value in record.headers:
            if name != EXPECTED_VERSION_HEADER:
                continue
            if expected is not None:
                message = f"record {index} has two {EXPECTED_VERSION_HEADER} headers"
                raise VersionHeaderError(message, index)
            try:
                expected = parse_expected_version(value)
            except VersionHeaderError as exc:
                raise VersionHeaderError(f"record {index}: {exc}", index) from None
        found.append(Condition(record.key, expected))
    return found


_HEADER_NAME = EXPECTED_VERSION_HEADER.encode()


def batch_conditions(buffer: bytes | bytearray | memoryview) -> list[Condition]:
    """:func:`conditions_of` for the one record batch in ``buffer``, reading only each
    record's key and headers: values are skipped, not copied. Raises VersionHeaderError
    as :func:`conditions_of` does, CorruptRecordError for records that do not frame."""
    found: list[Condition] = []
    for index, _, key, body, at, record_end in keyed_records(buffer, 0):
        values = named_headers(body, skip_value(body, at, record_end), record_end, _HEADER_NAME)
        expected = None
        if values:  # in the order conditions_of judges them: the first, then a second
            try:
                expected = parse_expected_version(values[0])
            except VersionHeaderError as exc:
                raise VersionHeaderError(f"record {index}: {exc}", index) from None
            if len(values) > 1:
                message = f"record {index} has two {EXPECTED_VERSION_HEADER} headers"
                raise VersionHeaderError(message, index)
        found.append(Condition(key, expected))
    return found


def record_keys(buffer: bytes | bytearray | memoryview, position: int = 0) -> list[bytes | None]:
    """The keys of the records of the batch at ``position`` of ``buffer``, in order, read
    up to each key only; none for a batch whose records cannot be read. Only a batch
    appended before its topic kept versions can be such a batch (a versioned partition
    reads every batch before it appends it): it counts for no entity, on every replica
    alike."""
    try:
        return [key for _, _, key, _, _, _ in keyed_records(buffer, position)]
    except CorruptRecordError:
        return []


def first_conflict(
    conditions: Sequence[Condition], version: Callable[[bytes], int]
) -> Conflict | None:
    """The first record of a batch whose expectation fails, given the ``version`` of each
    key before the batch; None when the whole batch may be appended. Only a conditional
    record asks for its key's version."""
    ahead: dict[bytes, int] = {}
    for index, (key, expected) in enumerate(conditions):
        if key is None:
            if expected is not None:
                return Conflict(index, None, expected, 0)
            continue
        count = ahead.get(key, 0)
        ahead[key] = count + 1
        if expected is not None:
            current = version(key) + count
            if expected != current:
                return Conflict(index, key, expected, current)
    return None


def _shown(key: bytes) -> str:
    """A key for an error message: its text when printable, else hex; at most 100."""
    text = key.decode("utf-8", "replace")
    if text.isprintable() and "\ufffd" not in text:
        return repr(text[:100])
    return key[:50].hex()
