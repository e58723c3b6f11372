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
   and the new one; the others have the affected rows recomputed from their
   events, read back from the log;
5. parks poison events in ``ep_dead_letters``;
6. remembers the records the log had erased when the batch met them, as
   corrected events that hold nothing (see :meth:`StoreTransaction.record_erased`).

An erased record read back from the log holds nothing: a correction's stand-in
root takes its place (:mod:`eventplatform.events.erasure`), and in a row's
recomputation it contributes what its recorded correction says, else nothing.

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
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    delete,
    or_,
    select,
    update,
)

from eventplatform.events import Correction, Envelope, Event, Position
from eventplatform.events.codec import envelope_of, parse
from eventplatform.events.corrections import ReplacementEvent
from eventplatform.events.erasure import ErasedRecord, is_stand_in
from eventplatform.projections import schema
from eventplatform.projections.amending import FILL_EVENTS, RowSearch, stored_forms
from eventplatform.projections.caches import CachedReader, EventReader, OriginalContributions
from eventplatform.projections.database import reading
from eventplatform.projections.errors import CheckpointConflictError
from eventplatform.projections.fold import (
    NotAmendableError,
    OpaqueEvent,
    VacantColumnsError,
    amend,
    apply,
    empty_state,
    merge_into,
    replacement_content,
)
from eventplatform.projections.merge import Latest, SetAdd
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
    Upsert,
    advance_statement,
    check_all_moved,
    comparable_key,
    corrected_rows_query,
    corrected_upsert_statement,
    driver_errors,
    index_append_statement,
    index_rows_query,
    integers_param,
    key_equals,
    key_match,
    key_params,
    parked_query,
    update_params,
    upsert_insert,
    upsert_statement,
)
from eventplatform.projections.writes import WriteQueue

TopicPartition = tuple[str, int]
RowRef = tuple[str, tuple[Any, ...]]
"""A row of a projection table: the table's name and the row's key."""

KEYS_PER_STATEMENT = 500
OPAQUE = OpaqueEvent()
ERASED_EVENT_ID = ""
"""The event id of a corrected-events row recorded for an erased record: it has none."""
_NO_ID = uuid.UUID(int=0)
"""The id of a stand-in root no correction named (it holds nothing)."""


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
            self._append_index(entries)

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
        self._lock(plan)
        keys = list(dict.fromkeys(contribution.key for contribution in contributions))
        stored = self._read_rows(plan, keys)
        states = {key: dict(stored[key]) if key in stored else None for key in keys}
        for contribution in contributions:
            state = states[contribution.key]
            if state is None:
                state = states[contribution.key] = empty_state(plan, contribution.key)
            merge_into(state, contribution, sign)
        self._write_rows(plan, stored, states)

    def _write_rows(
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

    def _read_rows(
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

    def _lock(self, plan: TablePlan) -> None:
        if self.store.postgresql and plan.name not in self._locked:
            self.connection.exec_driver_sql(f'LOCK TABLE "{plan.name}" IN SHARE ROW EXCLUSIVE MODE')
            self._locked.add(plan.name)

    def _append_index(
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

    def _index_rows(self, scope: int, hashes: Sequence[int]) -> list[Any]:
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

    # corrections ---------------------------------------------------------

    def prefetch(self, positions: Sequence[Position]) -> None:
        """Read the records at ``positions`` now, in one pass; later reads find them."""
        self.reader(positions)

    def read_envelopes(
        self, positions: Sequence[Position]
    ) -> dict[Position, Envelope[Any] | ErasedRecord]:
        """The raw (uncorrected) events at ``positions``, read back from the log, and what
        is left of the erased records there."""
        values = self.reader(positions)
        envelopes: dict[Position, Envelope[Any] | ErasedRecord] = {}
        for position in positions:
            value = values.get(position)
            if value is None:
                continue
            if isinstance(value, ErasedRecord):
                envelopes[position] = value
                continue
            raw = parse(value)
            if raw["type"] == Correction.event_type or raw["type"] in self.projection.handlers:
                envelopes[position] = self.store.catalog.decode(value, position)
            else:
                envelopes[position] = envelope_of(raw, OPAQUE, position)
        return envelopes

    def effective(self, roots: Sequence[Envelope[Any]]) -> dict[Position, Event | None]:
        """Each root's current content: its latest correction's outcome, or itself."""
        return self.contents(roots)[0]

    def contents(
        self, roots: Sequence[Envelope[Any]]
    ) -> tuple[dict[Position, Event | None], set[Position]]:
        """Each root's current content (see :meth:`effective`), and which roots have a
        correction recorded."""
        corrected = self._corrected_rows([root.position for root in roots if root.position])
        return self._contents(roots, corrected), set(corrected)

    def _contents(
        self, roots: Iterable[Envelope[Any]], corrected: dict[Position, Any]
    ) -> dict[Position, Event | None]:
        """Each root's current content, given the corrected-events rows of the roots."""
        result: dict[Position, Event | None] = {}
        for root in roots:
            assert root.position is not None
            row = corrected.get(root.position)
            if row is None:
                result[root.position] = None if is_stand_in(root) else root.event
            elif _retracted(row):
                result[root.position] = None
            else:
                replacement = ReplacementEvent.model_validate(row["replacement"])
                result[root.position] = replacement_content(replacement, self.store.catalog)
        return result

    def parked_positions(self, positions: Sequence[Position]) -> set[Position]:
        """Those of ``positions`` whose events are parked as poison."""
        query = parked_query(self.store.postgresql)
        return {
            Position(topic, partition, offset)
            for topic, partition, parameters in self._offset_chunks(positions)
            for offset in self.connection.execute(query, parameters).scalars()
        }

    def _corrected_rows(self, positions: Sequence[Position]) -> dict[Position, Any]:
        query = corrected_rows_query(self.store.postgresql)
        found: dict[Position, Any] = {}
        for topic, partition, parameters in self._offset_chunks(positions):
            for row in self.connection.execute(query, parameters).mappings():
                found[Position(topic, partition, row["offset"])] = row
        return found

    def _offset_chunks(
        self, positions: Sequence[Position]
    ) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """Per partition, its distinct offsets in order, KEYS_PER_STATEMENT at a time, as
        the parameters of a query of a range of a projection's offsets."""
        postgres = self.store.postgresql
        for (topic, partition), offsets in _by_partition(positions).items():
            for chunk in _sorted_chunks(offsets):
                parameters = {
                    "projection": self.projection.name,
                    "topic": topic,
                    "partition": partition,
                    "first": chunk[0],
                    "last": chunk[-1],
                    "offsets": integers_param(chunk, postgres),
                }
                yield topic, partition, parameters

    def contributions_of(self, root: Envelope[Any], content: Event | None) -> list[Contribution]:
        if content is None:
            return []
        assert root.position is not None
        envelope = Envelope.decoded(
            content,
            root.event_id,
            root.occurred_at,
            root.key,
            root.correlation_id,
            root.causation_id,
            root.position,
        )
        return self.projection.contributions(envelope, self.projection.rank(root.position))

    def recompute(self, plan: TablePlan, keys: Iterable[tuple[Any, ...]]) -> None:
        """Rebuild rows of a non-invertible table from the events indexed for them.

        An uncorrected event's contributions are those of its original, the same
        whenever they are computed (handlers are pure, records immutable): the
        store keeps them (:class:`OriginalContributions`), so rows recomputed again
        and again, as a bulk retraction does, read and decode each event once."""
        wanted = set(keys)
        if not wanted:
            return
        self._lock(plan)
        positions = self._indexed_positions(plan, wanted)
        current = self.current_contributions(positions)
        tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {plan.name: {}}
        for position in sorted(current, key=self.projection.rank):
            apply(tables, [c for c in current[position] if c.plan is plan and c.key in wanted])
        stored = self._read_rows(plan, list(wanted))
        states: dict[tuple[Any, ...], dict[str, Any] | None] = {
            key: tables[plan.name].get(key) for key in wanted
        }
        self._write_rows(plan, stored, states)

    def current_contributions(
        self, positions: Sequence[Position]
    ) -> dict[Position, list[Contribution]]:
        """The contributions each event at ``positions`` makes now (corrections applied);
        events the log no longer holds are left out.

        An uncorrected event's contributions are those of its original, the same
        whenever they are computed (handlers are pure, records immutable): the store
        keeps them (:class:`OriginalContributions`), so rows recomputed again and
        again, as in a bulk retraction, read and decode each event once."""
        corrected = self._corrected_rows(positions)
        originals = self.store.original_contributions
        found: dict[Position, list[Contribution]] = {}
        for position in positions:
            row = corrected.get(position)
            if row is None:
                kept = originals.get(position)
                if kept is not None:
                    found[position] = kept
            elif _retracted(row):
                found[position] = []  # a retracted event contributes nothing: no need to read it
        roots = self._current_roots(
            self.read_envelopes([p for p in positions if p not in found]), corrected
        )
        contents = self._contents(roots.values(), corrected)
        for position, root in roots.items():
            contributions = found[position] = self.contributions_of(root, contents[position])
            if position not in corrected and not is_stand_in(root):
                originals.put(position, contributions)
        return found

    @staticmethod
    def _current_roots(
        read: dict[Position, Envelope[Any] | ErasedRecord], corrected: dict[Position, Any]
    ) -> dict[Position, Envelope[Any]]:
        """The roots read back for a recomputation: an erased record stands in as the root
        its recorded correction names (as the root of nothing, when there is none)."""
        roots: dict[Position, Envelope[Any]] = {}
        for position, found in read.items():
            if isinstance(found, ErasedRecord):
                row = corrected.get(position)
                event_id = row["event_id"] if row is not None and row["event_id"] else None
                found = found.stand_in(uuid.UUID(event_id) if event_id else _NO_ID)
            roots[position] = found
        return roots

    def fill_vacant(
        self,
        plan: TablePlan,
        rows: dict[tuple[Any, ...], tuple[dict[str, Any], frozenset[str]]],
    ) -> dict[tuple[Any, ...], dict[str, Any]]:
        """Rows with ``Latest``/``First`` columns to find (see :func:`~.fold.amend`): each
        takes the value of the contribution of highest (``Latest``) or lowest (``First``)
        rank among the row's events, read nearest first, FILL_EVENTS per row at a time."""
        searches: list[RowSearch] = []
        hashes = dict(zip(rows, self.store.row_hashes(list(rows)), strict=True))
        ranks_of: dict[int, list[int]] = {}
        scope = self.store.scopes[plan.name]
        for row_hash, _, packed in self._index_rows(scope, sorted(set(hashes.values()))):
            ranks_of.setdefault(row_hash, []).extend(unpack_ranks(packed))
        filled: dict[tuple[Any, ...], dict[str, Any]] = {}
        for key, (state, columns) in rows.items():
            state = filled[key] = dict(state)
            ranks = sorted(set(ranks_of.get(hashes[key], ())))
            for latest in (True, False):
                wanted = {
                    name for name in columns if isinstance(plan.merges[name], Latest) == latest
                }
                if wanted:
                    order = ranks[::-1] if latest else ranks
                    searches.append(RowSearch(key, state, wanted, order))
        position_of = self.projection.position_of
        while searches:
            looked = {r: position_of(r) for s in searches for r in s.next_ranks(FILL_EVENTS)}
            current = self.current_contributions(sorted(set(looked.values())))
            searches = [search for search in searches if not search.take(plan, current, looked)]
        return filled

    def _indexed_positions(self, plan: TablePlan, keys: set[tuple[Any, ...]]) -> list[Position]:
        hashes = sorted(set(self.store.row_hashes(list(keys))))
        ranks: set[int] = set()
        for _, _, packed in self._index_rows(self.store.scopes[plan.name], hashes):
            ranks.update(unpack_ranks(packed))
        return sorted(self.projection.position_of(rank) for rank in ranks)

    def move_index(self, moves: Sequence[tuple[int, set[RowRef], set[RowRef]]]) -> None:
        """Move corrected events' index entries: ``(rank, rows before, rows after)`` each,
        a row named by table and key."""
        scopes = self.store.scopes
        dropped: dict[int, dict[int, set[int]]] = {}
        kept: list[tuple[int, tuple[Any, ...], int]] = []
        added: list[tuple[int, tuple[Any, ...], list[int]]] = []
        for rank, before, after in moves:
            for name, key in before - after:
                scope, (row_hash,) = scopes[name], self.store.row_hashes([key])
                dropped.setdefault(scope, {}).setdefault(row_hash, set()).add(rank)
            added.extend((scopes[name], key, [rank]) for name, key in after - before)
            kept.extend((scopes[name], key, rank) for name, key in after & before)
        # A row that keeps the event but shares a hash with one that lost it loses its
        # entry with it: it gets the entry again.
        for scope, key, rank in kept:
            (row_hash,) = self.store.row_hashes([key])
            if rank in dropped.get(scope, {}).get(row_hash, ()):
                added.append((scope, key, [rank]))
        table = schema.event_index
        where = and_(
            table.c.scope == bindparam("s"),
            table.c.row_hash == bindparam("h"),
            table.c.chunk == bindparam("c"),
        )
        for scope, by_hash in sorted(dropped.items()):
            updates: list[dict[str, Any]] = []
            deletes: list[dict[str, Any]] = []
            for row_hash, chunk, packed in self._index_rows(scope, sorted(by_hash)):
                ranks = unpack_ranks(packed)
                gone = by_hash[row_hash]
                left = [rank for rank in ranks if rank not in gone]
                if len(left) == len(ranks):
                    continue
                target = {"s": scope, "h": row_hash, "c": chunk}
                if left:
                    updates.append({**target, "r": pack_ranks(left)})
                else:
                    deletes.append(target)
            if updates:
                statement = update(table).where(where).values(ranks=bindparam("r"))
                self.connection.execute(statement, updates)
            if deletes:
                self.connection.execute(delete(table).where(where), deletes)
        if added:
            self._append_index(added, batch=False)

    def amend_rows(
        self,
        plan: TablePlan,
        rows: dict[tuple[Any, ...], list[tuple[list[Contribution], list[Contribution]]]],
    ) -> set[tuple[Any, ...]]:
        """Amend rows of a non-invertible table for events whose contributions changed:
        per row key, each event's ``(removed, added)`` contributions in log order. Returns
        the keys that cannot be amended exactly (see :func:`~.fold.amend`): recompute them.
        """
        self._lock(plan)
        keys = list(rows)
        stored = self._read_rows(plan, keys)
        forms = self.store.stored_forms[plan.name]
        states: dict[tuple[Any, ...], dict[str, Any] | None] = {}
        stale: set[tuple[Any, ...]] = set()
        vacant: dict[tuple[Any, ...], tuple[dict[str, Any], frozenset[str]]] = {}
        for key in keys:
            state = stored.get(key)
            unknown: frozenset[str] = frozenset()
            try:
                for removed, added in rows[key]:
                    try:
                        state = amend(state, removed, added, forms, unknown)
                        unknown = frozenset()
                    except VacantColumnsError as exc:
                        state, unknown = exc.state, exc.columns
            except (NotAmendableError, TypeError, ValueError, ArithmeticError):
                stale.add(key)  # or values the merge cannot compare: the events decide
                continue
            if unknown:
                assert state is not None
                vacant[key] = (state, unknown)
            else:
                states[key] = state
        if vacant:
            states.update(self.fill_vacant(plan, vacant))
        self._write_rows(plan, {k: v for k, v in stored.items() if k in states}, states)
        return stale

    def record_correction(self, root: Envelope[Any], correction: Envelope[Correction]) -> None:
        """Remember the root's new effective content (upsert by root position)."""
        self.record_corrections([(root, correction)])

    def record_corrections(
        self, corrected: Sequence[tuple[Envelope[Any], Envelope[Correction]]]
    ) -> None:
        """Remember each root's new effective content: its latest correction's outcome."""
        if not corrected:
            return
        name = self.projection.name
        rows = []
        for root, correction in corrected:
            assert root.position is not None and correction.position is not None
            payload = correction.event.replacement
            position = root.position
            replacement = None if payload is None else payload.model_dump_json()
            rows.append(
                [
                    name,
                    position.topic,
                    position.partition,
                    position.offset,
                    str(root.event_id),
                    correction.position.offset,
                    replacement,
                    payload is None,
                ]
            )
        self.store.record_correction.execute(self, rows)

    def record_erased(self, positions: Sequence[Position]) -> None:
        """Remember that the records at ``positions`` were erased when the projection met
        them, so contributed nothing: each becomes a corrected event that holds nothing
        (retracted, with no event id, set at its own offset), unless one is recorded.

        A correction that reaches such a record later then knows what it held
        before. Without this row, an erased root that has no correction recorded may
        have been applied before the erasure, and what it contributed cannot be read
        back (see :mod:`~eventplatform.projections.corrections`).
        """
        if not positions:
            return
        rows = [
            {
                "projection": self.projection.name,
                "topic": position.topic,
                "partition": position.partition,
                "offset": position.offset,
                "event_id": ERASED_EVENT_ID,
                "correction_offset": position.offset,
                "replacement": None,
                "retracted": True,
            }
            for position in positions
        ]
        statement = upsert_insert(schema.corrected_events, self.store.postgresql)
        self.connection.execute(statement.on_conflict_do_nothing(), rows)


def _retracted(corrected_row: Any) -> bool:
    """Whether a corrected-events row leaves its event with no content."""
    return bool(corrected_row["retracted"]) or corrected_row["replacement"] is None


def _sorted_chunks(offsets: Iterable[int]) -> Iterator[list[int]]:
    """The distinct offsets in order, KEYS_PER_STATEMENT at a time."""
    ordered = sorted(set(offsets))
    for start in range(0, len(ordered), KEYS_PER_STATEMENT):
        yield ordered[start : start + KEYS_PER_STATEMENT]


def _by_partition(positions: Iterable[Position]) -> dict[TopicPartition, list[int]]:
    offsets: dict[TopicPartition, list[int]] = {}
    for position in positions:
        offsets.setdefault((position.topic, position.partition), []).append(position.offset)
    return offsets


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
