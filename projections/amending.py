"""How a correction amends a stored row of a non-invertible table without folding all
its events again (:func:`~.fold.amend` does the arithmetic): the forms in which the
store gives back ``Min``/``Max`` values, and the search of a row's nearest events for
the ``Latest``/``First`` values a removed contribution left vacant."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import types as sqltypes

from eventplatform.events import Position
from eventplatform.projections.fold import UNKNOWN, StoredForm
from eventplatform.projections.merge import Max, Min
from eventplatform.projections.model import RANK_SUFFIX, Contribution, TablePlan

FILL_EVENTS = 4
"""Events a search for a row's vacant Latest/First value reads at a time."""


def stored_forms(plan: TablePlan, postgresql: bool) -> dict[str, StoredForm]:
    """For each ``Min``/``Max`` column whose type the store knows to give back exactly
    what it was given (integers, strings, times), the value as it reads it back."""
    forms: dict[str, StoredForm] = {}
    for name, merge in plan.merges.items():
        if not isinstance(merge, Min | Max):
            continue
        type_ = plan.table.c[name].type
        if isinstance(type_, sqltypes.Integer):
            forms[name] = _exactly(int)
        elif isinstance(type_, sqltypes.String) and not isinstance(type_, sqltypes.Enum):
            forms[name] = _exactly(str)
        elif isinstance(type_, sqltypes.DateTime) and not postgresql:
            forms[name] = _wall_clock  # SQLite keeps a time's wall clock, not its offset
        elif isinstance(type_, sqltypes.DateTime) and type_.timezone:
            forms[name] = _instant
    return forms


def _exactly(kind: type) -> StoredForm:
    def form(value: Any) -> Any:
        return value if type(value) is kind else UNKNOWN

    return form


def _wall_clock(value: Any) -> Any:
    return value.replace(tzinfo=None) if type(value) is datetime else UNKNOWN


def _instant(value: Any) -> Any:
    return value if type(value) is datetime and value.tzinfo is not None else UNKNOWN


class RowSearch:
    """One row's search for vacant ranked columns: its ranks in the order to look."""

    def __init__(
        self, key: tuple[Any, ...], state: dict[str, Any], columns: set[str], ranks: list[int]
    ) -> None:
        self.key = key
        self.state = state
        self.columns = columns
        self.ranks = ranks
        self.looked = 0

    def next_ranks(self, count: int) -> list[int]:
        return self.ranks[self.looked : self.looked + count]

    def take(
        self,
        plan: TablePlan,
        current: dict[Position, list[Contribution]],
        looked: dict[int, Position],
    ) -> bool:
        """Fill what the next ranks' events give; whether the search is over."""
        for rank in self.next_ranks(FILL_EVENTS):
            self.looked += 1
            for contribution in current.get(looked[rank], ()):
                if contribution.plan is not plan or contribution.key != self.key:
                    continue
                for name in [n for n in self.columns if n in contribution.values]:
                    self.state[name] = contribution.values[name]
                    self.state[name + RANK_SUFFIX] = contribution.rank
                    self.columns.discard(name)
            if not self.columns:
                return True
        if self.looked < len(self.ranks):
            return False
        for name in self.columns:  # no event gives it any more
            self.state[name] = plan.merges[name].initial
            self.state[name + RANK_SUFFIX] = None
        return True
