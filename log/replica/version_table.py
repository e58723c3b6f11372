"""The entity versions of one partition, kept on disk with a bounded part in memory.

A partition of a topic with ``eventplatform.entity.versions.enable=true`` knows, for every
key, how many records with that key its log holds (see
:mod:`~eventplatform.log.replica.entity_versions` for the rule they enforce). An event
topic may hold millions of entities, most of them not touched for months, so the table
keeps only three bounded things in memory:

- the **deltas**: the records counted since the table was last written, key by key, at
  most ``DELTA_KEYS_MAX`` keys. Counting a record never reads anything: a follower
  counts what it replicates at the speed it appends;
- the **stored** versions of the entities looked up lately, at most
  ``STORED_KEYS_MAX`` of them; the oldest quarter goes when it is full;
- SQLite's page cache, ``PAGE_CACHE_KIB``.

Everything else is in ``entity-versions.db`` in the partition directory: a SQLite table
of ``(key, version)`` and the offset it counts the log up to, written in one transaction
(:meth:`VersionTable.write`) when the deltas are full, at each segment roll and at a
clean close. A version is its stored value plus its delta.

Only the log needs to be durable. At open the table counts the records after its offset
(:func:`~eventplatform.log.replica.entity_log.load_entities`); a database that cannot be
read, or whose offset lies outside the log, is emptied and counted again from the log
start. A truncation (:meth:`VersionTable.take_back`) takes back the records it removes
*before* the log forgets them, so it costs what it removes; if the process dies between
the two, the offset already stands at the truncation point and the open counts the rest
again.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from eventplatform.log.invariants import require
from eventplatform.log.replica.entity_versions import Condition, Conflict, first_conflict

DATABASE_FILE = "entity-versions.db"
DATABASE_FILES = (DATABASE_FILE, DATABASE_FILE + "-wal", DATABASE_FILE + "-shm")
"""The database and the files SQLite may keep beside it."""
DELTA_KEYS_MAX = 8_192
"""Keys counted in memory before the table is written (about 1 MB)."""
STORED_KEYS_MAX = 32_768
"""Stored versions kept in memory for the entities looked up lately (about 4 MB)."""
PAGE_CACHE_KIB = 2_048
"""SQLite's page cache for the table."""
FORMAT = 1
_DAMAGED = (11, 26)
"""SQLITE_CORRUPT and SQLITE_NOTADB: the file is no database of this table's, and the
table is counted again from the log."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS versions "
    "(key BLOB PRIMARY KEY, version INTEGER NOT NULL CHECK (version > 0)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS state (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)
_ADD = (
    "INSERT INTO versions (key, version) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET version = version + excluded.version"
)


class VersionTableError(OSError):
    """The table's database failed to read or write: a storage error of the partition."""


class VersionTable:
    """See the module docstring. Open with :meth:`open`; count every appended batch
    (:meth:`apply`), in offset order; take back truncated records (:meth:`take_back`)."""

    def __init__(
        self,
        path: Path,
        connection: sqlite3.Connection,
        offset: int,
        *,
        delta_keys_max: int = DELTA_KEYS_MAX,
        stored_keys_max: int = STORED_KEYS_MAX,
    ) -> None:
        self.path = path
        self.delta_keys_max = delta_keys_max
        self.stored_keys_max = stored_keys_max
        self._db = connection
        self.stored_offset = offset
        """The offset the database counts the log up to."""
        self.end = offset
        """The offset the table counts the log up to: the database plus the deltas."""
        self._deltas: dict[bytes, int] = {}
        self._stored: dict[bytes, int] = {}

    # ------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        partition_directory: Path,
        *,
        delta_keys_max: int = DELTA_KEYS_MAX,
        stored_keys_max: int = STORED_KEYS_MAX,
    ) -> VersionTable:
        """The table of ``partition_directory``, as last written; an empty one at offset
        -1 (which no log holds) when there was none or SQLite finds it damaged. Any other
        failure (a failing disk, say) is a VersionTableError."""
        path = partition_directory / DATABASE_FILE
        try:
            try:
                connection, offset = _connect(path)
            except sqlite3.DatabaseError as exc:
                if exc.sqlite_errorcode & 0xFF not in _DAMAGED:
                    raise
                remove_table_files(partition_directory)
                connection, offset = _connect(path)
        except sqlite3.Error as exc:
            raise VersionTableError(f"{path}: {exc}") from exc
        return cls(
            path,
            connection,
            offset,
            delta_keys_max=delta_keys_max,
            stored_keys_max=stored_keys_max,
        )

    # ------------------------------------------------------------ read

    def version(self, key: bytes) -> int:
        """How many records with ``key`` the log holds (0: none)."""
        return self._stored_version(key) + self._deltas.get(key, 0)

    def check(self, conditions: Sequence[Condition]) -> Conflict | None:
        """The first record of a batch whose expectation fails, or None when the whole
        batch may be appended."""
        return first_conflict(conditions, self.version)

    def items(self) -> Iterator[tuple[bytes, int]]:
        """Every key the log holds and its version; reads the whole database."""
        versions = dict(self._query("SELECT key, version FROM versions"))
        for key, delta in self._deltas.items():
            versions[key] = versions.get(key, 0) + delta
        return ((key, version) for key, version in versions.items() if version)

    def _stored_version(self, key: bytes) -> int:
        stored = self._stored.get(key)
        if stored is None:
            rows = self._query("SELECT version FROM versions WHERE key = ?", (key,))
            stored = int(rows[0][0]) if rows else 0
            if len(self._stored) >= self.stored_keys_max:
                for old in list(islice(self._stored, max(1, self.stored_keys_max // 4))):
                    del self._stored[old]
            self._stored[key] = stored
        return stored

    @property
    def memory_keys(self) -> int:
        """Keys held in memory, deltas and stored versions."""
        return len(self._deltas) + len(self._stored)

    # ------------------------------------------------------------ update

    def apply(self, keys: Iterable[bytes | None], next_offset: int) -> None:
        """Count the records of a batch appended up to ``next_offset``, by key; write the
        table when the deltas are full (raises VersionTableError when that fails)."""
        require(next_offset >= self.end, "entity versions count batches forwards")
        deltas = self._deltas
        for key in keys:
            if key is not None:
                deltas[key] = deltas.get(key, 0) + 1
        self.end = next_offset
        if len(deltas) >= self.delta_keys_max:
            self.write()

    def write(self) -> None:
        """Add the deltas to the database, with the offset they count to, in one
        transaction."""
        if not self._deltas and self.stored_offset == self.end:
            return
        self._transaction(
            [(_ADD, sorted(self._deltas.items()))],  # in key order: each page once
            self.end,
        )
        stored = self._stored
        for key, delta in self._deltas.items():
            if key in stored:
                stored[key] += delta
        self._deltas.clear()

    def take_back(self, batches: Iterable[tuple[int, Sequence[bytes | None]]], offset: int) -> None:
        """Uncount the records at ``offset`` and after, before the log drops them:
        ``batches`` are ``(base offset, keys)`` of every batch from ``offset`` to the end
        the table counts."""
        if offset >= self.end:
            return
        removed: Counter[bytes] = Counter()
        for base_offset, keys in batches:
            if base_offset >= offset:
                removed.update(key for key in keys if key is not None)
        deltas = self._deltas
        if offset >= self.stored_offset:  # the deltas count [stored, end): take from them
            for key, count in removed.items():
                left = deltas.get(key, 0) - count
                require(left >= 0, "a truncation takes back records the table counted")
                if left:
                    deltas[key] = left
                else:
                    del deltas[key]
        else:  # every delta is taken back, and from the database what lies below
            for key, count in deltas.items():
                removed[key] -= count
            deltas.clear()
            self._subtract(+removed, offset)
        self.end = offset

    def _subtract(self, removed: Counter[bytes], offset: int) -> None:
        """Take ``removed`` from the database, which then counts to ``offset``."""
        updates: list[tuple[int, bytes]] = []
        deletions: list[tuple[bytes]] = []
        for key, count in removed.items():
            left = self._stored_version(key) - count
            require(left >= 0, "a truncation takes back records the table counted")
            if left:
                updates.append((left, key))
            else:
                deletions.append((key,))
            self._stored[key] = left
        self._transaction(
            [
                ("UPDATE versions SET version = ? WHERE key = ?", updates),
                ("DELETE FROM versions WHERE key = ?", deletions),
            ],
            offset,
        )

    def reset(self, offset: int) -> None:
        """Forget every version: the table counts an empty log from ``offset``."""
        self._deltas.clear()
        self._stored.clear()
        self._transaction([("DELETE FROM versions", None)], offset)
        self.end = offset

    def _transaction(
        self, statements: list[tuple[str, Sequence[Sequence[object]] | None]], offset: int
    ) -> None:
        db = self._db
        try:
            db.execute("BEGIN")
            try:
                for sql, rows in statements:
                    if rows is None:
                        db.execute(sql)
                    elif rows:
                        db.executemany(sql, rows)
                db.execute("UPDATE state SET value = ? WHERE name = 'offset'", (offset,))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise VersionTableError(f"{self.path}: {exc}") from exc
        self.stored_offset = offset

    def _query(self, sql: str, parameters: tuple[object, ...] = ()) -> list[Any]:
        try:
            return self._db.execute(sql, parameters).fetchall()
        except sqlite3.Error as exc:
            raise VersionTableError(f"{self.path}: {exc}") from exc

    def close(self) -> None:
        """Close the database; the deltas are dropped, as a kill would drop them (the next
        open counts their records again). :meth:`write` first to keep them."""
        self._deltas.clear()
        self._stored.clear()
        self._db.close()


def _connect(path: Path) -> tuple[sqlite3.Connection, int]:
    """Open (or create) the database; its offset, -1 when it is new."""
    # no busy wait: only the process that owns the partition directory opens its table
    connection = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    try:
        # one process owns the partition directory: no shared-memory index, no locking
        # per transaction; commits are atomic, and synced at checkpoints
        connection.execute("PRAGMA locking_mode = EXCLUSIVE")
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
        for statement in _SCHEMA:
            connection.execute(statement)
        found = dict(connection.execute("SELECT name, value FROM state").fetchall())
        if found.get("format", FORMAT) != FORMAT or "offset" not in found:
            connection.execute("DELETE FROM versions")
            connection.execute("DELETE FROM state")
            connection.executemany(
                "INSERT INTO state (name, value) VALUES (?, ?)",
                [("format", FORMAT), ("offset", -1)],
            )
            found = {"offset": -1}
        return connection, int(found["offset"])
    except BaseException:
        connection.close()
        raise


def remove_table_files(partition_directory: Path) -> None:
    """Remove the database and its companions, when there are any."""
    for name in DATABASE_FILES:
        (partition_directory / name).unlink(missing_ok=True)
