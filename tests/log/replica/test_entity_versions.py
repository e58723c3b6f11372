"""The entity-version rules of a partition, against a sequential model of the log."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from eventplatform.log.replica.entity_versions import (
    EXPECTED_VERSION_HEADER,
    Condition,
    Conflict,
    EntityVersions,
    SnapshotError,
    VersionHeaderError,
    batch_conditions,
    conditions_of,
    decode_snapshot,
    encode_snapshot,
    parse_expected_version,
)
from eventplatform.log.storage.compression import Compression
from eventplatform.log.storage.record_batch import Record, decode_batch, encode_batch


def test_an_entity_that_must_not_exist_yet_is_created_once() -> None:
    versions = EntityVersions()
    opening = [Condition(b"account-1", 0)]
    assert versions.check(opening) is None
    versions.apply([b"account-1"])
    assert versions.check(opening) == Conflict(0, b"account-1", 0, 1)
    assert versions.version(b"account-1") == 1


def test_records_ahead_in_the_batch_count() -> None:
    versions = EntityVersions()
    assert versions.check([Condition(b"a", 0), Condition(b"a", 1), Condition(b"b", 0)]) is None
    assert versions.check([Condition(b"a", 0), Condition(b"a", 0)]) == Conflict(1, b"a", 0, 1)
    assert versions.check([Condition(b"a"), Condition(b"a", 1)]) is None


def test_unconditional_records_count_and_keyless_ones_do_not() -> None:
    versions = EntityVersions()
    versions.apply([b"a", None, b"a", None])
    assert versions.version(b"a") == 2
    assert len(versions) == 1
    assert versions.check([Condition(None)]) is None


def test_a_keyless_record_cannot_expect_a_version() -> None:
    conflict = EntityVersions().check([Condition(b"a", 0), Condition(None, 0)])
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


# ---------------------------------------------------------------- snapshots


def test_a_snapshot_round_trips() -> None:
    versions = EntityVersions()
    versions.apply([b"a", b"b", b"a", b"", bytes(range(256))])
    decoded, offset = decode_snapshot(encode_snapshot(versions, 42))
    assert (decoded, offset) == (versions, 42)
    assert decode_snapshot(encode_snapshot(EntityVersions(), 0)) == (EntityVersions(), 0)


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.binary(max_size=8), max_size=20),
    position=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
)
def test_a_damaged_snapshot_is_refused(keys: list[bytes], position: int, flip: int) -> None:
    versions = EntityVersions()
    versions.apply(keys)
    data = bytearray(encode_snapshot(versions, 9))
    torn = bytes(data[: position % len(data)])
    with pytest.raises(SnapshotError):
        decode_snapshot(torn)
    data[position % len(data)] ^= flip
    with pytest.raises(SnapshotError):
        decode_snapshot(bytes(data))


# ---------------------------------------------------------------- against a sequential model

KEYS = st.sampled_from([b"a", b"b", b"c", None])


class AgainstTheLog(RuleBasedStateMachine):
    """Batches of conditional and plain records, checked and applied, against the log
    itself as the model: a record's version is the number of its key's records before it."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[bytes | None] = []
        self.versions = EntityVersions()

    def model_accepts(self, batch: list[Condition]) -> int | None:
        """The index of the first record the model refuses, or None."""
        seen = list(self.log)
        for index, (key, expected) in enumerate(batch):
            if expected is not None and (key is None or seen.count(key) != expected):
                return index
            seen.append(key)
        return None

    @rule(
        batch=st.lists(
            st.tuples(KEYS, st.one_of(st.none(), st.integers(min_value=0, max_value=6))),
            min_size=1,
            max_size=5,
        )
    )
    def append(self, batch: list[tuple[bytes | None, int | None]]) -> None:
        conditions = [Condition(key, expected) for key, expected in batch]
        refused = self.model_accepts(conditions)
        conflict = self.versions.check(conditions)
        assert (conflict.record if conflict else None) == refused
        if conflict is None:
            self.versions.apply(key for key, _ in batch)
            self.log.extend(key for key, _ in batch)
        else:
            key = conflict.key
            ahead = [k for k, _ in batch[: conflict.record]]
            if key is not None:
                assert conflict.current == (self.log + ahead).count(key)

    @rule(key=KEYS)
    def append_at_the_current_version(self, key: bytes | None) -> None:
        if key is None:
            return
        condition = Condition(key, self.log.count(key))
        assert self.versions.check([condition]) is None
        self.versions.apply([key])
        self.log.append(key)

    @invariant()
    def versions_count_the_log(self) -> None:
        for key in (b"a", b"b", b"c"):
            assert self.versions.version(key) == self.log.count(key)

    @invariant()
    def a_snapshot_holds_the_same_state(self) -> None:
        assert decode_snapshot(encode_snapshot(self.versions, len(self.log))) == (
            self.versions,
            len(self.log),
        )


TestAgainstTheLog = AgainstTheLog.TestCase
TestAgainstTheLog.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)


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
