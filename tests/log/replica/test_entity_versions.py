"""The entity-version rules of a partition, against a sequential model of the log."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventplatform.log.replica.entity_versions import (
    EXPECTED_VERSION_HEADER,
    Condition,
    Conflict,
    VersionHeaderError,
    batch_conditions,
    conditions_of,
    first_conflict,
    parse_expected_version,
)
from eventplatform.log.storage.compression import Compression
from eventplatform.log.storage.record_batch import Record, decode_batch, encode_batch


class Versions(Counter[bytes]):
    """Versions as a plain count of keys: what the table keeps, without the disk."""

    def check(self, conditions: list[Condition]) -> Conflict | None:
        return first_conflict(conditions, self.__getitem__)

    def apply(self, keys: Iterable[bytes | None]) -> None:
        self.update(key for key in keys if key is not None)


def test_an_entity_that_must_not_exist_yet_is_created_once() -> None:
    versions = Versions()
    opening = [Condition(b"account-1", 0)]
    assert versions.check(opening) is None
    versions.apply([b"account-1"])
    assert versions.check(opening) == Conflict(0, b"account-1", 0, 1)


def test_records_ahead_in_the_batch_count() -> None:
    versions = Versions()
    assert versions.check([Condition(b"a", 0), Condition(b"a", 1), Condition(b"b", 0)]) is None
    assert versions.check([Condition(b"a", 0), Condition(b"a", 0)]) == Conflict(1, b"a", 0, 1)
    assert versions.check([Condition(b"a"), Condition(b"a", 1)]) is None


def test_only_conditional_records_ask_for_a_version() -> None:
    asked: list[bytes] = []

    def version(key: bytes) -> int:
        asked.append(key)
        return 0

    assert first_conflict([Condition(b"a"), Condition(b"b", 0), Condition(b"a")], version) is None
    assert asked == [b"b"]


def test_a_keyless_record_cannot_expect_a_version() -> None:
    conflict = Versions().check([Condition(b"a", 0), Condition(None, 0)])
    assert conflict == Conflict(1, None, 0, 0)
    assert "no key" in conflict.message


def test_the_conflict_names_the_entity_and_both_versions() -> None:
    message = Conflict(3, b"account-7", 4, 6).message
    assert "record 3" in message and "'account-7'" in message
    assert "version 6" in message and "expected 4" in message
    assert Conflict(0, b"\xff\x00", 1, 0).message.count("ff00") == 1


@pytest.mark.parametrize(
    ("text", "version"), [(b"0", 0), (b"7", 7), (b"123456789012345678", 123456789012345678)]
)
def test_a_version_is_ascii_decimal(text: bytes, version: int) -> None:
    assert parse_expected_version(text) == version


@pytest.mark.parametrize(
    "text", [None, b"", b"-1", b"+1", b" 1", b"1 ", b"01", b"1.0", b"0x1", b"\xd9\xa1", b"1" * 19]
)
def test_anything_else_is_refused(text: bytes | None) -> None:
    with pytest.raises(VersionHeaderError, match=EXPECTED_VERSION_HEADER):
        parse_expected_version(text)


def test_conditions_come_from_the_records_headers() -> None:
    records = [
        Record(0, 0, b"a", b"v", ((EXPECTED_VERSION_HEADER, b"0"), ("other", b"x"))),
        Record(1, 0, b"a", b"v", ()),
        Record(2, 0, None, b"v", (("other", None),)),
    ]
    assert conditions_of(records) == [Condition(b"a", 0), Condition(b"a"), Condition(None)]


def test_a_malformed_or_repeated_header_names_its_record() -> None:
    bad = Record(1, 0, b"a", b"v", ((EXPECTED_VERSION_HEADER, b"x"),))
    twice = Record(1, 0, b"a", b"v", ((EXPECTED_VERSION_HEADER, b"1"),) * 2)
    with pytest.raises(VersionHeaderError, match="record 1"):
        conditions_of([Record(0, 0, b"a", b"v"), bad])
    with pytest.raises(VersionHeaderError, match="two"):
        conditions_of([Record(0, 0, b"a", b"v"), twice])


# ---------------------------------------------------------------- reading a batch

HEADER_VALUES = st.one_of(
    st.none(), st.binary(max_size=4), st.integers(0, 10**6).map(lambda n: str(n).encode())
)
RECORDS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=70)),
        st.one_of(st.none(), st.binary(max_size=300)),
        st.lists(
            st.tuples(st.sampled_from(["trace", "type", EXPECTED_VERSION_HEADER]), HEADER_VALUES),
            max_size=3,
        ),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(records=RECORDS, compression=st.sampled_from(list(Compression)))
def test_reading_a_batch_finds_what_decoding_it_finds(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    compression: Compression,
) -> None:
    batch = encode_batch(
        [
            Record(index, 1_000, key, value, tuple(headers))
            for index, (key, value, headers) in enumerate(records)
        ],
        compression=compression,
    )
    decoded = decode_batch(batch).records
    try:
        expected: list[Condition] | str = conditions_of(decoded)
    except VersionHeaderError as exc:
        expected = f"{exc.record}: {exc}"
    try:
        found: list[Condition] | str = batch_conditions(batch)
    except VersionHeaderError as exc:
        found = f"{exc.record}: {exc}"
    assert found == expected
