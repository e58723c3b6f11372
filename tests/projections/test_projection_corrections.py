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

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from correction_streams import (
    CONTRIBUTIONS,
    TRAIL_SEPARATOR,
    Append,
    Operation,
    Replace,
    Retract,
    Stream,
    Subject,
    declare_subject,
    operations,
    run_until_applied,
    stored_tables,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, select

from eventplatform.events import EventProducer, EventRef, Position
from eventplatform.projections import migrate, schema
from eventplatform.projections.database import create_store_engine
from eventplatform.testing import BrokerProcess, running_broker

PARTITIONS = 3
BROKER_OVERRIDES = [f"num.partitions={PARTITIONS}", "group.initial.rebalance.delay.ms=0"]
BATCH_SIZES = (1, 1000)
EXAMPLES_MAX = int(os.environ.get("CORRECTION_EXAMPLES", "25"))


# The stream -------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A stream, the runner's batch size, and where a first runner pass stops (if it does)."""

    operations: tuple[Operation, ...]
    batch_size: int
    first_pass: int | None = None


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    stream = draw(operations())
    batch_size = draw(st.sampled_from(BATCH_SIZES))
    first_pass = draw(st.one_of(st.none(), st.integers(1, len(stream))))
    if first_pass == len(stream):
        first_pass = None
    return Scenario(stream, batch_size, first_pass)


# The projection under test ------------------------------------------------


# Appending ----------------------------------------------------------------


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


# Running ------------------------------------------------------------------


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
