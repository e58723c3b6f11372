"""What the executors run: events to partial rows, partial rows to SQL.

A replay is a grouped aggregation in two steps, both on the executors:

1. :func:`premerge_partitions` (through ``mapInArrow``) turns the records of
   one input partition into one *partial* per row key, with the streaming
   runner's own planner and pre-merge (:func:`~eventplatform.projections.batch.plan_batch`):
   the same decoding, upcasting, handlers, validation and poison handling.
   Tables of declarative merges give pre-merged row states; tables with a
   ``SetAdd`` or ``Fold`` column give their contributions, to be folded per
   key in log order. Corrected events arrive here already rewritten to their
   effective content (or dropped, if retracted) by the driver's plan.
2. Spark groups the partials by table and row key and :func:`combine` merges
   them; :func:`write_partition` then merges each row into the target
   tables with the streaming store's statements (one transaction per chunk
   of rows), and records the event index entries of non-invertible tables.

Everything crossing the shuffle is pickled Python: row keys and values keep
their exact types (datetimes with their zone, decimals), so both engines
compute the same rows.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from eventplatform.events import Position
from eventplatform.events.codec import TYPE_HEADER, VERSION_HEADER
from eventplatform.projections.batch import Record, Step, plan_batch
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.fold import merge_states
from eventplatform.projections.model import Contribution, Projection
from eventplatform.projections.premerge import BatchDelta, Premerger, TableDelta, row_key_text
from eventplatform.projections.store import ProjectionStore
from eventplatform.spark_projections.errors import ReplayError

PARTIAL_SCHEMA = "kind string, tbl string, row_key string, payload binary"
STATE, CONTRIBUTIONS, POISON, COUNT = "state", "contributions", "poison", "count"
TOUCHED = "touched"
WRITE_CHUNK_ROWS = 5_000
Replacement = tuple[str, int, Any] | None
"""A corrected event's effective content: (type, version, data), or None if retracted."""


class _Everything(dict[Any, Any]):
    """The planner's expected offsets when every record given is to be applied."""

    def get(self, key: Any, default: Any = None) -> Any:
        return None


@dataclass(frozen=True)
class Touch:
    """A backfill's question: which rows do the events of some windows touch?

    A record in a window touches the rows of its effective content. A root
    with a correction in a window touches the rows of every content it held:
    the live rows may hold any of them, the recomputed rows the latest.
    """

    windows: Mapping[tuple[str, int], tuple[tuple[int, int], ...]]
    """Per partition, offset ranges (end exclusive)."""
    versions: Mapping[tuple[str, int, int], tuple[Replacement, ...]]
    """Roots corrected in a window: the contents of their corrections, in log order."""

    def covers(self, topic: str, partition: int, offset: int) -> bool:
        return any(lo <= offset < hi for lo, hi in self.windows.get((topic, partition), ()))


@dataclass(frozen=True)
class PartialsJob:
    """What every executor needs to plan its records: pickled once, shipped with the task."""

    projection: Projection
    replacements: Mapping[tuple[str, int, int], Replacement]
    corrections: frozenset[tuple[str, int, int]]
    touch: Touch | None = None
    """Backfill only: also emit the keys of the rows the windows touch."""


def premerge_partitions(job: PartialsJob) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function: Arrow batches of records in, partials out."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        projection = job.projection
        premerger = Premerger(projection)
        touching: list[Record] = []
        records = _records(batches, job, touching)
        plan = plan_batch(projection, records, _Everything(), premerger)
        if plan.stop_at is not None:
            raise ReplayError(_stop_message(projection, plan.stop_at))
        rows: dict[str, list[Any]] = {"kind": [], "tbl": [], "row_key": [], "payload": []}
        for table, key in _touched_keys(projection, touching):
            _append(rows, TOUCHED, table, row_key_text(key), pickle.dumps(key))
        events = 0
        for step in plan.steps:
            if isinstance(step, BatchDelta):
                events += step.events
                for kind, table, key, payload in _partials(step):
                    _append(rows, kind, table, key, payload)
            elif step.kind == "poison":
                _append(rows, POISON, "", "", _poison_payload(step))
            else:
                position = step.record.position
                raise ReplayError(f"{position}: a correction the plan did not account for")
        _append(rows, COUNT, "", "", pickle.dumps(events))
        yield pa.RecordBatch.from_pydict(rows)

    return run


def _records(batches: Iterator[Any], job: PartialsJob, touching: list[Record]) -> Iterator[Record]:
    """The records to plan, as their effective content; those that touch rows go to ``touching``."""
    replacements, corrections, touch = job.replacements, job.corrections, job.touch
    for batch in batches:
        columns = batch.to_pydict()
        for topic, partition, offset, value, headers in zip(
            columns["topic"],
            columns["partition"],
            columns["offset"],
            columns["value"],
            columns["headers"],
            strict=True,
        ):
            where = (topic, partition, offset)
            if where in corrections:
                continue  # its effect is in the replacements
            pairs = [(h["key"], h["value"]) for h in headers] if headers else None
            position = Position(topic, partition, offset)
            if touch is not None and where in touch.versions:
                touching.append(Record(position, value, pairs))
                for version in touch.versions[where]:
                    if version is not None:
                        touching.append(Record(position, *_replaced(value, pairs, version)))
            if where in replacements:
                replacement = replacements[where]
                if replacement is None:
                    continue
                value, pairs = _replaced(value, pairs, replacement)
            record = Record(position, value, pairs)
            if touch is not None and touch.covers(topic, partition, offset):
                touching.append(record)
            yield record


def _touched_keys(projection: Projection, records: list[Record]) -> Iterator[tuple[str, Any]]:
    """(table, row key) of every row ``records`` contribute to, each once."""
    if not records:
        return
    plan = plan_batch(projection, records, _Everything(), Premerger(projection))
    seen: set[tuple[str, Any]] = set()
    for step in plan.steps:
        if not isinstance(step, BatchDelta):
            continue
        for name, table in step.tables.items():
            keys = [*table.states, *(c.key for c in table.contributions)]
            for key in keys:
                if (name, key) not in seen:
                    seen.add((name, key))
                    yield name, key


def _replaced(
    value: bytes | None, headers: list[tuple[str, bytes | None]] | None, replacement: Any
) -> tuple[bytes, list[tuple[str, bytes | None]]]:
    """The record as if it held its effective content: same envelope, new type and payload."""
    event_type, version, data = replacement
    raw = orjson.loads(value or b"{}")
    raw.update(type=event_type, version=version, data=data)
    kept = [(k, v) for k, v in headers or () if k not in (TYPE_HEADER, VERSION_HEADER)]
    return orjson.dumps(raw), [
        *kept,
        (TYPE_HEADER, event_type.encode()),
        (VERSION_HEADER, str(version).encode()),
    ]


def _partials(delta: BatchDelta) -> Iterator[tuple[str, str, str, bytes]]:
    for name, table in delta.tables.items():
        index = table.index if table.plan.indexed else {}
        for key, state in table.states.items():
            payload = pickle.dumps((key, state, index.get(key, [])))
            yield STATE, name, row_key_text(key), payload
        by_key: dict[Any, list[tuple[int, dict[str, Any]]]] = {}
        for contribution in table.contributions:
            by_key.setdefault(contribution.key, []).append((contribution.rank, contribution.values))
        for key, contributions in by_key.items():
            payload = pickle.dumps((key, contributions, index.get(key, [])))
            yield CONTRIBUTIONS, name, row_key_text(key), payload


def _append(rows: dict[str, list[Any]], kind: str, table: str, key: str, payload: bytes) -> None:
    rows["kind"].append(kind)
    rows["tbl"].append(table)
    rows["row_key"].append(key)
    rows["payload"].append(payload)


def _poison_payload(step: Step) -> bytes:
    record = step.record
    error = step.error
    return pickle.dumps(
        (
            record.position,
            f"{type(error).__name__}: {error}",
            step.event_type,
            record.value,
        )
    )


def _stop_message(projection: Projection, step: Step) -> str:
    return (
        f"{projection.name} stops on poison events (on_error='stop') and the event at "
        f"{step.record.position} is one: {step.error}"
    )


def combine(projection: Projection) -> Callable[[tuple[str, bytes], tuple[str, bytes]], Any]:
    """``reduceByKey``'s function: merge two partials of one (kind, table, row key)."""

    def merge(left: tuple[str, bytes], right: tuple[str, bytes]) -> tuple[str, bytes]:
        kind, table = left[0].split("\0", 1)
        key, a, ranks_a = pickle.loads(left[1])
        _, b, ranks_b = pickle.loads(right[1])
        if kind == STATE:
            merged: Any = _merge_state_lists(projection, table, a, b)
        else:
            merged = a + b
        return left[0], pickle.dumps((key, merged, ranks_a + ranks_b))

    return merge


def _merge_state_lists(projection: Projection, table: str, a: list[Any], b: list[Any]) -> Any:
    plan = projection.plans[table]
    columns = [column.name for column in plan.table.columns]
    stored = dict(zip(columns, a, strict=True))
    merge_states(plan, stored, dict(zip(columns, b, strict=True)))
    return [stored[name] for name in columns]


@dataclass(frozen=True)
class WriteJob:
    """Where the combined rows go: the database and the (possibly shadow-bound) projection."""

    database_url: str
    projection: Projection
    tables: Mapping[str, str]
    """The bound table each declared table's rows go to, by name."""


def write_partition(job: WriteJob) -> Callable[[Iterable[Any]], Iterator[int]]:
    """The ``mapPartitions`` function: combined partials in, the count of rows written out."""

    def run(items: Iterable[Any]) -> Iterator[int]:
        store = _store(job)
        written = 0
        pending: list[tuple[str, str, bytes]] = []
        for _, (tag, payload) in items:
            kind, table = tag.split("\0", 1)
            pending.append((kind, table, payload))
            if len(pending) >= WRITE_CHUNK_ROWS:
                written += _write(store, job.tables, pending)
                pending = []
        if pending:
            written += _write(store, job.tables, pending)
        yield written

    return run


_stores: dict[tuple[str, int], ProjectionStore] = {}


def _store(job: WriteJob) -> ProjectionStore:
    """One store per database and projection per Python worker (workers are reused)."""
    cache_key = (job.database_url, id(job.projection))
    store = _stores.get(cache_key)
    if store is None:
        _stores.clear()
        store = _stores[cache_key] = ProjectionStore(
            create_store_engine(job.database_url), job.projection
        )
    return store


def _write(
    store: ProjectionStore, tables: Mapping[str, str], pending: list[tuple[str, str, bytes]]
) -> int:
    projection = store.projection
    delta = store.premerger.delta()
    for kind, declared, payload in pending:
        table = tables[declared]
        plan = projection.plans[table]
        target: TableDelta = delta.tables[table]
        key, merged, ranks = pickle.loads(payload)
        if kind == STATE:
            target.states[key] = merged
        else:
            for rank, values in sorted(merged, key=lambda item: item[0]):
                target.contributions.append(Contribution(plan, key, values, rank))
        if plan.indexed and ranks:
            target.index[key] = sorted(ranks)
    delta.events = len(pending)
    with store.transaction(_no_reads) as transaction:
        transaction.apply_delta(delta)
    return len(pending)


def _no_reads(positions: Any) -> dict[Position, bytes]:
    raise ReplayError("a replay's writers do not read the log")
