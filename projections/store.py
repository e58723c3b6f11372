"""The SQL projection store: rows, checkpoints and corrections in one transaction.

A runner opens one :class:`StoreTransaction` per polled batch. In it the
store

1. moves each partition's checkpoint by compare-and-set: the stored next
   offset must still be the one the runner started from, or the whole batch
   is void (:class:`CheckpointConflictError`) because another member applied
   those events;
2. merges the batch's pre-merged deltas (:mod:`.premerge`): tables of only
   declarative merges through one :class:`~.statements.Upsert` each, an
   ``INSERT ... ON CONFLICT DO UPDATE`` whose ``SET`` clause is the merge;
   tables with ``SetAdd`` or ``Fold`` columns by reading the rows, merging
   in Python and writing them back;
3. records, for tables whose merges are not invertible, which event
   contributed to which row (``ep_event_index``);
4. applies corrections: invertible tables get the negated old contribution
   and the new one; the others have the affected rows amended, or recomputed
   from their events read back from the log, through the transaction's
   :class:`~.history_store.CorrectedHistory`;
5. parks poison events in ``ep_dead_letters``;
6. remembers the records the log had erased when the batch met them, as
   corrected events that hold nothing (see
   :meth:`~.history_store.CorrectedHistory.record_erased`).

On PostgreSQL the writes whose results are not needed at once wait in a
:class:`~.writes.WriteQueue` until the next read or the commit, and go as
one statement.

On PostgreSQL, rows merged in Python and rows recomputed are guarded by a
``SHARE ROW EXCLUSIVE`` table lock, so another runner cannot slip a
contribution between the read and the write. On SQLite every transaction
holds the database's write lock from its start (``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    delete,
    or_,
    select,
    update,
)

from eventplatform.events import Envelope, Position
from eventplatform.events.codec import parse
from eventplatform.projections import schema
from eventplatform.projections.amending import stored_forms
from eventplatform.projections.caches import CachedReader, EventReader, OriginalContributions
from eventplatform.projections.database import reading
from eventplatform.projections.errors import CheckpointConflictError
from eventplatform.projections.fold import empty_state, merge_into
from eventplatform.projections.history_store import CorrectedHistory
from eventplatform.projections.merge import SetAdd
from eventplatform.projections.model import (
    CONTRIBUTIONS_COLUMN,
    Contribution,
    Projection,
    TablePlan,
)
from eventplatform.projections.premerge import (
    BatchDelta,
    Premerger,
    RowHashes,
    pack_ranks,
    scope_of,
    unpack_ranks,
)
from eventplatform.projections.statements import (
    ADVANCE_PARTITIONS_PER_STATEMENT,
    KEYS_PER_STATEMENT,
    Upsert,
    advance_statement,
    check_all_moved,
    comparable_key,
    corrected_upsert_statement,
    driver_errors,
    index_append_statement,
    index_rows_query,
    integers_param,
    key_equals,
    key_match,
    key_params,
    update_params,
    upsert_insert,
    upsert_statement,
)
from eventplatform.projections.writes import WriteQueue

TopicPartition = tuple[str, int]


class ProjectionStore:
    """One projection's view of a SQL database."""

    def __init__(self, engine: Engine, projection: Projection) -> None:
        self.engine = engine
        self.projection = projection
        self.catalog = projection.decoding_catalog()
        self.postgresql = engine.dialect.name == "postgresql"
        self.premerger = Premerger(projection)
        self._upserts = {
            name: Upsert(plan.table, functools.partial(upsert_statement, plan), engine.dialect)
            for name, plan in projection.plans.items()
            if name in self.premerger.compiled
        }
        self.index_append = Upsert(
            schema.event_index, index_append_statement, engine.dialect, bind_processors=False
        )
        self.record_correction = Upsert(
            schema.corrected_events,
            corrected_upsert_statement,
            engine.dialect,
            bind_processors=False,
        )
        """Rows of ``ep_corrected_events`` in column order, the replacement as JSON text."""
        self.scopes = {name: scope_of(projection.name, name) for name in projection.plans}
        self.stored_forms = {
            name: stored_forms(plan, self.postgresql) for name, plan in projection.plans.items()
        }
        self.row_hashes = RowHashes()
        self.original_contributions = OriginalContributions()
        self.unsealed_ranks = 0
        """Ranks appended to open index entries since full ones were last sealed."""
        scopes = ", ".join(str(self.scopes[n]) for n, p in projection.plans.items() if p.indexed)
        # SQLite's planner would scan the scope's entries by primary key: name the index.
        indexed_by = "" if self.postgresql else " INDEXED BY ep_event_index_full"
        self.take_full_entries = (  # the scopes are integers the store computed
            f"DELETE FROM ep_event_index{indexed_by} "
            f"WHERE chunk = {schema.INDEX_OPEN_CHUNK} AND length(ranks) >= "
            f"{schema.INDEX_CHUNK_BYTES} AND scope IN ({scopes or 'NULL'}) "
            "RETURNING scope, row_hash, ranks"
        )
        """Full open index entries, taken (deleted and returned) to be sealed."""

    def checkpoints(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset to apply for each partition that has a checkpoint."""
        wanted = set(partitions)
        table = schema.checkpoints
        query = select(table.c.topic, table.c.partition, table.c.next_offset).where(
            table.c.projection == self.projection.name
        )
        with reading(self.engine) as connection:
            rows = connection.execute(query).all()
        return {(t, p): offset for t, p, offset in rows if (t, p) in wanted}

    @contextmanager
    def transaction(
        self, reader: EventReader, connection: Connection | None = None
    ) -> Iterator[StoreTransaction]:
        """A transaction on a connection from the engine's pool, or on ``connection``,
        one the caller keeps between transactions (a runner does: that saves a pool
        check-out per batch, and on PostgreSQL the round trip of its liveness ping)."""
        if connection is None:
            with self.engine.begin() as pooled, self.joined(pooled, reader) as transaction:
                yield transaction
        else:
            with connection.begin(), self.joined(connection, reader) as transaction:
                yield transaction

    @contextmanager
    def joined(self, connection: Connection, reader: EventReader) -> Iterator[StoreTransaction]:
        """The store's writes inside a transaction the caller began on ``connection``
        and ends; the writes still queued are sent when the block ends. Statements
        the caller runs on ``connection`` itself within the block may run before
        writes queued earlier: let the block end first."""
        transaction = StoreTransaction(self, connection, reader)
        try:
            yield transaction
            transaction.flush()
        except BaseException:
            transaction.forget_staging()
            raise

    def upsert(self, plan: TablePlan) -> Upsert:
        return self._upserts[plan.name]


INDEX_COPY_ROWS_MIN = 64
"""Index entries a PostgreSQL batch copies in; fewer go in with one ``INSERT``."""
INDEX_SEAL_EVERY_RANKS = 1024
"""Ranks appended to open index entries (SQLite) between two sealings of the full
ones; an open entry holds at most this many more ranks than a sealed one."""


class StoreTransaction:
    """The writes of one batch. Any exception rolls all of them back."""

    def __init__(self, store: ProjectionStore, connection: Connection, reader: EventReader):
        self.store = store
        self.projection = store.projection
        self._connection = connection
        self.reader: EventReader = CachedReader(reader)
        self._locked: set[str] = set()
        self._staged: set[str] = set()
        self._queued = WriteQueue()
        """PostgreSQL writes not sent yet, in order (see :meth:`queue`)."""
        self.history = CorrectedHistory(self)
        """The corrected history of the projection's events, read and recorded here."""

    @property
    def connection(self) -> Connection:
        """The transaction's connection, once the writes queued so far are sent: whatever
        runs on it sees them."""
        if self._queued:
            self.flush()
        return self._connection

    def queue(
        self,
        target: str,
        sql: str,
        parameters: Sequence[Any] = (),
        check: Callable[[list[Any]], None] | None = None,
    ) -> None:
        """Queue a PostgreSQL write (see :class:`~.writes.WriteQueue`)."""
        assert self.store.postgresql, "only PostgreSQL's writes are queued"
        self._queued.add(target, sql, parameters, check)

    def flush(self) -> None:
        """Run the queued writes, then their checks."""
        self._queued.flush(self._connection)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A savepoint around the block: an exception in it undoes the block's writes
        (those still queued are dropped) and propagates."""
        nested = self.connection.begin_nested()
        try:
            yield
        except BaseException:
            self._queued.clear()
            nested.rollback()
            raise
        nested.commit()

    def advance(self, moves: dict[TopicPartition, tuple[int | None, int]]) -> None:
        """Compare-and-set each partition's checkpoint from ``expected`` to ``next``: the
        ones that exist in one statement (a round trip, not one per partition)."""
        now = datetime.now(UTC)
        existing = []
        for (topic, partition), (expected, next_offset) in sorted(moves.items()):
            if expected is None:
                inserted = self._insert_checkpoint(topic, partition, next_offset, now)
                if not inserted:
                    raise CheckpointConflictError(f"{topic}/{partition}: checkpoint appeared")
            else:
                existing.append((topic, partition, expected, next_offset))
        for start in range(0, len(existing), ADVANCE_PARTITIONS_PER_STATEMENT):
            self._advance(existing[start : start + ADVANCE_PARTITIONS_PER_STATEMENT], now)

    def _advance(self, moves: list[tuple[str, int, int, int]], now: datetime) -> None:
        parameters: dict[str, Any] = {"p": self.projection.name, "now": now}
        for index, (topic, partition, expected, next_offset) in enumerate(moves):
            parameters[f"t{index}"] = topic
            parameters[f"n{index}"] = partition
            parameters[f"e{index}"] = expected
            parameters[f"x{index}"] = next_offset
        statement = advance_statement(len(moves), self.store.postgresql)
        values = statement.values(parameters)
        check = functools.partial(check_all_moved, moves)
        if self.store.postgresql:
            self.queue(schema.checkpoints.name, statement.sql, values, check)
        else:
            with driver_errors(self.connection, statement.sql):
                check(self.cursor().execute(statement.sql, values).fetchall())

    def _insert_checkpoint(self, topic: str, partition: int, offset: int, now: datetime) -> bool:
        table = schema.checkpoints
        statement = (
            upsert_insert(table, self.store.postgresql)
            .values(
                projection=self.projection.name,
                topic=topic,
                partition=partition,
                next_offset=offset,
                updated_at=now,
            )
            .on_conflict_do_nothing()
            .returning(table.c.next_offset)
        )
        return self.connection.execute(statement).first() is not None

    def apply(self, applied: Sequence[tuple[Envelope[Any], list[Contribution]]]) -> None:
        """Merge the contributions of events applied in log order, and index them."""
        delta = self.store.premerger.delta()
        for _, contributions in applied:
            for contribution in contributions:
                delta.tables[contribution.plan.name].add_contribution(contribution)
            delta.events += 1
        self.apply_delta(delta)

    def apply_delta(self, delta: BatchDelta) -> None:
        """Merge a pre-merged run of events into the stored rows, and index them."""
        for table in delta.tables.values():
            if table.compiled is not None and table.states:
                self.store.upsert(table.plan).execute(self, list(table.states.values()))
            elif table.contributions:
                self._merge_in_python(table.plan, table.contributions, sign=1)
        entries = [
            (self.store.scopes[name], key, ranks)
            for name, table in delta.tables.items()
            for key, ranks in table.index.items()
        ]
        if entries:
            self.append_index(entries)

    def merge_signed(self, plan: TablePlan, signed: Sequence[tuple[Contribution, int]]) -> None:
        """Merge contributions into an invertible table, each negated (-1) or not (1),
        pre-merged into one upsert; rows left with no contribution go."""
        deltas: dict[tuple[Any, ...], dict[str, Any]] = {}
        for contribution, sign in signed:
            state = deltas.get(contribution.key)
            if state is None:
                state = deltas[contribution.key] = empty_state(plan, contribution.key)
            merge_into(state, contribution, sign)
        if not deltas:
            return
        compiled = self.store.premerger.compiled[plan.name]
        rows = [compiled.state_row(state) for state in deltas.values()]
        self.store.upsert(plan).execute(self, rows)
        if any(sign < 0 for _, sign in signed):
            self._delete_empty(plan, deltas)

    def _merge_in_python(
        self, plan: TablePlan, contributions: list[Contribution], sign: int
    ) -> None:
        self.lock(plan)
        keys = list(dict.fromkeys(contribution.key for contribution in contributions))
        stored = self.read_rows(plan, keys)
        states = {key: dict(stored[key]) if key in stored else None for key in keys}
        for contribution in contributions:
            state = states[contribution.key]
            if state is None:
                state = states[contribution.key] = empty_state(plan, contribution.key)
            merge_into(state, contribution, sign)
        self.write_rows(plan, stored, states)

    def write_rows(
        self,
        plan: TablePlan,
        stored: dict[tuple[Any, ...], dict[str, Any]],
        states: dict[tuple[Any, ...], dict[str, Any] | None],
    ) -> None:
        table = plan.table
        gone = [key for key, state in states.items() if state is None or _empty(state)]
        if any(key in stored for key in gone):
            self.connection.execute(
                delete(table).where(key_match(plan)),
                [key_params(plan, key) for key in gone if key in stored],
            )
        changed = {key: state for key, state in states.items() if key not in gone and state}
        updates = [_stored_form(plan, s) for k, s in changed.items() if k in stored]
        inserts = [_stored_form(plan, s) for k, s in changed.items() if k not in stored]
        if updates:
            values: dict[str, Any] = {
                column.name: bindparam(f"v_{column.name}")
                for column in table.columns
                if column.name not in plan.keys
            }
            statement = update(table).where(key_match(plan)).values(values)
            self.connection.execute(statement, [update_params(plan, row) for row in updates])
        if inserts:
            self.connection.execute(table.insert(), inserts)

    def read_rows(
        self, plan: TablePlan, keys: Sequence[tuple[Any, ...]]
    ) -> dict[tuple[Any, ...], dict[str, Any]]:
        table = plan.table
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        asked = {comparable_key(key): key for key in keys}
        key_columns = [table.c[name] for name in plan.keys]
        for start in range(0, len(keys), KEYS_PER_STATEMENT):
            chunk = keys[start : start + KEYS_PER_STATEMENT]
            condition = or_(*(key_equals(key_columns, key) for key in chunk))
            for row in self.connection.execute(select(table).where(condition)).mappings():
                state = dict(row)
                for name, merge in plan.merges.items():
                    if isinstance(merge, SetAdd) and state[name] is not None:
                        state[name] = frozenset(state[name])
                found = plan.key_of(state)
                rows[asked.get(comparable_key(found), found)] = state
        return rows

    def _delete_empty(self, plan: TablePlan, deltas: dict[tuple[Any, ...], Any]) -> None:
        table = plan.table
        statement = delete(table).where(key_match(plan), table.c[CONTRIBUTIONS_COLUMN] <= 0)
        self.connection.execute(statement, [key_params(plan, key) for key in deltas])

    def lock(self, plan: TablePlan) -> None:
        if self.store.postgresql and plan.name not in self._locked:
            self.connection.exec_driver_sql(f'LOCK TABLE "{plan.name}" IN SHARE ROW EXCLUSIVE MODE')
            self._locked.add(plan.name)

    def append_index(
        self, entries: list[tuple[int, tuple[Any, ...], list[int]]], *, batch: bool = True
    ) -> None:
        """Add index entries: ``(scope, row key, ranks)`` of a batch (or of a correction).

        SQLite appends each key's ranks to its open entry and seals the full
        ones: an append rewrites one row in place, so pages fill and the
        table stays small (the full ones are sealed once INDEX_SEAL_EVERY_RANKS
        ranks were appended). PostgreSQL writes a batch's entries as new
        sealed ones (chunk = the key's first rank in the batch): an update
        there writes a new row version anyway, and ``COPY`` is its cheapest
        write for many rows. A correction's entries go through the append on
        both.
        """
        hashes = self.store.row_hashes([key for _, key, _ in entries])
        sealed = batch and self.store.postgresql
        copied = sealed and len(entries) >= INDEX_COPY_ROWS_MIN
        open_chunk = schema.INDEX_OPEN_CHUNK
        rows = [
            (scope, row_hash, ranks[0] if sealed else open_chunk, pack_ranks(ranks))
            for (scope, _, ranks), row_hash in zip(entries, hashes, strict=True)
        ]
        if len(set(zip([e[0] for e in entries], hashes, strict=True))) < len(rows):
            rows = _merge_shared_hashes(entries, hashes, sealed)
        if copied:
            sql = "COPY ep_event_index (scope, row_hash, chunk, ranks) FROM STDIN"
            with driver_errors(self.connection, sql), self.cursor().copy(sql) as copy:
                for row in rows:
                    copy.write_row(row)
            return
        self.store.index_append.execute(self, rows)
        if sealed:
            return
        self.store.unsealed_ranks += sum(len(ranks) for _, _, ranks in entries)
        if self.store.unsealed_ranks >= INDEX_SEAL_EVERY_RANKS:
            self._seal_full_entries()
            self.store.unsealed_ranks = 0

    def _seal_full_entries(self) -> None:
        """Move each open entry that is full to a sealed one under its smallest rank."""
        sealed = self.connection.exec_driver_sql(self.store.take_full_entries)
        rows: list[Sequence[Any]] = []
        for scope, row_hash, packed in sealed:
            ranks = unpack_ranks(packed)
            rows.append([scope, row_hash, min(ranks), bytes(packed)])
        if rows:
            self.store.index_append.execute(self, rows)

    def index_rows(self, scope: int, hashes: Sequence[int]) -> list[Any]:
        postgres = self.store.postgresql
        query = index_rows_query(postgres)
        found: list[Any] = []
        for start in range(0, len(hashes), KEYS_PER_STATEMENT):
            chunk = integers_param(hashes[start : start + KEYS_PER_STATEMENT], postgres)
            found.extend(self.connection.execute(query, {"scope": scope, "hashes": chunk}).all())
        return found

    def cursor(self) -> Any:
        """A driver cursor in the transaction (psycopg's or sqlite3's)."""
        return self.connection.connection.driver_connection.cursor()  # type: ignore[union-attr]

    def stage(self, name: str, ddl: str) -> None:
        """Create a session's staging table once; it is forgotten if the transaction fails."""
        info = self.connection.connection.info
        staged = info.setdefault("eventplatform.staged", set())
        if name not in staged:
            self.connection.exec_driver_sql(ddl)
            staged.add(name)
            self._staged.add(name)

    def forget_staging(self) -> None:
        """The transaction failed: tables it created for staging are gone with it."""
        staged = self.connection.connection.info.get("eventplatform.staged", set())
        staged.difference_update(self._staged)

    def park(
        self, position: Position, error: BaseException, value: bytes | None, event_type: str | None
    ) -> None:
        """Move a poison event to the dead-letter table."""
        event_id = _event_id_of(value)
        self.connection.execute(
            schema.dead_letters.insert().values(
                projection=self.projection.name,
                topic=position.topic,
                partition=position.partition,
                offset=position.offset,
                event_id=event_id,
                event_type=event_type,
                error=str(error),
                detail="".join(traceback.format_exception(error)),
                status=schema.DEAD_LETTER_PARKED,
                parked_at=datetime.now(UTC),
            )
        )

    def resolve(self, dead_letter_id: int) -> None:
        table = schema.dead_letters
        self.connection.execute(
            update(table)
            .where(table.c.id == dead_letter_id)
            .values(status=schema.DEAD_LETTER_RETRIED, retried_at=datetime.now(UTC))
        )


def _merge_shared_hashes(
    entries: list[tuple[int, tuple[Any, ...], list[int]]], hashes: list[int], sealed: bool
) -> list[tuple[int, int, int, bytes]]:
    """Index rows for entries some of whose keys share a hash: one row per (scope, hash)."""
    merged: dict[tuple[int, int], list[int]] = {}
    for (scope, _, ranks), row_hash in zip(entries, hashes, strict=True):
        merged.setdefault((scope, row_hash), []).extend(ranks)
    return [
        (scope, row_hash, min(ranks) if sealed else schema.INDEX_OPEN_CHUNK, pack_ranks(ranks))
        for (scope, row_hash), ranks in merged.items()
    ]


def _stored_form(plan: TablePlan, state: dict[str, Any]) -> dict[str, Any]:
    row = dict(state)
    for name, merge in plan.merges.items():
        if isinstance(merge, SetAdd) and row[name] is not None:
            row[name] = SetAdd.stored(row[name])
    return row


def _empty(state: dict[str, Any]) -> bool:
    contributions: int = state[CONTRIBUTIONS_COLUMN]
    return contributions <= 0


def _event_id_of(value: bytes | None) -> str | None:
    try:
        identifier = parse(value)["id"]
    except Exception:
        return None
    return identifier if isinstance(identifier, str) and len(identifier) <= 36 else None
