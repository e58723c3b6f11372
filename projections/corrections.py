"""Applying a run of corrections inside a batch's transaction.

A correction names an event by id and position. Each one's chain is walked
back to its root (the first, non-correction event), reading each link from
the log (or from what the runner saw lately) and checking that the id at the
named position is the one the correction names and that it sits earlier in
the same partition. A correction that fails a check, or whose replacement a
handler rejects, is poison: it changes nothing and the caller parks it or
stops.

The corrections of a run are applied as one, in log order:

1. each root's previous content is the outcome of the latest correction
   before it (in this run, or recorded), or the root itself (nothing, if the
   root was parked as poison and never corrected); its new content is the
   correction's replacement (nothing if it retracts);
2. every root's last new content is recorded, so later recomputations see it;
3. the event index moves each root from the rows it had before the run to
   the rows it has after it;
4. invertible tables get the negated previous contributions and the new
   ones, pre-merged into one upsert per table;
5. rows of the other tables are amended from their stored state where that
   is exact (:func:`~.fold.amend`), and otherwise recomputed, once each, from
   the events indexed for them.

The result equals a fold of the corrected history, whatever was applied
before, and the same corrections applied one at a time.

Erased links. A link read from the log may be a record the log erased. It holds
nothing: the chain ends there, at a stand-in root for the erased record
(:meth:`~eventplatform.events.ErasedRecord.stand_in`, with the id the correction
names, which can no longer be checked), as a rebuild from the log, which never
folds the erased record, sees it. A retraction of it changes nothing, and a
replacement of it contributes the replacement. What the stand-in held before the
run is what the projection recorded:

* the outcome of its latest correction, or nothing if the projection met the
  record already erased (:meth:`~.history_store.CorrectedHistory.record_erased`) or
  parked it as poison: exact;
* nothing recorded means the projection applied the record before it was
  erased, and no correction of it since (the platform appends the retraction
  and waits for the runners to apply it before it erases, so only a runner that
  lagged behind meets this). Unless the runner still remembers the record's
  value (:class:`~.caches.RecentValues`, which then reads as the event itself),
  its contribution cannot be read back and so cannot be taken out of the tables.
  The correction is then poison (:class:`ErasedOriginalError`), parked or
  stopped at as the projection says, rather than leaving tables that no fold of
  the log gives without a word: a rebuild from the log (``platform replay``)
  computes them without the erased record.

A row recomputed from its events leaves out an erased record no correction
replaced: it contributes nothing, as in a rebuild.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eventplatform.events import Correction, Envelope, EventError, Position
from eventplatform.events.erasure import ErasedRecord, is_stand_in
from eventplatform.projections.errors import HandlerError
from eventplatform.projections.fold import link_problem as link_problem
from eventplatform.projections.fold import replacement_event
from eventplatform.projections.model import Contribution, TablePlan
from eventplatform.projections.store import StoreTransaction

CHAIN_LENGTH_MAX = 10_000
RowRef = tuple[str, tuple[Any, ...]]


class InvalidCorrectionError(HandlerError):
    """A correction names an event that is not where it says, or not before it."""


class ErasedOriginalError(HandlerError):
    """A correction reaches a record the log erased after the projection applied it,
    uncorrected: what the record contributed cannot be read back to be taken out."""


_UNKNOWN: Any = object()
"""The content before the run of a stand-in root whose record may have been applied."""


def apply_correction(transaction: StoreTransaction, correction: Envelope[Correction]) -> None:
    """Apply ``correction`` in ``transaction`` (raises HandlerError for a poison correction)."""
    failed = apply_corrections(transaction, [correction])
    if failed:
        raise failed[0]


def apply_corrections(
    transaction: StoreTransaction,
    corrections: Sequence[Envelope[Correction]],
    *,
    stop_at_poison: bool = False,
) -> dict[int, HandlerError | EventError]:
    """Apply ``corrections`` (in log order) in ``transaction``; the poison ones, by index.

    A poison correction changes nothing; the others apply as if it were not
    there. With ``stop_at_poison`` nothing is applied once a correction is
    poison (the caller applies the ones before it again, and stops). Errors
    the writes meet propagate, as every store error does.
    """
    failed: dict[int, HandlerError | EventError] = {}
    roots: dict[int, Envelope[Any]] = {}
    for index, correction in enumerate(corrections):
        try:
            roots[index] = find_root(transaction, correction)
        except (HandlerError, EventError) as exc:
            failed[index] = exc
            if stop_at_poison:
                return failed
    run = _Run(transaction)
    run.load({root.position: root for root in roots.values() if root.position is not None})
    for index, root in roots.items():
        try:
            run.correct(root, corrections[index])
        except (HandlerError, EventError) as exc:
            failed[index] = exc
            if stop_at_poison:
                return failed
    run.write()
    return failed


@dataclass
class _Change:
    """What a run does to one root: its rows before and after, and the last correction."""

    root: Envelope[Any]
    correction: Envelope[Correction]
    rows_before: set[RowRef]
    rows_after: set[RowRef] = field(default_factory=set)


class _Run:
    """The corrections of a run, worked out in memory, then written together."""

    def __init__(self, transaction: StoreTransaction) -> None:
        self.transaction = transaction
        self.projection = transaction.projection
        self.content: dict[Position, Any] = {}
        self.changes: dict[Position, _Change] = {}
        self.inverted: dict[str, list[tuple[Contribution, int]]] = defaultdict(list)
        self.amended: dict[RowRef, list[tuple[list[Contribution], list[Contribution]]]] = (
            defaultdict(list)
        )

    def load(self, roots: dict[Position, Envelope[Any]]) -> None:
        """Each root's content before the run, read in one pass."""
        corrected, recorded = self.transaction.history.contents(list(roots.values()))
        parked = self.transaction.history.parked_positions([p for p in roots if p not in recorded])
        for position, root in roots.items():
            if position in parked:
                self.content[position] = None
            elif is_stand_in(root) and position not in recorded:
                self.content[position] = _UNKNOWN
            else:
                self.content[position] = corrected[position]

    def correct(self, root: Envelope[Any], correction: Envelope[Correction]) -> None:
        """Work out one correction (raises HandlerError or EventError, changing nothing)."""
        assert root.position is not None
        previous = self.content[root.position]
        if previous is _UNKNOWN:
            raise ErasedOriginalError(
                f"{_at(correction)}: names {root.position}, which the log erased after "
                f"{self.projection.name} applied it, uncorrected: what it contributed cannot "
                "be read back to be taken out; rebuild the projection from the log "
                "(platform replay) to leave it out"
            )
        new = replacement_event(correction.event, self.transaction.store.catalog)
        removed = self.transaction.history.contributions_of(root, previous)
        added = self.transaction.history.contributions_of(root, new)
        self.content[root.position] = new
        change = self.changes.get(root.position)
        if change is None:
            change = self.changes[root.position] = _Change(root, correction, _rows(removed))
        change.correction, change.rows_after = correction, _rows(added)
        by_row: dict[RowRef, tuple[list[Contribution], list[Contribution]]] = {}
        for sign, contributions in ((-1, removed), (1, added)):
            for contribution in contributions:
                plan = contribution.plan
                if plan.invertible:
                    self.inverted[plan.name].append((contribution, sign))
                else:
                    pair = by_row.setdefault((plan.name, contribution.key), ([], []))
                    pair[0 if sign < 0 else 1].append(contribution)
        for row, pair in by_row.items():
            self.amended[row].append(pair)

    def write(self) -> None:
        if not self.changes:
            return
        transaction = self.transaction
        changes = sorted(self.changes.values(), key=lambda c: self.projection.rank(_at(c.root)))
        history = transaction.history
        history.record_corrections([(change.root, change.correction) for change in changes])
        history.move_index(
            [
                (self.projection.rank(_at(c.root)), c.rows_before, c.rows_after)
                for c in changes
                if c.rows_before != c.rows_after
            ]
        )
        plans = self.projection.plans
        for name, signed in sorted(self.inverted.items()):
            transaction.merge_signed(plans[name], signed)
        by_table: dict[str, dict[tuple[Any, ...], list[Any]]] = defaultdict(dict)
        for (name, key), pairs in self.amended.items():
            by_table[name][key] = pairs
        for name, rows in sorted(by_table.items()):
            plan: TablePlan = plans[name]
            stale = history.amend_rows(plan, rows)
            history.recompute(plan, stale)


def _rows(contributions: Sequence[Contribution]) -> set[RowRef]:
    return {(c.plan.name, c.key) for c in contributions if c.plan.indexed}


def find_root(transaction: StoreTransaction, correction: Envelope[Correction]) -> Envelope[Any]:
    """The first event of the correction's chain, read back from the log; or the stand-in
    root of the first link the log erased."""
    current: Envelope[Any] = correction
    for _ in range(CHAIN_LENGTH_MAX):
        if not isinstance(current.event, Correction):
            return current
        target = current.event.of
        position = target.position
        here = _at(current)
        problem = link_problem(here, position)
        if problem is not None:
            raise InvalidCorrectionError(f"{here}: names {position}, {problem}")
        found = transaction.history.read_envelopes([position]).get(position)
        if isinstance(found, ErasedRecord):
            return found.stand_in(target.event_id)
        if found is None or found.event_id != target.event_id:
            raise InvalidCorrectionError(
                f"{here}: names event {target.event_id} at {position}, which holds "
                f"{'nothing' if found is None else found.event_id}"
            )
        current = found
    raise InvalidCorrectionError(f"{_at(correction)}: the chain is longer than {CHAIN_LENGTH_MAX}")


def _at(envelope: Envelope[Any]) -> Position:
    assert envelope.position is not None, "a correction's chain is read from the log"
    return envelope.position
