"""A rebuild while events keep arriving and the streaming runner keeps applying them.

A producer thread appends ticks (and replacements of earlier ticks) for the
whole test; the runner runs throughout; a reader thread queries both tables
in one statement the whole time. A Spark rebuild from the start of the log
runs in the middle. Then the producer stops, the runner applies the rest,
and the tables must equal a second database the runner alone built from the
same log. The reader must never fail, and never see the tables disagree or
the tick count go back: the rebuild swaps complete tables in, caught up with
what the runner applied meanwhile.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import projection_test_app
import pytest
from projection_test_app import Tick, label_totals, totals, totals_projection
from projection_threads import apply_all, running_projection
from sqlalchemy import Engine, create_engine, func, select

from eventplatform.events import Correction, EventProducer, EventRef
from eventplatform.projections import migrate
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.operations import wait_until_applied
from eventplatform.spark_projections.replay import ReplayRequest, plan_ranges, rebuild
from eventplatform.testing import BrokerProcess, fresh_database, running_broker

APPS = [projection_test_app.app]
NAME = totals_projection.name
BROKER_OVERRIDES = ["num.partitions=3", "group.initial.rebalance.delay.ms=0"]
PREFILL = 2_000
BURST = 20
BURST_PAUSE_S = 0.05
LIVE_EVENTS_MAX = 6_000
LIVE_SECONDS_MAX = 120.0
APPLY_TIMEOUT_S = 120.0
ENTITIES = [f"e{number}" for number in range(40)]
LABELS = ["red", "green", "blue", "grey"]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "broker", BROKER_OVERRIDES) as process:
        yield process


class Appender:
    """Appends bursts of ticks, every tenth event a replacement of an earlier tick."""

    def __init__(self, producer: EventProducer) -> None:
        self.producer = producer
        self.refs: list[EventRef] = []
        self.ticks: list[tuple[EventRef, str]] = []
        self.random = random.Random(7)

    def burst(self, count: int) -> None:
        events: list[Any] = []
        for number in range(count):
            if self.ticks and number % 10 == 9:
                target, entity = self.random.choice(self.ticks)
                events.append(Correction(of=target, replacement=self.tick(entity)))
            else:
                events.append(self.tick(self.random.choice(ENTITIES)))
        refs = self.producer.append(events)
        self.refs.extend(refs)
        self.ticks.extend(
            (ref, event.entity)
            for ref, event in zip(refs, events, strict=True)
            if isinstance(event, Tick)
        )

    def tick(self, entity: str) -> Tick:
        return Tick(
            entity=entity, amount=self.random.randint(-20, 100), label=self.random.choice(LABELS)
        )


class Reader:
    """Queries the live tables in one statement, again and again, and checks what it sees."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.queries = 0
        self.failures: list[str] = []
        self.seen: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="reader", daemon=True)

    def run(self) -> None:
        statement = select(
            select(func.coalesce(func.sum(totals.c.ticks), 0)).scalar_subquery(),
            select(func.coalesce(func.sum(label_totals.c.ticks), 0)).scalar_subquery(),
            select(func.coalesce(func.sum(totals.c.total), 0)).scalar_subquery(),
            select(func.coalesce(func.sum(label_totals.c.total), 0)).scalar_subquery(),
        )
        while not self.stop.is_set():
            try:
                with self.engine.connect() as connection:
                    by_entity, by_label, total_e, total_l = connection.execute(statement).one()
            except Exception as exc:  # the test fails on any
                self.failures.append(f"query failed: {type(exc).__name__}: {exc}")
                return
            self.queries += 1
            if (by_entity, total_e) != (by_label, total_l):
                self.failures.append(
                    f"tables disagree: {by_entity, total_e} != {by_label, total_l}"
                )
            if self.seen and by_entity < self.seen[-1]:
                self.failures.append(f"tick count went back from {self.seen[-1]} to {by_entity}")
            self.seen.append(int(by_entity))
            time.sleep(0.005)


def migrated(url: str) -> str:
    migrate.upgrade(url, APPS)
    return url


def test_a_rebuild_under_live_traffic_leaves_the_runner_state_and_queries_intact(
    spark: Any, broker: BrokerProcess, database_url: str, tmp_path: Path
) -> None:
    url = migrated(database_url)
    kind = "sqlite" if url.startswith("sqlite") else "postgresql"
    with fresh_database(kind, tmp_path) as reference:
        check_live_rebuild(spark, broker, url, migrated(reference))


def check_live_rebuild(spark: Any, broker: BrokerProcess, url: str, reference: str) -> None:
    options = {"bootstrap.servers": broker.bootstrap, "dataDir": str(broker.data_dir)}
    engine = create_store_engine(url)
    reader = Reader(create_engine(url))  # as an analyst reads: no write lock taken
    stop_appending = threading.Event()
    append_failures: list[BaseException] = []
    with EventProducer(broker.bootstrap) as producer:
        appender = Appender(producer)
        for _ in range(PREFILL // 500):
            appender.burst(500)

        def append_live() -> None:
            deadline = time.monotonic() + LIVE_SECONDS_MAX
            try:
                while not stop_appending.is_set() and time.monotonic() < deadline:
                    if len(appender.refs) >= PREFILL + LIVE_EVENTS_MAX:
                        break
                    appender.burst(BURST)
                    time.sleep(BURST_PAUSE_S)
            except BaseException as exc:
                append_failures.append(exc)

        try:
            with running_projection(NAME, APPS, url, broker.bootstrap):
                wait_until_applied(url, NAME, appender.refs[:PREFILL], timeout_s=APPLY_TIMEOUT_S)
                reader.thread.start()
                appending = threading.Thread(target=append_live, name="appender", daemon=True)
                appending.start()
                time.sleep(1.0)
                ranges = plan_ranges(totals_projection, url, options, ReplayRequest())
                summary = rebuild(spark, totals_projection, url, ranges, options, from_start=True)
                time.sleep(1.0)
                stop_appending.set()
                appending.join(30)
                assert not appending.is_alive()
                wait_until_applied(url, NAME, appender.refs, timeout_s=APPLY_TIMEOUT_S)
                time.sleep(0.2)
        finally:
            stop_appending.set()
            reader.stop.set()
            if reader.thread.is_alive():
                reader.thread.join(30)
        assert not append_failures
        apply_all(NAME, APPS, reference, broker.bootstrap, appender.refs, APPLY_TIMEOUT_S)

    assert summary.events_read >= PREFILL
    assert summary.parked == 0
    assert summary.caught_up > 0, "the runner applied nothing past the rebuild's range"
    assert reader.failures == []
    assert reader.queries > 50
    assert reader.seen[-1] == len(appender.ticks)
    reference_engine = create_store_engine(reference)
    try:
        assert rows(engine) == rows(reference_engine)
    finally:
        reference_engine.dispose()
        reader.engine.dispose()
        engine.dispose()


def rows(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    tables: dict[str, list[dict[str, Any]]] = {}
    with engine.connect() as connection:
        for table in (totals, label_totals):
            keys = list(table.primary_key.columns)
            result = connection.execute(select(table).order_by(*keys)).mappings().all()
            tables[table.name] = [dict(row) for row in result]
    return tables
