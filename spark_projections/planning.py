"""Planning a replay: which offsets of which partitions, checked before Spark starts.

Everything a rebuild or a backfill would find wrong with its request is
found here, on the driver, from the log's bounds and the database alone, so
``platform replay --dry-run`` reports it and a real run fails before it
starts a SparkSession: topics and partitions the projection does not read,
offsets outside the log, projection tables the database lacks, shadow table
names PostgreSQL cannot hold, and where the live tables stand.

A start applies to the partitions it selects. ``--from-offset N`` selects
every partition that has something at or after N: a partition whose log ends
at or before N (an empty one too) has nothing to replay and keeps its
checkpoint, and one whose log starts after N (retention) starts at its log
start. ``--from-offsets`` selects the partitions it names, each of which must
exist in a topic the projection reads.

A rebuild from a start builds on the live tables when they hold exactly the
events before it: its shadows start as their copy and Spark reads from the
start. When they do not (a runner applied past the start, or has not reached
it), the state at the start is not there to copy; the state at the start is
the fold of every event before it, so the rebuild starts its shadows empty
and reads every partition from its log start: the selected ones up to the
requested end, the others up to their checkpoints. The tables it swaps in are
then what the runner would have built, and the plan says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import inspect

from eventplatform.projections.database import create_store_engine, reading
from eventplatform.projections.model import Projection
from eventplatform.projections.store import ProjectionStore
from eventplatform.spark_projections import shadow
from eventplatform.spark_projections.errors import ReplayConfigError

TopicPartition = tuple[str, int]
REPLAY_MODES = ("rebuild", "backfill")


@dataclass(frozen=True)
class ReplayRange:
    topic: str
    partition: int
    start: int
    end: int
    """Exclusive."""
    log_start: int
    high_watermark: int

    @property
    def events(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True)
class ReplayRequest:
    """Which part of the log a replay covers, as ``platform replay`` takes it."""

    from_offset: int | None = None
    from_offsets: Mapping[str, Mapping[str, int]] | None = None
    from_timestamp_ms: int | None = None
    to_offset: int | None = None
    topic: str | None = None
    partition: int | None = None

    @property
    def from_start(self) -> bool:
        """No start given: the replay starts at the log start, into empty tables."""
        return (
            self.from_offset is None
            and self.from_offsets is None
            and self.from_timestamp_ms is None
        )


@dataclass(frozen=True)
class ReplayPlan:
    """A checked plan: the range of every partition and how a rebuild begins."""

    ranges: list[ReplayRange]
    from_start: bool
    """The shadows start empty and every range at its log start; else the shadows start
    as a copy of the live tables, which hold exactly the events before each range."""
    notes: tuple[str, ...] = ()
    """What the plan decided that the request did not say, one line each."""


@dataclass
class _Requested:
    ranges: list[ReplayRange]
    applied: dict[TopicPartition, int]
    """The live checkpoints."""
    chosen: set[TopicPartition]
    """The partitions the request replays (the others keep their checkpoints)."""
    notes: list[str] = field(default_factory=list)


def plan_ranges(
    projection: Projection,
    database_url: str,
    source_options: Mapping[str, str],
    request: ReplayRequest,
) -> list[ReplayRange]:
    """Every partition's range for ``request``, checked against the log; raises ReplayError.

    Partitions the request does not select (``topic``/``partition``, absent
    from ``from_offsets``, or with nothing at or after ``from_offset``) get an
    empty range at their checkpoint: a replay on top of live tables leaves them
    as they are.
    """
    return _requested(projection, database_url, source_options, request).ranges


def plan_replay(
    projection: Projection,
    database_url: str,
    source_options: Mapping[str, str],
    request: ReplayRequest,
    *,
    mode: str,
) -> ReplayPlan:
    """The checked plan of a ``mode`` replay (see the module's docstring); raises ReplayError
    for anything the replay itself would refuse."""
    if mode not in REPLAY_MODES:
        raise ReplayConfigError(f"mode is {mode!r}; expected one of {', '.join(REPLAY_MODES)}")
    requested = _requested(projection, database_url, source_options, request)
    check_tables(database_url, projection)
    notes = tuple(requested.notes)
    if mode == "backfill" or request.from_start:
        return ReplayPlan(requested.ranges, from_start=request.from_start, notes=notes)
    elsewhere = [
        f"{r.topic}/{r.partition} at {requested.applied.get((r.topic, r.partition), r.log_start)}"
        for r in requested.ranges
        if (r.topic, r.partition) in requested.chosen
        and requested.applied.get((r.topic, r.partition), r.log_start) != r.start
    ]
    if not elsewhere:
        return ReplayPlan(
            requested.ranges,
            from_start=False,
            notes=(*notes, "on top of the live tables, which hold exactly the events before"),
        )
    return ReplayPlan(
        _from_log_start(requested),
        from_start=True,
        notes=(
            *notes,
            f"the live tables are not at the start ({', '.join(elsewhere)}), so the state "
            "there is computed: the shadows start empty and every partition is read from "
            "its log start (the others up to their checkpoints)",
        ),
    )


def _from_log_start(requested: _Requested) -> list[ReplayRange]:
    ranges = []
    for r in requested.ranges:
        if (r.topic, r.partition) in requested.chosen:
            ranges.append(replace(r, start=r.log_start))
        else:
            here = requested.applied.get((r.topic, r.partition), r.log_start)
            ranges.append(replace(r, start=r.log_start, end=max(here, r.log_start)))
    return ranges


def _requested(
    projection: Projection,
    database_url: str,
    source_options: Mapping[str, str],
    request: ReplayRequest,
) -> _Requested:
    from eventplatform.spark_projections.offsets import plan

    _check_request(projection, request)
    base = {**source_options, "topics": ",".join(projection.topics)}
    bounds = plan(base).bounds()
    if request.partition is not None and not any(
        p == request.partition for (t, p) in bounds if request.topic in (None, t)
    ):
        raise ReplayConfigError(
            f"no partition {request.partition} in {', '.join(projection.topics)}"
        )
    named = _named_offsets(projection, request, bounds)
    engine = create_store_engine(database_url)
    try:
        applied = ProjectionStore(engine, projection).checkpoints(bounds)
    finally:
        engine.dispose()
    requested = _Requested([], applied, set())
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    timestamps: dict[str, dict[str, int]] = {}
    for (topic, partition), log_bounds in sorted(bounds.items()):
        start = _start(request, named, requested, (topic, partition), log_bounds)
        if start is None:
            timestamps.setdefault(topic, {})[str(partition)] = int(request.from_timestamp_ms or 0)
        else:
            starting.setdefault(topic, {})[str(partition)] = start
        chosen = (topic, partition) in requested.chosen
        if request.to_offset is not None and chosen:
            ending.setdefault(topic, {})[str(partition)] = request.to_offset
        elif not chosen and start is not None:
            ending.setdefault(topic, {})[str(partition)] = start
    if request.from_offset is not None and not requested.chosen:
        ends = ", ".join(f"{t}/{p} at {hwm}" for (t, p), (_, hwm) in sorted(bounds.items()))
        raise ReplayConfigError(
            f"offset {request.from_offset} is at or past the high watermark of every partition "
            f"it selects ({ends}): nothing to replay"
        )
    options = {**base, "startingOffsets": json.dumps(starting), "endingOffsets": json.dumps(ending)}
    if timestamps:
        options["startingOffsetsByTimestamp"] = json.dumps(timestamps)
    requested.ranges = [range_of(item) for item in plan(options).partitions]
    return requested


def _start(
    request: ReplayRequest,
    named: Mapping[TopicPartition, int],
    requested: _Requested,
    key: TopicPartition,
    log_bounds: tuple[int, int],
) -> int | None:
    """Where partition ``key`` starts (None: at the request's timestamp); notes whether the
    request selects it in ``requested``."""
    log_start, high_watermark = log_bounds
    here = requested.applied.get(key, log_start)
    where = f"{key[0]}/{key[1]}"
    if request.from_start:
        requested.chosen.add(key)
        return log_start
    if not _selected(request, named, key):
        return here
    if request.from_offset is not None:
        if high_watermark <= request.from_offset:
            requested.notes.append(
                f"{where}: nothing to replay (its log ends at {high_watermark}, at or before "
                f"offset {request.from_offset}); its checkpoint stays at {here}"
            )
            return here
        requested.chosen.add(key)
        if request.from_offset < log_start:
            requested.notes.append(
                f"{where}: starts at its log start {log_start} (offsets before it are gone)"
            )
            return log_start
        return request.from_offset
    requested.chosen.add(key)
    return named[key] if request.from_offsets is not None else None


def _check_request(projection: Projection, request: ReplayRequest) -> None:
    if not projection.topics:
        raise ReplayConfigError(f"{projection.name} handles no event types, so reads no topic")
    if request.topic is not None and request.topic not in projection.topics:
        raise ReplayConfigError(
            f"{projection.name} reads {', '.join(projection.topics)}, not {request.topic!r}"
        )
    if request.from_start and (request.topic is not None or request.partition is not None):
        raise ReplayConfigError(
            "a rebuild from the start of the log covers every partition; --topic and "
            "--partition need --from-offset, --from-offsets or --from-timestamp"
        )


def _named_offsets(
    projection: Projection, request: ReplayRequest, bounds: Mapping[TopicPartition, Any]
) -> dict[TopicPartition, int]:
    """``--from-offsets`` by partition; naming a topic the projection does not read, a
    partition that does not exist or one ``--topic``/``--partition`` leave out is an error."""
    if request.from_offsets is None:
        return {}
    unknown = sorted(set(request.from_offsets) - set(projection.topics))
    if unknown:
        raise ReplayConfigError(
            f"--from-offsets names {_listed(unknown)}, which {projection.name} does not read "
            f"(it reads {', '.join(projection.topics)})"
        )
    named = {
        (topic, int(partition)): offset
        for topic, partitions in request.from_offsets.items()
        for partition, offset in partitions.items()
    }
    missing = [f"{t}/{p}" for t, p in sorted(named) if (t, p) not in bounds]
    if missing:
        raise ReplayConfigError(f"--from-offsets names {_listed(missing)}, which do not exist")
    left_out = [
        f"{t}/{p}"
        for t, p in sorted(named)
        if request.topic not in (None, t) or request.partition not in (None, p)
    ]
    if left_out:
        raise ReplayConfigError(
            f"--from-offsets names {_listed(left_out)}, which --topic/--partition leave out"
        )
    return named


def _listed(names: Iterable[str]) -> str:
    return ", ".join(repr(name) if "/" not in name else name for name in names)


def _selected(
    request: ReplayRequest, named: Mapping[TopicPartition, int], key: TopicPartition
) -> bool:
    topic, partition = key
    if request.topic is not None and topic != request.topic:
        return False
    if request.partition is not None and partition != request.partition:
        return False
    if request.from_offsets is not None:
        return key in named
    return True


def range_of(item: Any) -> ReplayRange:
    return ReplayRange(
        item.range.topic,
        item.range.partition,
        item.range.start,
        item.range.end,
        item.log_start_offset,
        item.high_watermark,
    )


def check_tables(database_url: str, projection: Projection) -> None:
    """The database has the projection's tables, and room for their shadows' names."""
    engine = create_store_engine(database_url)
    try:
        with reading(engine) as connection:
            inspector = inspect(connection)
            missing = [
                str(plan.name)
                for plan in projection.plans.values()
                if not inspector.has_table(plan.name, schema=plan.table.schema)
            ]
        postgresql = engine.dialect.name == "postgresql"
    finally:
        engine.dispose()
    if missing:
        raise ReplayConfigError(
            f"the database has no table {', '.join(missing)} of {projection.name}: "
            "run platform db upgrade first"
        )
    if postgresql:
        shadow.check_names(projection)
