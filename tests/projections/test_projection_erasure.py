"""Erased records under the projection runner, against a real broker.

Each test appends events with the SDK and erased records as any producer can send
them (``erased_records``), runs a runner over them, and compares every table with the
in-memory fold of the same history, in which an erased record holds nothing and a
replacement of one stands at its place. The projection is the correction tests'
(``correction_streams``): per entity every merge operation, the order-sensitive
``trail`` fold included; per label sums and counts; per label min, max, latest and
first. Every test runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from correction_streams import Subject, declare_subject, stored_tables
from erased_records import (
    ErasureLog,
    checkpoint,
    folded,
    parked_errors,
    position_of,
    run_until_applied,
)
from sqlalchemy import Engine

from eventplatform.events import DecodeError, Envelope, Position
from eventplatform.projections import App, migrate
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.kafka import KafkaEventReader
from eventplatform.projections.operations import retry_dead_letters
from eventplatform.projections.store import ProjectionStore
from eventplatform.testing import BrokerProcess, running_broker

BROKER_OVERRIDES = ["num.partitions=1", "group.initial.rebalance.delay.ms=0"]


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


@pytest.fixture
def subject(engine: Engine) -> Subject:
    declared = declare_subject(uuid.uuid4().hex[:10])
    declared.entities.metadata.create_all(engine)
    return declared


@pytest.fixture
def log(broker: BrokerProcess, subject: Subject) -> Iterator[ErasureLog]:
    opened = ErasureLog(broker.bootstrap, subject)
    try:
        yield opened
    finally:
        opened.close()


def applied_before_erasure(
    engine: Engine,
    subject: Subject,
    bootstrap: str,
    next_offset: int,
    applied: Sequence[Envelope[Any]] = (),
    parked: Sequence[Position] = (),
) -> None:
    """Leave the tables, checkpoint and dead letters of a runner that applied (or parked)
    records of the log up to ``next_offset`` while they still held what they held."""
    projection = subject.projection
    store = ProjectionStore(engine, projection)
    reader = KafkaEventReader(bootstrap)
    try:
        with store.transaction(reader) as transaction:
            transaction.advance({(subject.event_class.event_topic, 0): (None, next_offset)})
            transaction.apply(
                [
                    (envelope, projection.contributions(envelope, projection.rank(at)))
                    for envelope in applied
                    if (at := envelope.position) is not None
                ]
            )
            for position in parked:
                transaction.park(position, DecodeError("not an envelope"), b"{", None)
    finally:
        reader.close()


@pytest.mark.parametrize("batch_size", [1, 1000])
def test_the_runner_skips_erased_records_and_its_checkpoint_moves_past_them(
    engine: Engine, broker: BrokerProcess, subject: Subject, log: ErasureLog, batch_size: int
) -> None:
    log.tick("ant", 5, "red")
    log.tick("bee", 2, "blue")
    log.erased("ant")
    log.tick("ant", -1, "green")
    last = log.erased("cat")

    runner = run_until_applied(engine, subject, broker.bootstrap, last.position, batch_size)

    assert parked_errors(engine, subject) == []
    assert runner.stats.parked == 0
    tables = stored_tables(engine, subject)
    assert tables == folded(subject, log.history)
    assert tables[subject.entities.name][("ant",)]["trail"] == "red|green"
    assert ("cat",) not in tables[subject.entities.name]
    assert checkpoint(engine, subject, log.topic) == last.position.offset + 1


def test_a_retraction_of_an_erased_event_changes_nothing_and_is_not_poison(
    engine: Engine, broker: BrokerProcess, subject: Subject, log: ErasureLog
) -> None:
    log.tick("ant", 5, "red")
    gone = log.erased("ant")
    log.tick("ant", 1, "blue")
    run_until_applied(engine, subject, broker.bootstrap, log.last)
    before = stored_tables(engine, subject)

    log.correct(gone, retract=True, reason="erased")
    log.tick("bee", 3, "red")
    run_until_applied(engine, subject, broker.bootstrap, log.last)

    assert parked_errors(engine, subject) == []
    tables = stored_tables(engine, subject)
    assert tables == folded(subject, log.history)
    entities = subject.entities.name
    assert tables[entities][("ant",)] == before[entities][("ant",)], "nothing was taken out"


@pytest.mark.parametrize("batch_size", [1, 1000])
def test_a_replacement_of_an_erased_event_contributes_the_replacement_at_its_place(
    engine: Engine, broker: BrokerProcess, subject: Subject, log: ErasureLog, batch_size: int
) -> None:
    log.tick("ant", 5, "red")
    gone = log.erased("ant")
    log.tick("ant", 1, "blue")
    replaced = log.replace(gone, "ant", 7, "green")
    log.replace(replaced, "ant", 9, "green")

    run_until_applied(engine, subject, broker.bootstrap, log.last, batch_size)

    assert parked_errors(engine, subject) == []
    tables = stored_tables(engine, subject)
    assert tables == folded(subject, log.history)
    ant = tables[subject.entities.name][("ant",)]
    assert (ant["total"], ant["trail"]) == (5 + 9 + 1, "red|green|blue")


def test_a_correction_lagging_behind_an_erasure_is_parked_and_changes_nothing(
    engine: Engine, broker: BrokerProcess, subject: Subject, log: ErasureLog
) -> None:
    """A runner applied an event, and the log erased it before the runner came to the
    event's retraction: what the event contributed cannot be read back to be taken out."""
    first = log.tick("ant", 5, "red")
    gone = log.erased("ant")
    applied = Envelope(
        subject.event_class(entity="ant", amount=100, label="blue"), position=gone.position
    )
    applied_before_erasure(
        engine, subject, broker.bootstrap, gone.position.offset + 1, [first, applied]
    )
    held = stored_tables(engine, subject)
    assert held == folded(subject, [first, applied])

    retraction = log.correct(applied, retract=True)
    log.tick("bee", 3, "red")
    run_until_applied(engine, subject, broker.bootstrap, log.last)

    [error] = parked_errors(engine, subject)
    assert "erased" in error and str(position_of(retraction)) in error
    tables = stored_tables(engine, subject)
    entities = subject.entities.name
    assert tables[entities][("ant",)] == held[entities][("ant",)]
    assert tables[entities][("bee",)]["total"] == 3
    assert checkpoint(engine, subject, log.topic) == log.last.offset + 1


def test_a_parked_record_erased_since_is_resolved_by_a_retry_and_its_retraction_is_no_poison(
    engine: Engine, database_url: str, broker: BrokerProcess, subject: Subject, log: ErasureLog
) -> None:
    first = log.tick("ant", 5, "red")
    gone = log.erased("ant")
    applied_before_erasure(
        engine, subject, broker.bootstrap, gone.position.offset + 1, [first], [gone.position]
    )

    outcome = retry_dead_letters(
        subject.projection.name,
        [App("erasure-tests", projections=[subject.projection])],
        database_url=database_url,
        bootstrap=broker.bootstrap,
    )
    log.correct(gone, retract=True)
    run_until_applied(engine, subject, broker.bootstrap, log.last)

    assert (outcome.retried, outcome.still_parked) == (1, 0)
    assert parked_errors(engine, subject) == ["not an envelope"], "the one retried, no other"
    assert stored_tables(engine, subject) == folded(subject, log.history)
