"""How a runner paces its batches: at once when records are rare, gathered within the
linger when they come often (see :class:`~eventplatform.projections.runner.ArrivalRate`)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from correction_streams import declare_subject
from sqlalchemy import Engine

from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.errors import ApplyTimeoutError
from eventplatform.projections.operations import wait_until_applied
from eventplatform.projections.runner import (
    BATCH_LINGER_S_DEFAULT,
    ArrivalRate,
    ProjectionRunner,
)
from eventplatform.projections.store import ProjectionStore
from eventplatform.testing import BrokerProcess, running_broker

LINGER_S = 0.01

# The rate, sans IO ---------------------------------------------------------------


def test_a_rate_counts_the_records_of_the_last_window() -> None:
    rate = ArrivalRate(window_s=1.0)
    for tenth in range(10):
        rate.note(50, now=100.0 + tenth / 10)
    assert rate.per_second(now=100.95) == 500
    assert rate.per_second(now=101.45) == 250  # the first five notes are over a second old
    assert rate.per_second(now=103.0) == 0


def test_lingering_is_worth_it_only_when_a_record_is_due_within_the_linger() -> None:
    rate = ArrivalRate(window_s=1.0)
    rate.note(80, now=10.0)
    assert not rate.worth_lingering(LINGER_S, now=10.0)  # 80/s: 0.8 records in 10 ms
    rate.note(20, now=10.5)
    assert rate.worth_lingering(LINGER_S, now=10.5)  # 100/s: one record in 10 ms
    assert not rate.worth_lingering(0.0, now=10.5)  # no linger set
    assert not rate.worth_lingering(LINGER_S, now=11.2)  # the 80 are forgotten


def test_nothing_polled_counts_nothing() -> None:
    rate = ArrivalRate()
    rate.note(0, now=1.0)
    assert rate.per_second(now=1.0) == 0


def test_the_default_linger_gathers_records_from_a_hundred_a_second() -> None:
    assert BATCH_LINGER_S_DEFAULT == LINGER_S
    rate = ArrivalRate()
    rate.note(99, now=0.0)
    assert not rate.worth_lingering(BATCH_LINGER_S_DEFAULT, now=0.5)
    rate.note(1, now=0.5)
    assert rate.worth_lingering(BATCH_LINGER_S_DEFAULT, now=0.5)


# A runner against a broker --------------------------------------------------------

STEADY_RATE = 400
STEADY_EVENTS = 400
APPLY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = ["num.partitions=1", "group.initial.rebalance.delay.ms=0"]
    with running_broker(tmp_path_factory.mktemp("broker"), overrides) as process:
        yield process


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_store_engine(f"sqlite:///{tmp_path / 'projections.db'}")
    migrate.upgrade(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def test_records_that_come_steadily_are_applied_in_batches_of_several(
    broker: BrokerProcess, engine: Engine
) -> None:
    subject = declare_subject(uuid.uuid4().hex[:10])
    subject.entities.metadata.create_all(engine)
    runner = ProjectionRunner(ProjectionStore(engine, subject.projection), broker.bootstrap)
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        with EventProducer(broker.bootstrap) as producer:
            producer.append([subject.event_class(entity="warm", amount=1, label="red")])
            refs = []
            started = time.monotonic()
            for number in range(STEADY_EVENTS):  # one at a time, on a schedule
                time.sleep(max(0.0, started + number / STEADY_RATE - time.monotonic()))
                event = subject.event_class(entity=f"e{number % 7}", amount=number, label="red")
                refs.extend(producer.append([event]))
        deadline = time.monotonic() + APPLY_TIMEOUT_S
        while True:
            try:
                wait_until_applied(engine, subject.projection.name, refs, timeout_s=1.0)
                break
            except ApplyTimeoutError:
                assert thread.is_alive() and time.monotonic() < deadline
    finally:
        stop.set()
        thread.join(STOP_TIMEOUT_S)
    assert runner.stats.events == STEADY_EVENTS + 1
    # One record at a time, as they come, would be one batch each.
    assert runner.stats.batches <= STEADY_EVENTS // 2, runner.stats
