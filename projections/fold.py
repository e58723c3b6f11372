"""The pure fold: contributions into row states (corrections are applied to a history
by :mod:`eventplatform.events.history`, re-exported here).

A row state is a dict holding every column of a projection table: key
columns, merge columns, the ``<column>_ep_rank`` columns of ``Latest`` and
``First`` columns, and ``ep_contributions``. The streaming runner, the
correction path, Spark's per-key fold and the in-memory :func:`fold` all
merge through :func:`merge_into`, so every engine computes a row the same way.
Every engine also checks a correction's link by one rule, :func:`link_problem`.

Inside a state a ``SetAdd`` column is a ``frozenset``; stores convert it to a
sorted JSON list and back at their boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from eventplatform.events.erasure import ErasedRecord
from eventplatform.events.history import corrected_history as corrected_history
from eventplatform.events.history import replacement_content as replacement_content
from eventplatform.events.history import replacement_event as replacement_event
from eventplatform.events.model import Envelope, Event, Position
from eventplatform.projections.merge import Fold, Max, Min, Ranked, SetAdd
from eventplatform.projections.model import (
    CONTRIBUTIONS_COLUMN,
    RANK_SUFFIX,
    Contribution,
    Projection,
    TablePlan,
)

RowKey = tuple[Any, ...]


class OpaqueEvent(Event, type="eventplatform.opaque", version=1):
    """Stands in for an event of a type the reader has no class for."""

    def entity_key(self) -> str:
        return ""


TableStates = dict[RowKey, dict[str, Any]]


def empty_state(plan: TablePlan, key: RowKey) -> dict[str, Any]:
    state: dict[str, Any] = dict(zip(plan.keys, key, strict=True))
    for name, merge in plan.merges.items():
        state[name] = merge.initial
        if merge.ranked:
            state[name + RANK_SUFFIX] = None
    state[CONTRIBUTIONS_COLUMN] = 0
    return state


def merge_into(state: dict[str, Any], contribution: Contribution, sign: int = 1) -> None:
    """Merge one contribution into a row state (``sign=-1`` retracts an invertible one)."""
    merges = contribution.plan.merges
    for name, value in contribution.values.items():
        merge = merges[name]
        if isinstance(merge, Ranked):
            rank_column = name + RANK_SUFFIX
            if merge.wins(state[rank_column], contribution.rank):
                state[name] = value
                state[rank_column] = contribution.rank
        else:
            incoming = value if sign > 0 else merge.negate(value)
            state[name] = merge.combine(state[name], incoming)
    state[CONTRIBUTIONS_COLUMN] += sign


def merge_states(plan: TablePlan, stored: dict[str, Any], delta: dict[str, Any]) -> None:
    """Merge a pre-merged ``delta`` state into ``stored`` (not for ``Fold`` columns)."""
    for name, merge in plan.merges.items():
        if isinstance(merge, Ranked):
            rank_column = name + RANK_SUFFIX
            rank = delta[rank_column]
            if rank is not None and merge.wins(stored[rank_column], rank):
                stored[name] = delta[name]
                stored[rank_column] = rank
        elif delta[name] is not None:
            stored[name] = merge.combine(stored[name], delta[name])
    stored[CONTRIBUTIONS_COLUMN] += delta[CONTRIBUTIONS_COLUMN]


def apply(
    tables: dict[str, TableStates], contributions: Iterable[Contribution], sign: int = 1
) -> None:
    """Merge contributions into in-memory tables, dropping rows left with none."""
    for contribution in contributions:
        rows = tables.setdefault(contribution.plan.name, {})
        state = rows.get(contribution.key)
        if state is None:
            state = rows[contribution.key] = empty_state(contribution.plan, contribution.key)
        merge_into(state, contribution, sign)
        if state[CONTRIBUTIONS_COLUMN] == 0:
            del rows[contribution.key]


def visible(plan: TablePlan, state: dict[str, Any]) -> dict[str, Any]:
    """A state as an analyst sees the row: no bookkeeping, sets as sorted lists."""
    row = {name: state[name] for name in plan.keys}
    for name, merge in plan.merges.items():
        value = state[name]
        row[name] = SetAdd.stored(value) if isinstance(merge, SetAdd) else value
    return row


def link_problem(here: Position, target: Position) -> str | None:
    """Why a correction at ``here`` cannot name ``target``; None if it can.

    A correction amends an event earlier in its own partition: only there is
    the original's order against the correction fixed by the log.
    """
    if (target.topic, target.partition) != (here.topic, here.partition):
        return "in another partition"
    if target.offset >= here.offset:
        return "which is not earlier"
    return None


def fold(
    projection: Projection, envelopes: Iterable[Envelope[Any] | ErasedRecord]
) -> dict[str, TableStates]:
    """The projection's tables computed in memory from a history (corrections applied; the
    records the log erased, where they lie, hold nothing: see :func:`corrected_history`)."""
    tables: dict[str, TableStates] = {name: {} for name in projection.plans}
    for envelope in corrected_history(envelopes, projection.catalog()):
        assert envelope.position is not None, "a folded event needs its log position"
        apply(tables, projection.contributions(envelope, projection.rank(envelope.position)))
    return tables


class NotAmendableError(Exception):
    """A row cannot be amended from its stored state: recompute it from its events."""


class VacantColumnsError(NotAmendableError):
    """A row amended but for ``columns`` (``Latest``/``First``), whose values are to be
    found in its events."""

    def __init__(self, state: dict[str, Any], columns: AbstractSet[str]) -> None:
        super().__init__(f"{sorted(columns)}: the value held was removed")
        self.state = state
        self.columns = frozenset(columns)


StoredForm = Callable[[Any], Any]
"""A value as its column gives it back (``UNKNOWN`` if the store cannot say exactly)."""
UNKNOWN: Any = object()


def amend(
    state: dict[str, Any] | None,
    removed: Sequence[Contribution],
    added: Sequence[Contribution],
    stored_forms: Mapping[str, StoredForm],
    unknown: AbstractSet[str] = frozenset(),
) -> dict[str, Any] | None:
    """A row state after one event's contributions to it changed from ``removed`` to
    ``added``, worked out from the state alone; raises :class:`NotAmendableError` where that
    cannot be done and the row must be recomputed from its events. ``None`` means the
    row is gone.

    The state is a stored row (``None``: there is none), and is not modified. It
    can be amended where what was removed is known not to have decided a column:

    * invertible merges (sums, counts, ``Only``) take the negation;
    * ``Latest`` and ``First`` keep the rank of the value they hold: a removed
      contribution of another rank did not decide it. If it did, the event's new
      contribution at the same rank decides it again, if it gives the column;
    * ``Min`` and ``Max`` hold a value of one contribution: one whose value, as the
      column stores it (``stored_forms``), differs from the held one did not decide
      it. Ties, and values whose stored form is not known exactly, are recomputed;
    * ``SetAdd`` cannot tell whether another contribution gave the same value (or
      gave the column at all, when it holds the empty set), and a ``Fold`` depends
      on order: removing from them (but an empty set from values held), or adding
      to a fold, is recomputed.

    A row left with no contribution is gone whatever its columns held, and one that
    gets contributions after that holds only theirs.

    A ``Latest`` or ``First`` value removed with nothing of its rank to take its
    place raises :class:`VacantColumnsError`, carrying the state amended in every
    other column: the store finds the value in the row's events, nearest first.
    ``unknown`` names such columns of the state given, still to be found: changes
    to them are left to that search.
    """
    if state is not None:
        state = dict(state)
    elif removed:
        raise NotAmendableError("the row is not stored")
    doubt = ""
    vacant: set[str] = set()
    for contribution in removed:
        assert state is not None
        merges = contribution.plan.merges
        for name, value in contribution.values.items():
            merge = merges[name]
            if merge.invertible:
                state[name] = merge.combine(state[name], merge.negate(value))
            elif isinstance(merge, Ranked):
                if name not in unknown and state[name + RANK_SUFFIX] == contribution.rank:
                    vacant.add(name)
            elif isinstance(merge, Min | Max):
                if value is not None and not _decided_elsewhere(
                    value, state[name], stored_forms.get(name)
                ):
                    doubt = f"{name}: the removed value may be the one held"
            elif not (isinstance(merge, SetAdd) and not value and state[name]):
                doubt = f"{name}: {merge.name} cannot take a contribution back"
        state[CONTRIBUTIONS_COLUMN] -= 1
    if state is not None and state[CONTRIBUTIONS_COLUMN] <= 0:
        state, doubt, vacant = None, "", set()  # nothing is left of what was held
        unknown = frozenset()
    fresh = state is None
    for contribution in added:
        plan = contribution.plan
        if state is None:
            state = empty_state(plan, contribution.key)
        for name, value in contribution.values.items():
            merge = plan.merges[name]
            if isinstance(merge, Ranked):
                rank_column = name + RANK_SUFFIX
                if name in unknown:
                    continue  # the search sees this contribution too
                if name in vacant:
                    if state[rank_column] == contribution.rank:
                        vacant.discard(name)
                        state[name] = value
                elif merge.wins(state[rank_column], contribution.rank):
                    state[name] = value
                    state[rank_column] = contribution.rank
            elif isinstance(merge, Fold) and not fresh:
                doubt = f"{name}: a fold takes contributions in log order"
            else:
                state[name] = merge.combine(state[name], value)
        state[CONTRIBUTIONS_COLUMN] += 1
    if doubt:
        raise NotAmendableError(doubt)
    if vacant or unknown:
        assert state is not None
        raise VacantColumnsError(state, vacant | unknown)
    return state


def _decided_elsewhere(value: Any, held: Any, stored_form: StoredForm | None) -> bool:
    """Whether a removed ``Min``/``Max`` value certainly is not the one ``held``."""
    if stored_form is None or held is None:
        return False
    stored = stored_form(value)
    return stored is not UNKNOWN and stored != held
