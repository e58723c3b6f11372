"""Random streams of events and corrections, and a projection to fold them: shared by the
correction tests of the streaming runner and the equivalence tests of Spark replay.

Each stream is a sequence of operations: append an event, replace an earlier
operation (an event or a correction) with new content, or retract one. A
:class:`Subject` is a projection declared for one example, with its own
event type (so its own topic), tables and consumer group, and three tables:

* per entity, every merge operation (merged in Python, recomputed on correction);
* per label, sums and counts only (corrections retract by negation);
* per label, min, max, latest and first (SQL upserts, recomputed on correction,
  ranked across partitions).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from sqlalchemy import JSON, BigInteger, Column, Engine, MetaData, String, Table, Text, select

from eventplatform.events import Correction, Envelope, Event, EventProducer, EventRef
from eventplatform.projections.errors import ApplyTimeoutError
from eventplatform.projections.merge import Count, First, Fold, Latest, Max, Min, SetAdd, Sum
from eventplatform.projections.model import Projection, Row, merge_column, projection_table
from eventplatform.projections.operations import wait_until_applied
from eventplatform.projections.runner import ProjectionRunner
from eventplatform.projections.store import ProjectionStore

ENTITIES = ("ant", "bee", "cat", "dog")
LABELS = ("red", "green", "blue")
AMOUNTS = st.one_of(st.none(), st.integers(-50, 50))
OPERATIONS_MAX = 30
APPLY_TIMEOUT_S = 60.0
APPLY_POLL_S = 0.5
STOP_TIMEOUT_S = 30.0
RUNNER_POLL_TIMEOUT_S = 0.1
TRAIL_SEPARATOR = "|"
CONTRIBUTIONS = "ep_contributions"


# The stream -------------------------------------------------------------


@dataclass(frozen=True)
class Append:
    """Append a new event."""

    entity: str
    amount: int | None
    label: str


@dataclass(frozen=True)
class Replace:
    """Correct the operation at index ``target`` (an event or a correction) with new content."""

    target: int
    amount: int | None
    label: str


@dataclass(frozen=True)
class Retract:
    """Retract the operation at index ``target`` (an event or a correction)."""

    target: int


Operation = Append | Replace | Retract


@st.composite
def operations(draw: st.DrawFn) -> tuple[Operation, ...]:
    """A stream that starts with an event; a correction targets any earlier operation."""
    count = draw(st.integers(1, OPERATIONS_MAX))
    stream: list[Operation] = []
    for index in range(count):
        kind = draw(st.sampled_from(("append", "append", "replace", "retract"))) if index else ""
        if kind in ("replace", "retract"):
            target = draw(st.integers(0, index - 1))
            if kind == "retract":
                stream.append(Retract(target))
            else:
                stream.append(Replace(target, draw(AMOUNTS), draw(st.sampled_from(LABELS))))
            continue
        entity = draw(st.sampled_from(ENTITIES))
        stream.append(Append(entity, draw(AMOUNTS), draw(st.sampled_from(LABELS))))
    return tuple(stream)


# The projection under test ------------------------------------------------


def append_to_trail(trail: str, label: str) -> str:
    return f"{trail}{TRAIL_SEPARATOR}{label}" if trail else label


@dataclass
class Subject:
    """One example's event class, projection and tables."""

    event_class: type[Event]
    projection: Projection
    entities: Table
    labels: Table
    label_extremes: Table


def declare_subject(tag: str, amount_of: Callable[[Any], int | None] | None = None) -> Subject:
    """The subject of ``tag``; ``amount_of(tick)``, if given, replaces the amount its rows take.

    Two subjects of one tag share their event type, projection name and
    tables: one with ``amount_of`` stands for a handler with a bug.
    """

    class Tick(Event, type=f"cx{tag}.tick", version=1, key="entity"):
        entity: str
        amount: int | None
        label: str

    metadata = MetaData()
    entities = projection_table(
        f"cx_{tag}_entities",
        metadata,
        Column("entity", String(20), primary_key=True),
        merge_column("total", BigInteger, Sum()),
        merge_column("ticks", BigInteger, Count()),
        merge_column("smallest", BigInteger, Min()),
        merge_column("largest", BigInteger, Max()),
        merge_column("last_amount", BigInteger, Latest()),
        merge_column("last_label", Text, Latest()),
        merge_column("first_label", Text, First()),
        merge_column("labels", JSON, SetAdd()),
        merge_column("trail", Text, Fold(append_to_trail, initial="")),
    )
    labels = projection_table(
        f"cx_{tag}_labels",
        metadata,
        Column("label", String(20), primary_key=True),
        merge_column("total", BigInteger, Sum()),
        merge_column("ticks", BigInteger, Count()),
    )
    label_extremes = projection_table(
        f"cx_{tag}_label_extremes",
        metadata,
        Column("label", String(20), primary_key=True),
        merge_column("smallest", BigInteger, Min()),
        merge_column("largest", BigInteger, Max()),
        merge_column("last_entity", Text, Latest()),
        merge_column("first_entity", Text, First()),
    )
    projection = Projection(f"cx.{tag}", tables=[entities, labels, label_extremes])

    @projection.on(Tick)
    def tick_rows(envelope: Envelope[Any]) -> Iterator[Row]:
        tick = envelope.event
        amount = tick.amount if amount_of is None else amount_of(tick)
        yield Row(
            entities,
            entity=tick.entity,
            total=amount,
            smallest=amount,
            largest=amount,
            last_amount=amount,
            last_label=tick.label,
            first_label=tick.label,
            labels=tick.label,
            trail=tick.label,
        )
        yield Row(labels, label=tick.label, total=amount)
        yield Row(
            label_extremes,
            label=tick.label,
            smallest=amount,
            largest=amount,
            last_entity=tick.entity,
            first_entity=tick.entity,
        )

    return Subject(Tick, projection, entities, labels, label_extremes)


# Appending ----------------------------------------------------------------


class Stream:
    """Appends a scenario's operations, batching every run that needs no new positions."""

    def __init__(self, producer: EventProducer, event_class: type[Event]) -> None:
        self.producer = producer
        self.event_class = event_class
        self.refs: list[EventRef] = []
        self.entity_of: list[str] = []
        self._pending: list[Event] = []

    def append(self, stream: tuple[Operation, ...]) -> None:
        for operation in stream:
            if isinstance(operation, Append):
                self.entity_of.append(operation.entity)
                self._pending.append(self._tick(operation.entity, operation))
                continue
            if operation.target >= len(self.refs):
                self._flush()
            target = self.refs[operation.target]
            entity = self.entity_of[operation.target]
            self.entity_of.append(entity)
            if isinstance(operation, Retract):
                self._pending.append(Correction(of=target, retract=True))
            else:
                replacement = self._tick(entity, operation)
                self._pending.append(Correction(of=target, replacement=replacement))
        self._flush()

    def _tick(self, entity: str, operation: Append | Replace) -> Event:
        return self.event_class(entity=entity, amount=operation.amount, label=operation.label)

    def _flush(self) -> None:
        if self._pending:
            self.refs.extend(self.producer.append(self._pending))
            self._pending = []


# Running and reading ---------------------------------------------------------


def run_until_applied(
    engine: Engine, subject: Subject, bootstrap: str, batch_size: int, refs: list[EventRef]
) -> None:
    """Run a runner in a thread until it has applied ``refs``, then stop it."""
    runner = ProjectionRunner(
        ProjectionStore(engine, subject.projection),
        bootstrap,
        batch_size=batch_size,
        poll_timeout_s=RUNNER_POLL_TIMEOUT_S,
    )
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            runner.run(stop)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, name="projection-runner", daemon=True)
    thread.start()
    deadline = time.monotonic() + APPLY_TIMEOUT_S
    try:
        while True:
            try:
                wait_until_applied(engine, subject.projection.name, refs, timeout_s=APPLY_POLL_S)
                break
            except ApplyTimeoutError:
                if failures:
                    raise failures[0] from None
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise
    finally:
        stop.set()
        thread.join(STOP_TIMEOUT_S)
    assert not thread.is_alive(), "the runner did not stop"
    if failures:
        raise failures[0]
    assert runner.stats.parked == 0


def stored_tables(engine: Engine, subject: Subject) -> dict[str, dict[Any, Any]]:
    """Each table's rows as an analyst reads them, plus the contribution count."""
    tables: dict[str, dict[Any, Any]] = {}
    with engine.connect() as connection:
        for plan in subject.projection.plans.values():
            wanted = [*plan.keys, *plan.merges, CONTRIBUTIONS]
            rows = connection.execute(select(*(plan.table.c[name] for name in wanted)))
            tables[plan.name] = {plan.key_of(dict(row)): dict(row) for row in rows.mappings().all()}
    return tables
