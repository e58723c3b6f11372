"""Corrections end to end: random streams of events, replacements and retractions.

Each example appends a random stream to a fresh topic of a real broker,
corrections of corrections included, runs the projection runner over it
(one pass, or two with more events appended in between; batches of one
event or of everything at once) and compares every table with an
independent reference fold of the corrected history written here.

The projection under test is declared per example, with its own event type,
topic, tables and consumer group, so examples do not see each other's rows.
It has three tables:

* per entity, every merge operation (merged in Python, recomputed on correction);
* per label, sums and counts only (corrections retract by negation);
* per label, min, max, latest and first (SQL upserts, recomputed on correction,
  ranked across partitions).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from broker_process import BrokerProcess, running_broker
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import JSON, BigInteger, Column, Engine, MetaData, String, Table, Text, select

from eventplatform.events import Correction, Envelope, Event, EventProducer, EventRef, Position
from eventplatform.projections import migrate, schema
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.errors import ApplyTimeoutError
from eventplatform.projections.merge import Count, First, Fold, Latest, Max, Min, SetAdd, Sum
from eventplatform.projections.model import Projection, Row, merge_column, projection_table
from eventplatform.projections.operations import wait_until_applied
from eventplatform.projections.runner import ProjectionRunner
from eventplatform.projections.store import ProjectionStore

PARTITIONS = 3
BROKER_OVERRIDES = [f"num.partitions={PARTITIONS}", "group.initial.rebalance.delay.ms=0"]
ENTITIES = ("ant", "bee", "cat", "dog")
LABELS = ("red", "green", "blue")
AMOUNTS = st.one_of(st.none(), st.integers(-50, 50))
OPERATIONS_MAX = 30
BATCH_SIZES = (1, 1000)
EXAMPLES_MAX = 25
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


@dataclass(frozen=True)
class Scenario:
    """A stream, the runner's batch size, and where a first runner pass stops (if it does)."""

    operations: tuple[Operation, ...]
    batch_size: int
    first_pass: int | None = None


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


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    stream = draw(operations())
    batch_size = draw(st.sampled_from(BATCH_SIZES))
    first_pass = draw(st.one_of(st.none(), st.integers(1, len(stream))))
    if first_pass == len(stream):
        first_pass = None
    return Scenario(stream, batch_size, first_pass)


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


def declare_subject(tag: str) -> Subject:
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
        yield Row(
            entities,
            entity=tick.entity,
            total=tick.amount,
            smallest=tick.amount,
            largest=tick.amount,
            last_amount=tick.amount,
            last_label=tick.label,
            first_label=tick.label,
            labels=tick.label,
            trail=tick.label,
        )
        yield Row(labels, label=tick.label, total=tick.amount)
        yield Row(
            label_extremes,
            label=tick.label,
            smallest=tick.amount,
            largest=tick.amount,
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


# The reference fold ---------------------------------------------------------


@dataclass(frozen=True)
class Effective:
    """A root event's content after its corrections, at the root's log position."""

    position: Position
    entity: str
    amount: int | None
    label: str


def corrected_stream(stream: tuple[Operation, ...], refs: list[EventRef]) -> list[Effective]:
    """Resolve each chain: the latest correction in log order decides its root's content."""
    root_of: dict[int, int] = {}
    content: dict[int, Append | Replace | None] = {}
    entity: dict[int, str] = {}
    for index in sorted(range(len(stream)), key=lambda i: rank(refs[i].position)):
        operation = stream[index]
        if isinstance(operation, Append):
            root_of[index] = index
            content[index] = operation
            entity[index] = operation.entity
            continue
        root = root_of[operation.target]
        root_of[index] = root
        content[root] = None if isinstance(operation, Retract) else operation
    resolved = [
        Effective(refs[root].position, entity[root], value.amount, value.label)
        for root, value in content.items()
        if value is not None
    ]
    return sorted(resolved, key=lambda effective: rank(effective.position))


def rank(position: Position) -> tuple[int, int]:
    return (position.partition, position.offset)


def group_by(
    events: list[Effective], key: Callable[[Effective], str]
) -> dict[tuple[str], list[Effective]]:
    groups: dict[tuple[str], list[Effective]] = {}
    for event in events:
        groups.setdefault((key(event),), []).append(event)
    return groups


def present(amounts: list[int | None]) -> list[int]:
    return [amount for amount in amounts if amount is not None]


def expected_tables(subject: Subject, events: list[Effective]) -> dict[str, dict[Any, Any]]:
    """Each table's rows, folded from the effective events taken in log order."""
    entities = {}
    for key, group in group_by(events, lambda event: event.entity).items():
        amounts = [event.amount for event in group]
        entities[key] = {
            "entity": key[0],
            "total": sum(present(amounts)),
            "ticks": len(group),
            "smallest": min(present(amounts), default=None),
            "largest": max(present(amounts), default=None),
            "last_amount": group[-1].amount,
            "last_label": group[-1].label,
            "first_label": group[0].label,
            "labels": sorted({event.label for event in group}),
            "trail": TRAIL_SEPARATOR.join(event.label for event in group),
            CONTRIBUTIONS: len(group),
        }
    labels = {}
    extremes = {}
    for key, group in group_by(events, lambda event: event.label).items():
        amounts = present([event.amount for event in group])
        labels[key] = {"label": key[0], "total": sum(amounts), "ticks": len(group)}
        labels[key][CONTRIBUTIONS] = len(group)
        extremes[key] = {
            "label": key[0],
            "smallest": min(amounts, default=None),
            "largest": max(amounts, default=None),
            "last_entity": group[-1].entity,
            "first_entity": group[0].entity,
            CONTRIBUTIONS: len(group),
        }
    return {
        subject.entities.name: entities,
        subject.labels.name: labels,
        subject.label_extremes.name: extremes,
    }


def stored_tables(engine: Engine, subject: Subject) -> dict[str, dict[Any, Any]]:
    """Each table's rows as an analyst reads them, plus the contribution count."""
    tables: dict[str, dict[Any, Any]] = {}
    with engine.connect() as connection:
        for plan in subject.projection.plans.values():
            wanted = [*plan.keys, *plan.merges, CONTRIBUTIONS]
            rows = connection.execute(select(*(plan.table.c[name] for name in wanted)))
            tables[plan.name] = {plan.key_of(dict(row)): dict(row) for row in rows.mappings().all()}
    return tables


# Running ------------------------------------------------------------------


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
                if failures or not thread.is_alive() or time.monotonic() > deadline:
                    raise
    finally:
        stop.set()
        thread.join(STOP_TIMEOUT_S)
    assert not thread.is_alive(), "the runner did not stop"
    if failures:
        raise failures[0]
    assert runner.stats.parked == 0


def parked_events(engine: Engine, name: str) -> list[str]:
    table = schema.dead_letters
    with engine.connect() as connection:
        rows = connection.execute(select(table.c.error).where(table.c.projection == name))
        return list(rows.scalars())


# Tests --------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker"), BROKER_OVERRIDES) as process:
        yield process


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_store_engine(database_url)
    migrate.upgrade(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def check_scenario(engine: Engine, bootstrap: str, scenario: Scenario) -> None:
    subject = declare_subject(uuid.uuid4().hex[:10])
    subject.entities.metadata.create_all(engine)
    split = scenario.first_pass or len(scenario.operations)
    with EventProducer(bootstrap) as producer:
        stream = Stream(producer, subject.event_class)
        stream.append(scenario.operations[:split])
        if scenario.first_pass is not None:
            run_until_applied(engine, subject, bootstrap, scenario.batch_size, stream.refs)
            stream.append(scenario.operations[split:])
        run_until_applied(engine, subject, bootstrap, scenario.batch_size, stream.refs)
    assert parked_events(engine, subject.projection.name) == []
    expected = expected_tables(subject, corrected_stream(scenario.operations, stream.refs))
    assert stored_tables(engine, subject) == expected


RETRACT_THEN_REVIVE = Scenario(
    (
        Append("ant", 5, "red"),
        Append("ant", 7, "blue"),
        Retract(0),
        Replace(2, 11, "green"),
        Replace(1, None, "red"),
        Retract(4),
        Replace(5, 3, "blue"),
    ),
    batch_size=1,
)
SAME_BATCH_CHAINS = Scenario(
    (
        Append("ant", 1, "red"),
        Append("bee", 2, "red"),
        Append("cat", -4, "green"),
        Replace(0, 9, "green"),
        Replace(3, 8, "blue"),
        Retract(1),
        Replace(5, 6, "blue"),
        Append("ant", 2, "blue"),
        Retract(2),
    ),
    batch_size=1000,
)
CORRECTED_ACROSS_PASSES = Scenario(
    (
        Append("dog", 4, "red"),
        Append("dog", 6, "green"),
        Append("cat", None, "green"),
        Replace(0, -3, "blue"),
        Retract(1),
        Replace(3, 10, "red"),
        Retract(5),
    ),
    batch_size=1000,
    first_pass=4,
)
EVERYTHING_RETRACTED = Scenario(
    (Append("bee", 3, "red"), Replace(0, 4, "green"), Retract(1)),
    batch_size=1,
    first_pass=2,
)


@settings(
    max_examples=EXAMPLES_MAX,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
@example(scenario=RETRACT_THEN_REVIVE)
@example(scenario=SAME_BATCH_CHAINS)
@example(scenario=CORRECTED_ACROSS_PASSES)
@example(scenario=EVERYTHING_RETRACTED)
def test_projection_equals_the_fold_of_the_corrected_history(
    engine: Engine, broker: BrokerProcess, scenario: Scenario
) -> None:
    check_scenario(engine, broker.bootstrap, scenario)


def test_reference_fold_follows_the_latest_correction_of_each_chain() -> None:
    subject = declare_subject("reference")
    refs = [
        EventRef(uuid.uuid4(), "ant", Position("t", 0, offset)) for offset in range(5)
    ]  # one partition: stream order is log order
    stream = (
        Append("ant", 5, "red"),
        Replace(0, 7, "blue"),
        Retract(1),
        Replace(1, 2, "green"),
        Append("ant", None, "red"),
    )
    events = corrected_stream(stream, refs)

    assert [(event.amount, event.label) for event in events] == [(2, "green"), (None, "red")]
    entities = expected_tables(subject, events)[subject.entities.name]
    assert entities[("ant",)]["trail"] == "green|red"
    assert entities[("ant",)]["total"] == 2
    assert entities[("ant",)]["last_amount"] is None
