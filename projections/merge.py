"""How contributions to one column merge: the declarative merge operations.

A projection row is the merge of every contribution made to its key. Each
non-key column names one operation:

=============  ==========================================  ===========
operation      result                                      invertible
=============  ==========================================  ===========
``Sum()``      the sum of the values (``None`` counts 0)    yes
``Count()``    the number of contributions to the row       yes
``Min()``      the smallest value (``None`` ignored)        no
``Max()``      the largest value (``None`` ignored)         no
``Latest()``   the value with the highest log position      no
``First()``    the value with the lowest log position       no
``SetAdd()``   the set of all values (a sorted JSON list)   no
``Fold(f)``    ``f(current, value)`` per key, in log order  no
``Only()``     the one value every contribution gives       yes
=============  ==========================================  ===========

Every operation but ``Fold`` is associative and commutative, so the streaming
runner can pre-merge a batch and Spark can merge in any grouping, and both
give the same table. ``Fold`` is the escape hatch: it sees a key's
contributions in log order, which is defined only within one partition, so a
fold table must be keyed by something that lives in one partition (the
entity key).

Invertible operations let a correction retract a contribution by applying
its negation; the others make the runner recompute the affected rows from
their events, which needs an index of which event contributed to which row.
Sums are exact only on integers and ``Numeric`` columns.

``Only`` is for values that depend on the row's key alone, above all in
tables with one row per event (the key holds the event id or its log
position): a retraction then leaves the value right, or removes the row with
its last contribution, without recomputing anything, and a table of only
invertible columns needs no event index.

This module is pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

JSON_SCALARS = (str, int, float, bool)


class Merge:
    """One column's merge operation."""

    name: ClassVar[str] = "merge"
    invertible: ClassVar[bool] = False
    initial: Any = None
    """A new row's value before any contribution."""
    ranked: ClassVar[bool] = False
    merged_in_python: ClassVar[bool] = False

    def normalize(self, value: Any) -> Any:
        """A contribution's value as this operation merges it."""
        return value

    def combine(self, current: Any, incoming: Any) -> Any:
        """The merge of two normalized values (``current`` may be ``None``: no row yet)."""
        raise NotImplementedError

    def negate(self, value: Any) -> Any:
        raise TypeError(f"{self.name} is not invertible")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


class Sum(Merge):
    name = "sum"
    invertible = True
    initial = 0

    def normalize(self, value: Any) -> Any:
        return 0 if value is None else value

    def combine(self, current: Any, incoming: Any) -> Any:
        return incoming if current is None else current + incoming

    def negate(self, value: Any) -> Any:
        return -value


class Count(Merge):
    """Counts contributions; a row contribution never names a count column."""

    name = "count"
    invertible = True
    initial = 0

    def normalize(self, value: Any) -> Any:
        return 1 if value is None else value

    def combine(self, current: Any, incoming: Any) -> Any:
        return incoming if current is None else current + incoming

    def negate(self, value: Any) -> Any:
        return -value


class Min(Merge):
    name = "min"

    def combine(self, current: Any, incoming: Any) -> Any:
        if incoming is None:
            return current
        if current is None:
            return incoming
        return incoming if incoming < current else current


class Max(Merge):
    name = "max"

    def combine(self, current: Any, incoming: Any) -> Any:
        if incoming is None:
            return current
        if current is None:
            return incoming
        return incoming if incoming > current else current


class Only(Merge):
    """The value every contribution to the row gives: one that the key determines.

    Typically the row is one event's (its key holds the event id or log
    position). Retracting a contribution leaves the value as it was (a row
    left with no contribution goes); contributions that disagree overwrite
    each other, so they must not.
    """

    name = "only"
    invertible = True

    def combine(self, current: Any, incoming: Any) -> Any:
        return current if incoming is None else incoming

    def negate(self, value: Any) -> Any:
        return None


class Ranked(Merge):
    """An operation that keeps one contribution's value, chosen by its log rank."""

    ranked = True

    def wins(self, current_rank: int | None, incoming_rank: int) -> bool:
        raise NotImplementedError


class Latest(Ranked):
    """The value of the contribution with the highest log position (``None`` included)."""

    name = "latest"

    def wins(self, current_rank: int | None, incoming_rank: int) -> bool:
        return current_rank is None or incoming_rank > current_rank


class First(Ranked):
    """The value of the contribution with the lowest log position (``None`` included)."""

    name = "first"

    def wins(self, current_rank: int | None, incoming_rank: int) -> bool:
        return current_rank is None or incoming_rank < current_rank


class SetAdd(Merge):
    """The set of contributed values, stored as a sorted JSON list.

    A contribution is one JSON scalar, or a list, set or tuple of them.
    """

    name = "set_add"
    merged_in_python = True

    def normalize(self, value: Any) -> Any:
        items = value if isinstance(value, list | set | frozenset | tuple) else [value]
        for item in items:
            if item is not None and not isinstance(item, JSON_SCALARS):
                raise TypeError(f"set_add takes JSON scalars, not {type(item).__name__}")
        return frozenset(item for item in items if item is not None)

    def combine(self, current: Any, incoming: Any) -> Any:
        return incoming if current is None else frozenset(current) | incoming

    @staticmethod
    def stored(value: Iterable[Any] | None) -> list[Any]:
        """The JSON list a set is stored as: sorted by type, then value."""
        return sorted(value or (), key=lambda item: (type(item).__name__, item))


class Fold(Merge):
    """A custom per-key fold: ``function(current, value) -> new``, in log order.

    ``current`` is ``initial`` for a new row. The function must be pure: the
    runner re-runs it when a correction makes it recompute a row, and Spark
    runs it too.
    """

    name = "fold"
    merged_in_python = True

    def __init__(self, function: Callable[[Any, Any], Any], initial: Any = None) -> None:
        self.function = function
        self.initial = initial

    def combine(self, current: Any, incoming: Any) -> Any:
        return self.function(self.initial if current is None else current, incoming)

    def __repr__(self) -> str:
        return f"Fold({getattr(self.function, '__qualname__', self.function)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fold) and other.function is self.function

    def __hash__(self) -> int:
        return hash(self.function)
