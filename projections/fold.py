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

from collections.abc import Iterable
from typing import Any

from eventplatform.events.history import corrected_history as corrected_history
from eventplatform.events.history import replacement_content as replacement_content
from eventplatform.events.history import replacement_event as replacement_event
from eventplatform.events.model import Envelope, Event, Position
from eventplatform.projections.merge import Ranked, SetAdd
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


def fold(projection: Projection, envelopes: Iterable[Envelope[Any]]) -> dict[str, TableStates]:
    """The projection's tables computed in memory from a history (corrections applied)."""
    tables: dict[str, TableStates] = {name: {} for name in projection.plans}
    for envelope in corrected_history(envelopes, projection.catalog()):
        assert envelope.position is not None, "a folded event needs its log position"
        apply(tables, projection.contributions(envelope, projection.rank(envelope.position)))
    return tables
