"""The version table against a model log: counting, writing, truncating, reopening after a
clean close or a kill, with bounds small enough that every path runs."""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from eventplatform.log.replica.entity_versions import Condition, Conflict
from eventplatform.log.replica.version_table import (
    DATABASE_FILE,
    VersionTable,
    VersionTableError,
)

Batch = list[bytes | None]


def test_versions_are_the_stored_count_plus_the_deltas(tmp_path: Path) -> None:
    table = VersionTable.open(tmp_path, delta_keys_max=4)
    assert table.end == -1, "a new table counts nothing yet"
    table.reset(0)
    table.apply([b"a", b"a", None, b"b"], 4)
    assert (table.version(b"a"), table.version(b"b"), table.version(b"c")) == (2, 1, 0)
    table.apply([b"c", b"d"], 6)  # four keys: the deltas are written
    assert table.stored_offset == 6
    assert table.memory_keys == 3, "no deltas; the stored versions of a, b and c, looked up"
    assert table.check([Condition(b"a", 2), Condition(b"a", 3)]) is None
    assert table.check([Condition(b"d", 0)]) == Conflict(0, b"d", 0, 1)
    table.write()
    table.close()
    reopened = VersionTable.open(tmp_path)
    assert reopened.end == 6
    assert dict(reopened.items()) == {b"a": 2, b"b": 1, b"c": 1, b"d": 1}
    reopened.close()


def written_table(directory: Path) -> VersionTable:
    """A table that has written one count of ``a``, as of offset 1."""
    table = VersionTable.open(directory)
    table.reset(0)
    table.apply([b"a"], 1)
    table.write()
    return table


def test_only_a_written_count_survives_a_close(tmp_path: Path) -> None:
    table = written_table(tmp_path)
    table.apply([b"a", b"b"], 3)
    table.close()  # as a kill: the deltas are gone, the offset says so
    reopened = VersionTable.open(tmp_path)
    assert reopened.end == 1 and dict(reopened.items()) == {b"a": 1}
    reopened.close()


def test_a_database_that_is_not_one_is_counted_again(tmp_path: Path) -> None:
    written_table(tmp_path).close()
    (tmp_path / DATABASE_FILE).write_bytes(b"not a database, " * 512)
    reopened = VersionTable.open(tmp_path)
    assert reopened.end == -1 and dict(reopened.items()) == {}
    reopened.close()


def test_a_database_another_process_holds_is_an_error_and_stays(tmp_path: Path) -> None:
    holder = written_table(tmp_path)  # the exclusive lock is held from the first write on
    with pytest.raises(VersionTableError, match="locked"):
        VersionTable.open(tmp_path)
    assert dict(holder.items()) == {b"a": 1}, "not taken for damage and removed"
    holder.close()
    reopened = VersionTable.open(tmp_path)
    assert reopened.end == 1
    reopened.close()


def test_a_failing_database_is_a_storage_error(tmp_path: Path) -> None:
    directory = tmp_path / "partition"
    directory.mkdir()
    table = VersionTable.open(directory)
    table.reset(0)
    table._db.close()  # the database fails under the table
    table.apply([b"a"], 1)
    with pytest.raises(VersionTableError):
        table.write()
    with pytest.raises(VersionTableError):
        table.version(b"b")
    assert isinstance(VersionTableError("x"), OSError), "the partition takes its log offline"


def test_a_truncation_takes_back_from_the_deltas_and_the_database(tmp_path: Path) -> None:
    log: list[Batch] = [[b"a", b"b"], [b"a"], [b"c"], [b"a", b"a"]]
    table = VersionTable.open(tmp_path)
    table.reset(0)
    offset = 0
    for number, keys in enumerate(log):
        offset += len(keys)
        table.apply(keys, offset)
        if number == 1:
            table.write()  # the database counts [0, 3)
    assert table.stored_offset == 3
    table.take_back([(3, [b"c"]), (4, [b"a", b"a"])], 4)  # within the deltas
    assert (table.end, table.stored_offset, table.version(b"a"), table.version(b"c")) == (
        4,
        3,
        2,
        1,
    )
    table.take_back([(2, [b"a"]), (3, [b"c"])], 2)  # below the database's offset
    assert table.end == table.stored_offset == 2
    assert dict(table.items()) == {b"a": 1, b"b": 1}
    table.close()
    reopened = VersionTable.open(tmp_path)
    assert reopened.end == 2 and dict(reopened.items()) == {b"a": 1, b"b": 1}
    reopened.close()


class AgainstTheLog(RuleBasedStateMachine):
    """A model log of batches of keys; the table counts it, writes, is truncated with it,
    and reopens after a close (with the deltas written or, as after a kill, not), then
    counts the log after its offset as the partition does. The invariant: every version
    is the number of the key's records in the log."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="version-table-"))
        self.log: list[tuple[int, Batch]] = []  # (base offset, keys)
        self.table = self.open()

    @property
    def end(self) -> int:
        return self.log[-1][0] + len(self.log[-1][1]) if self.log else 0

    def open(self) -> VersionTable:
        table = VersionTable.open(self.directory, delta_keys_max=3, stored_keys_max=2)
        if not 0 <= table.end <= self.end:
            table.reset(0)
        for base, keys in self.log:
            if base >= table.end:
                table.apply(keys, base + len(keys))
        return table

    @rule(keys=st.lists(st.sampled_from([b"a", b"b", b"c", b"d", b"e", None]), max_size=4))
    def append(self, keys: Batch) -> None:
        if not keys:
            return
        base = self.end
        self.log.append((base, keys))
        self.table.apply(keys, base + len(keys))

    @rule()
    def write(self) -> None:
        self.table.write()

    @precondition(lambda self: self.log)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        cut = data.draw(st.integers(0, len(self.log) - 1))
        offset = self.log[cut][0]
        self.table.take_back(self.log[cut:], offset)
        del self.log[cut:]
        assert self.table.end == offset

    @rule(written=st.booleans())
    def reopen(self, written: bool) -> None:
        if written:
            self.table.write()
        self.table.close()
        self.table = self.open()

    @invariant()
    def versions_count_the_log(self) -> None:
        counts = Counter(key for _, keys in self.log for key in keys if key is not None)
        for key in (b"a", b"b", b"c", b"d", b"e"):
            assert self.table.version(key) == counts[key]
        assert dict(self.table.items()) == counts
        assert self.table.end == self.end

    def teardown(self) -> None:
        self.table.close()
        shutil.rmtree(self.directory, ignore_errors=True)


TestAgainstTheLog = AgainstTheLog.TestCase
TestAgainstTheLog.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_memory_stays_bounded_whatever_the_number_of_entities(tmp_path: Path) -> None:
    table = VersionTable.open(tmp_path, delta_keys_max=1_000, stored_keys_max=500)
    table.reset(0)
    keys = [f"entity-{n}".encode() for n in range(20_000)]
    for start in range(0, len(keys), 100):
        table.apply(keys[start : start + 100], start + 100)
        assert table.memory_keys <= 1_000
    for key in keys[::7]:
        assert table.version(key) == 1
        assert table.memory_keys <= 1_000 + 500
    assert sum(1 for _ in table.items()) == 20_000
    table.close()
