"""What the executors run: events to partial rows, partial rows to SQL.

A replay is a grouped aggregation in two steps, both on the executors:

1. :func:`premerge_chunks` (through ``mapPartitions``) reads its chunks of
   the log and turns their records into one *partial* per row key, with the
   streaming runner's own planner and pre-merge
   (:func:`~eventplatform.projections.batch.plan_batch`): the same decoding,
   upcasting, handlers, validation and poison handling.
   Tables of declarative merges give pre-merged row states; tables with a
   ``SetAdd`` or ``Fold`` column give their contributions, to be folded per
   key in log order. Corrected events arrive here already rewritten to their
   effective content (or dropped, if retracted) by the driver's plan; an erased
   record is skipped by the planner, unless a correction replaced it, when it
   arrives as its replacement in the envelope of its stand-in root.
2. Spark groups the partials by table and row key and :func:`combine` merges
   them; :func:`write_partition` then merges each row into the target
   tables with the streaming store's statements (one transaction per chunk
   of rows), and records the event index entries of non-invertible tables.

Everything crossing the shuffle is pickled Python: row keys and values keep
their exact types (datetimes with their zone, decimals), so both engines
compute the same rows.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import orjson

from eventplatform.events import Position
from eventplatform.events.codec import TYPE_HEADER, VERSION_HEADER
from eventplatform.events.wire import ERASED_HEADER
from eventplatform.projections.batch import Record, Step, plan_batch, young_collections_rare
from eventplatform.projections.caches import LogValue
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.fold import merge_states
from eventplatform.projections.model import Contribution, Projection
from eventplatform.projections.premerge import BatchDelta, Premerger, TableDelta, row_key_text
from eventplatform.projections.store import ProjectionStore
from eventplatform.spark_projections.corrections import Replacement as Replacement
from eventplatform.spark_projections.errors import ReplayError
from eventplatform.spark_projections.offsets import OffsetRange, ReadOptions

STATE, CONTRIBUTIONS, POISON, COUNT = "state", "contributions", "poison", "count"
TOUCHED = "touched"
WRITE_CHUNK_ROWS = 5_000
_REPLACED_HEADERS = (TYPE_HEADER, VERSION_HEADER, ERASED_HEADER)
"""Headers a replacement does not keep: it names its own type, and holds an event."""


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
    stand_ins: Mapping[tuple[str, int, int], bytes] = field(default_factory=dict)
    """Erased records that corrections name: the value their replacements are read into
    (see :attr:`~.corrections.Resolution.stand_ins`)."""


Partial = tuple[str, str, str, bytes]
"""(kind, declared table, row key text, pickled payload): what the pre-merge emits."""
PREMERGE_COLUMNS = ("topic", "partition", "offset", "value", "headers")
"""The columns of the ``eventlog`` rows the pre-merge reads."""


def premerge_chunks(
    job: PartialsJob, options: ReadOptions
) -> Callable[[Iterator[OffsetRange]], Iterator[Partial]]:
    """The ``mapPartitions`` function: chunks of the log in, read and pre-merged here."""

    def run(chunks: Iterator[OffsetRange]) -> Iterator[Partial]:
        from eventplatform.spark_projections.read_paths import read_chunk

        with young_collections_rare():
            batches = (batch for chunk in chunks for batch in read_chunk(options, chunk))
            yield from premerge(job, batches)

    return run


def premerge(job: PartialsJob, batches: Iterable[Any]) -> Iterator[Partial]:
    """The partials of the records in ``batches`` (Arrow batches of ``eventlog`` rows)."""
    projection = job.projection
    premerger = Premerger(projection)
    touching: list[Record] = []
    records = _records(batches, job, touching)
    plan = plan_batch(projection, records, _Everything(), premerger)
    if plan.stop_at is not None:
        raise ReplayError(_stop_message(projection, plan.stop_at))
    for table, key in _touched_keys(projection, touching):
        yield TOUCHED, table, row_key_text(key), pickle.dumps(key)
    events = 0
    for step in plan.steps:
        if isinstance(step, BatchDelta):
            events += step.events
            yield from _partials(step)
        elif step.kind == "poison":
            yield POISON, "", "", _poison_payload(step)
        else:
            position = step.record.position
            raise ReplayError(f"{position}: a correction the plan did not account for")
    yield COUNT, "", "", pickle.dumps(events)


def _records(batches: Iterable[Any], job: PartialsJob, touching: list[Record]) -> Iterator[Record]:
    """The records to plan, as their effective content; those that touch rows go to ``touching``."""
    replacements, corrections, touch = job.replacements, job.corrections, job.touch
    for batch in batches:
        for record in records_of(batch):
            position = record.position
            where = (position.topic, position.partition, position.offset)
            if where in corrections:
                continue  # its effect is in the replacements
            value = record.value if record.value is not None else job.stand_ins.get(where)
            if touch is not None and where in touch.versions:
                touching.append(record)
                for version in touch.versions[where]:
                    if version is not None:
                        touching.append(
                            Record(position, *_replaced(value, record.headers, version))
                        )
            if where in replacements:
                replacement = replacements[where]
                if replacement is None:
                    continue
                record = Record(position, *_replaced(value, record.headers, replacement))
            if touch is not None and touch.covers(*where):
                touching.append(record)
            yield record


def records_of(batch: Any) -> Iterator[Record]:
    """Every row of an Arrow batch of ``eventlog`` rows as the planner's :class:`Record`."""
    columns = [batch.column(name).to_pylist() for name in PREMERGE_COLUMNS[:4]]
    for topic, partition, offset, value, pairs in zip(*columns, header_pairs(batch), strict=True):
        yield Record(Position(topic, partition, offset), value, pairs)


def header_pairs(batch: Any) -> list[list[tuple[str, bytes | None]] | None]:
    """Per row, its headers as (name, value) pairs; None for none.

    Events of one type carry the same headers, so where every row has as
    many headers, rows whose headers are alike share one list (the planner
    only reads them). A dict per header, as ``to_pylist`` makes, costs more
    than the rest of the row.
    """
    import numpy as np
    import pyarrow.compute as pc

    headers = batch.column("headers")
    bounds = headers.offsets.to_numpy()
    bounds = bounds - bounds[0]  # into flatten()'s values, which start at the slice
    fields = headers.flatten().flatten()  # names, values
    counts = np.diff(bounds)
    width = int(counts[0]) if len(counts) else 0
    encoded = [pc.dictionary_encode(field, null_encoding="encode") for field in fields]
    sizes = [len(column.dictionary) for column in encoded]
    if width and (counts == width).all() and math.prod(sizes) ** width < 2**62:
        # one integer per row that says which names and values it holds
        kind = np.zeros(len(counts), dtype=np.int64)
        for column, size in zip(encoded, sizes, strict=True):
            codes = column.indices.to_numpy().reshape(-1, width)
            for at in range(width):
                kind = kind * size + codes[:, at]
        _, first, kind_of_row = np.unique(kind, return_index=True, return_inverse=True)
        names, values = fields
        shared = []
        for row in first.tolist():
            cut = slice(row * width, (row + 1) * width)
            shared.append(list(zip(names[cut].to_pylist(), values[cut].to_pylist(), strict=True)))
        return [shared[kind] for kind in kind_of_row.tolist()]
    names, values = (field.to_pylist() for field in fields)
    return [
        list(zip(names[low:high], values[low:high], strict=True)) or None
        for low, high in pairwise(bounds.tolist())
    ]


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
    kept = [(k, v) for k, v in headers or () if k not in _REPLACED_HEADERS]
    return orjson.dumps(raw), [
        *kept,
        (TYPE_HEADER, event_type.encode()),
        (VERSION_HEADER, str(version).encode()),
    ]


def _partials(delta: BatchDelta) -> Iterator[Partial]:
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


def _no_reads(positions: Any) -> dict[Position, LogValue]:
    raise ReplayError("a replay's writers do not read the log")
