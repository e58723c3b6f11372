"""Pre-merging a batch: the runner's hot path from handler rows to row deltas.

For each table a batch becomes one *delta* per row key: the merge of every
contribution the batch makes to that row, in the column order of the table.
The store then merges each delta into its stored row with one upsert, so a
batch of a thousand events costs one statement per table, whatever the
number of events.

Tables of declarative merges (sum, count, min, max, latest, first) get two
functions generated from their :class:`~.model.TablePlan` once:

* ``check(values)`` validates one ``Row``'s values (key given, only merge
  columns, values normalized) and returns ``(key, values in column order)``;
  it raises :class:`~.errors.HandlerError` and changes nothing;
* ``merge(states, key, values, rank)`` merges the checked values into the
  key's delta.

An event's rows are all checked before any is merged, so an event whose
handler yields a bad row leaves no trace in the batch. The generated merges
compute exactly what :func:`~.fold.merge_into` computes on row states, which
stays the reference (the fold, Spark and corrections use it). Tables with a
``SetAdd`` or ``Fold`` column keep their contributions in log order instead:
the store merges those against the stored rows.

For tables whose merges are not invertible the delta also lists, per row
key, the ranks of the events that contributed: the event index's new
entries.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from typing import Any

import orjson

from eventplatform.projections.errors import HandlerError
from eventplatform.projections.merge import Count, First, Latest, Max, Merge, Min, Ranked, Sum
from eventplatform.projections.model import (
    CONTRIBUTIONS_COLUMN,
    RANK_SUFFIX,
    Contribution,
    Projection,
    Row,
    TablePlan,
)

RowKey = tuple[Any, ...]
Checked = tuple[RowKey, tuple[Any, ...]]
HASH_CACHE_MAX = 1_000_000


class _Missing:
    """A column the row does not give (it then leaves the column as it is)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class CompiledTable:
    """The generated ``check`` and ``merge`` of one declarative table."""

    def __init__(self, plan: TablePlan) -> None:
        self.plan = plan
        self.columns: tuple[str, ...] = tuple(column.name for column in plan.table.columns)
        self.givable: tuple[str, ...] = tuple(plan.givable)
        self.check: Callable[[dict[str, Any]], Checked]
        self.merge: Callable[[dict[RowKey, list[Any]], RowKey, tuple[Any, ...], int], None]
        self.check, self.merge = _generate(plan, self.columns, self.givable)

    def values_of(self, contribution: Contribution) -> tuple[Any, ...]:
        """A validated contribution's values in ``check``'s form."""
        given = contribution.values
        return tuple(given.get(name, MISSING) for name in self.givable)

    def state_row(self, state: dict[str, Any]) -> list[Any]:
        """A row state (a dict, as the fold keeps it) in column order."""
        return [state[name] for name in self.columns]


class TableDelta:
    """One table's share of a batch: deltas by row key, or ordered contributions."""

    __slots__ = ("compiled", "contributions", "index", "plan", "states")

    def __init__(self, plan: TablePlan, compiled: CompiledTable | None) -> None:
        self.plan = plan
        self.compiled = compiled
        self.states: dict[RowKey, list[Any]] = {}
        self.contributions: list[Contribution] = []
        self.index: dict[RowKey, list[int]] = {}
        """For the event index: the ranks that contributed to each row key."""

    def __bool__(self) -> bool:
        return bool(self.states or self.contributions)

    def add_contribution(self, contribution: Contribution) -> None:
        """Merge one validated contribution (the path for corrections and retries)."""
        if self.compiled is None:
            self.contributions.append(contribution)
        else:
            values = self.compiled.values_of(contribution)
            self.compiled.merge(self.states, contribution.key, values, contribution.rank)
        if self.plan.indexed:
            note_rank(self.index, contribution.key, contribution.rank)


class BatchDelta:
    """A run of applied events, pre-merged per table, in one batch."""

    __slots__ = ("events", "tables")

    def __init__(self, tables: dict[str, TableDelta]) -> None:
        self.tables = tables
        self.events = 0

    def __bool__(self) -> bool:
        return self.events > 0


class Premerger:
    """Builds :class:`BatchDelta`\\ s for one projection's tables."""

    def __init__(self, projection: Projection) -> None:
        self.projection = projection
        self.plans = projection.plans
        self.compiled = {
            name: CompiledTable(plan)
            for name, plan in self.plans.items()
            if not plan.merged_in_python
        }

    def delta(self) -> BatchDelta:
        return BatchDelta(
            {name: TableDelta(plan, self.compiled.get(name)) for name, plan in self.plans.items()}
        )

    def adder(self, delta: BatchDelta) -> Callable[[list[Any], int], None]:
        """``add(rows, rank)``: check one event's rows (HandlerError), then merge them all."""
        projection = self.projection
        validate = projection.validate_row
        entries: dict[str, tuple[Any, ...]] = {}
        for name, plan in self.plans.items():
            table = delta.tables[name]
            compiled = self.compiled.get(name)
            index = table.index if plan.indexed else None
            if compiled is None:
                entries[name] = (None, table.contributions, index)
            else:
                entries[name] = (compiled.check, compiled.merge, table.states, index)
        tables = {
            table_id: entries[plan.name] for table_id, plan in projection.plan_of_table().items()
        }

        def add(rows: list[Any], rank: int) -> None:
            checked: list[tuple[tuple[Any, ...], Any]] = []
            for row in rows:
                entry = tables.get(id(row.table)) if isinstance(row, Row) else None
                if entry is None:
                    plan = projection.route(row.table) if isinstance(row, Row) else None
                    if plan is None:
                        validate(row, rank)  # raises: not a Row, or not one of the tables
                        raise AssertionError(f"{row!r} passed validation")
                    entry = tables[id(row.table)] = entries[plan.name]
                check = entry[0]
                if check is None:
                    checked.append((entry, validate(row, rank)))
                else:
                    checked.append((entry, check(row.values)))
            for entry, values in checked:
                if entry[0] is None:
                    _, contributions, index = entry
                    contributions.append(values)
                    key = values.key
                else:
                    _, merge, states, index = entry
                    key = values[0]
                    merge(states, key, values[1], rank)
                if index is not None:
                    note_rank(index, key, rank)
            delta.events += 1

        return add


# ---------------------------------------------------------------- the event index


def note_rank(index: dict[RowKey, list[int]], key: RowKey, rank: int) -> None:
    """Note that the event at ``rank`` contributed to ``key`` (once, however many rows)."""
    ranks = index.get(key)
    if ranks is None:
        index[key] = [rank]
    elif ranks[-1] != rank:  # an event's rows are added together: a repeat is that event
        ranks.append(rank)


def scope_of(projection: str, table: str) -> int:
    """The index's 32-bit id of one projection table."""
    digest = hashlib.blake2b(f"{projection}\0{table}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


def row_key_text(key: RowKey) -> str:
    """A row key as text: a JSON list (dates as ISO strings)."""
    return orjson.dumps(list(key), default=str).decode()


def row_hash(key: RowKey) -> int:
    """The index's 64-bit hash of a row key.

    Two keys may share a hash; a recomputation reads the events of both and
    keeps only the contributions to the rows it rebuilds, so a collision
    costs reads, never correctness.
    """
    digest = hashlib.blake2b(row_key_text(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


RANK = struct.Struct("<q")


def pack_ranks(ranks: list[int]) -> bytes:
    """Ranks as the index stores them: 8 bytes each, little-endian."""
    if len(ranks) == 1:
        return RANK.pack(ranks[0])
    return struct.pack(f"<{len(ranks)}q", *ranks)


def unpack_ranks(packed: bytes) -> tuple[int, ...]:
    return struct.unpack(f"<{len(packed) // RANK.size}q", packed)


class RowHashes:
    """Row-key hashes, remembered (keys recur from batch to batch)."""

    def __init__(self, limit: int = HASH_CACHE_MAX) -> None:
        self.limit = limit
        self._known: dict[RowKey, int] = {}

    def __call__(self, keys: list[RowKey]) -> list[int]:
        known = self._known
        if len(known) > self.limit:
            known.clear()
        hashes = list(map(known.get, keys))
        if None in hashes:
            for index, key in enumerate(keys):
                if hashes[index] is None:
                    hashes[index] = known[key] = row_hash(key)
        return hashes  # type: ignore[return-value]


# ---------------------------------------------------------------- code generation


_INLINE = {Sum, Count, Min, Max, Latest, First}


def _generate(
    plan: TablePlan, columns: tuple[str, ...], givable: tuple[str, ...]
) -> tuple[Any, Any]:
    """Write ``check`` and ``merge`` for ``plan`` as Python source and compile them."""
    namespace: dict[str, Any] = {
        "MISSING": MISSING,
        "ALLOWED": frozenset(plan.keys) | frozenset(givable),
        "missing_key": _missing_key(plan),
        "unknown_column": _unknown_column(plan),
    }
    check = ["def check(values):", "    get = values.get"]
    keys = ", ".join(f"get({name!r})" for name in plan.keys)
    check.append(f"    key = ({keys},)")
    check.append("    if None in key:")
    check.append("        missing_key(key)")
    check.append("    if not values.keys() <= ALLOWED:")
    check.append("        unknown_column(values)")
    given = []
    for number, name in enumerate(givable):
        merge = plan.merges[name]
        fetch = f"get({name!r}, MISSING)"
        if type(merge) is Sum:
            given.append(f"(0 if (v{number} := {fetch}) is None else v{number})")
        elif type(merge).normalize is Merge.normalize:
            given.append(fetch)
        else:
            namespace[f"normalize{number}"] = _normalizer(plan, name, merge)
            given.append(
                f"(MISSING if (v{number} := {fetch}) is MISSING else normalize{number}(v{number}))"
            )
    check.append(f"    return key, ({''.join(g + ', ' for g in given)})")

    position = {name: index for index, name in enumerate(columns)}
    initial = []
    for name in columns:
        if name in plan.keys:
            initial.append(f"key[{plan.keys.index(name)}]")
        elif name == CONTRIBUTIONS_COLUMN:
            initial.append("0")
        elif name in plan.merges:
            initial.append(repr(plan.merges[name].initial))
        else:
            initial.append("None")
    merge_lines = [
        "def merge(states, key, values, rank):",
        "    state = states.get(key)",
        "    if state is None:",
        f"        state = states[key] = [{', '.join(initial)}]",
    ]
    if givable:
        merge_lines.append(f"    {''.join(f'v{n}, ' for n in range(len(givable)))}= values")
    numbers = {name: number for number, name in enumerate(givable)}
    for name, merge in plan.merges.items():
        at = position[name]
        if isinstance(merge, Count) and type(merge) is Count:
            merge_lines.append(f"    state[{at}] += 1")
            continue
        if isinstance(merge, Count):
            namespace[f"combine_{at}"] = merge.combine
            merge_lines.append(f"    state[{at}] = combine_{at}(state[{at}], 1)")
            continue
        value = f"v{numbers[name]}"
        merge_lines.append(f"    if {value} is not MISSING:")
        if isinstance(merge, Ranked):
            rank_at = position[name + RANK_SUFFIX]
            if type(merge) in _INLINE:
                better = ">" if type(merge) is Latest else "<"
                merge_lines.append(
                    f"        if (current := state[{rank_at}]) is None or rank {better} current:"
                )
            else:
                namespace[f"wins_{at}"] = merge.wins
                merge_lines.append(f"        if wins_{at}(state[{rank_at}], rank):")
            merge_lines.append(f"            state[{at}] = {value}")
            merge_lines.append(f"            state[{rank_at}] = rank")
        elif type(merge) is Sum:
            merge_lines.append(f"        state[{at}] += {value}")
        elif type(merge) in (Min, Max):
            better = ">" if type(merge) is Max else "<"
            merge_lines.append(
                f"        if {value} is not None and "
                f"((current := state[{at}]) is None or {value} {better} current):"
            )
            merge_lines.append(f"            state[{at}] = {value}")
        else:
            namespace[f"combine_{at}"] = merge.combine
            merge_lines.append(f"        state[{at}] = combine_{at}(state[{at}], {value})")
    merge_lines.append(f"    state[{position[CONTRIBUTIONS_COLUMN]}] += 1")
    source = "\n".join(check) + "\n\n\n" + "\n".join(merge_lines) + "\n"
    code = compile(source, f"<pre-merge of {plan.name}>", "exec")
    exec(code, namespace)  # generated from the plan alone: no user text reaches the source
    return namespace["check"], namespace["merge"]


def _missing_key(plan: TablePlan) -> Callable[[RowKey], None]:
    def missing_key(key: RowKey) -> None:
        missing = [name for name, value in zip(plan.keys, key, strict=True) if value is None]
        raise HandlerError(f"{plan.name}: key column(s) {missing} not given")

    return missing_key


def _unknown_column(plan: TablePlan) -> Callable[[dict[str, Any]], None]:
    allowed = set(plan.keys) | set(plan.givable)

    def unknown_column(values: dict[str, Any]) -> None:
        name = next(name for name in values if name not in allowed)
        raise HandlerError(f"{plan.name}: {name!r} is not a merge column to give")

    return unknown_column


def _normalizer(plan: TablePlan, name: str, merge: Merge) -> Callable[[Any], Any]:
    def normalize(value: Any) -> Any:
        try:
            return merge.normalize(value)
        except (TypeError, ValueError) as exc:
            raise HandlerError(f"{plan.name}.{name}: {exc}") from exc

    return normalize
