"""The corrected history of a projection's events, as a store transaction sees it.

A correction names the event it corrects (its root); what the root holds
now is its latest correction's outcome, recorded in ``ep_corrected_events``
(:meth:`CorrectedHistory.record_corrections`), or the root itself when none
is. :class:`CorrectedHistory` reads and writes that record inside one
:class:`~.store.StoreTransaction`, and rebuilds the rows of tables whose
merges are not invertible from it:

* :meth:`~CorrectedHistory.read_envelopes` reads events back from the log
  (through the transaction's cached reader), and what is left of erased ones;
* :meth:`~CorrectedHistory.contents` and
  :meth:`~CorrectedHistory.current_contributions` give each event's content
  and contributions now, corrections applied;
* :meth:`~CorrectedHistory.amend_rows` amends rows for events whose
  contributions changed, :meth:`~CorrectedHistory.recompute` rebuilds the
  rows that cannot be amended from the events indexed for them, and
  :meth:`~CorrectedHistory.move_index` moves corrected events' index entries.

An erased record read back from the log holds nothing: a correction's stand-in
root takes its place (:mod:`eventplatform.events.erasure`), and in a row's
recomputation it contributes what its recorded correction says, else nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, delete, update

from eventplatform.events import Correction, Envelope, Event, Position
from eventplatform.events.codec import envelope_of, parse
from eventplatform.events.corrections import ReplacementEvent
from eventplatform.events.erasure import ErasedRecord, is_stand_in
from eventplatform.projections import schema
from eventplatform.projections.amending import FILL_EVENTS, RowSearch
from eventplatform.projections.fold import (
    NotAmendableError,
    OpaqueEvent,
    VacantColumnsError,
    amend,
    apply,
    replacement_content,
)
from eventplatform.projections.merge import Latest
from eventplatform.projections.model import Contribution, TablePlan
from eventplatform.projections.premerge import pack_ranks, unpack_ranks
from eventplatform.projections.statements import (
    KEYS_PER_STATEMENT,
    corrected_rows_query,
    integers_param,
    parked_query,
    upsert_insert,
)

if TYPE_CHECKING:
    from eventplatform.projections.store import StoreTransaction

TopicPartition = tuple[str, int]
RowRef = tuple[str, tuple[Any, ...]]
"""A row of a projection table: the table's name and the row's key."""

OPAQUE = OpaqueEvent()
ERASED_EVENT_ID = ""
"""The event id of a corrected-events row recorded for an erased record: it has none."""
_NO_ID = uuid.UUID(int=0)
"""The id of a stand-in root no correction named (it holds nothing)."""


class CorrectedHistory:
    """The corrected history of the projection's events in ``transaction``; see the module."""

    def __init__(self, transaction: StoreTransaction) -> None:
        self.transaction = transaction
        self.store = transaction.store
        self.projection = transaction.projection

    def prefetch(self, positions: Sequence[Position]) -> None:
        """Read the records at ``positions`` now, in one pass; later reads find them."""
        self.transaction.reader(positions)

    def read_envelopes(
        self, positions: Sequence[Position]
    ) -> dict[Position, Envelope[Any] | ErasedRecord]:
        """The raw (uncorrected) events at ``positions``, read back from the log, and what
        is left of the erased records there."""
        values = self.transaction.reader(positions)
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
            for offset in self.transaction.connection.execute(query, parameters).scalars()
        }

    def _corrected_rows(self, positions: Sequence[Position]) -> dict[Position, Any]:
        query = corrected_rows_query(self.store.postgresql)
        found: dict[Position, Any] = {}
        for topic, partition, parameters in self._offset_chunks(positions):
            for row in self.transaction.connection.execute(query, parameters).mappings():
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
        self.transaction.lock(plan)
        positions = self._indexed_positions(plan, wanted)
        current = self.current_contributions(positions)
        tables: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {plan.name: {}}
        for position in sorted(current, key=self.projection.rank):
            apply(tables, [c for c in current[position] if c.plan is plan and c.key in wanted])
        stored = self.transaction.read_rows(plan, list(wanted))
        states: dict[tuple[Any, ...], dict[str, Any] | None] = {
            key: tables[plan.name].get(key) for key in wanted
        }
        self.transaction.write_rows(plan, stored, states)

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
        for row_hash, _, packed in self.transaction.index_rows(scope, sorted(set(hashes.values()))):
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
        for _, _, packed in self.transaction.index_rows(self.store.scopes[plan.name], hashes):
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
            for row_hash, chunk, packed in self.transaction.index_rows(scope, sorted(by_hash)):
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
                self.transaction.connection.execute(statement, updates)
            if deletes:
                self.transaction.connection.execute(delete(table).where(where), deletes)
        if added:
            self.transaction.append_index(added, batch=False)

    def amend_rows(
        self,
        plan: TablePlan,
        rows: dict[tuple[Any, ...], list[tuple[list[Contribution], list[Contribution]]]],
    ) -> set[tuple[Any, ...]]:
        """Amend rows of a non-invertible table for events whose contributions changed:
        per row key, each event's ``(removed, added)`` contributions in log order. Returns
        the keys that cannot be amended exactly (see :func:`~.fold.amend`): recompute them.
        """
        self.transaction.lock(plan)
        keys = list(rows)
        stored = self.transaction.read_rows(plan, keys)
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
        self.transaction.write_rows(plan, {k: v for k, v in stored.items() if k in states}, states)
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
        self.store.record_correction.execute(self.transaction, rows)

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
        self.transaction.connection.execute(statement.on_conflict_do_nothing(), rows)


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
