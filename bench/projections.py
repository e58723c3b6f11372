"""Projection benchmark: events per second one runner applies to SQLite and to PostgreSQL.

The workload is page-view analytics. ``PageViewed(user_id, url, duration_ms)``
events, keyed by user, go to a topic of ``--partitions`` partitions on a
``platform serve`` broker started for the run (fresh data directory, deleted
at the end). One projection folds them into two tables through declarative
merges only, so every row goes through the SQL upsert path:

* ``bench_page_stats`` by URL: views (Count), total and longest duration
  (Sum, Max), first and last seen (Min, Max), last viewer (Latest);
* ``bench_user_stats`` by user: views (Count), total duration (Sum), first and
  last URL (First, Latest), last seen (Max).

Both tables have non-invertible merges, so each event also writes one
``ep_event_index`` row per table (what corrections recompute from).

One :class:`ProjectionRunner` in this process applies the events with batch
sizes 1, 100 and 1000. The clock starts when the group assigns the
partitions to the runner (after the group join and the checkpoint read) and
stops when the transaction holding the last event commits: it covers
fetching, decoding, folding and writing. Each configuration runs
``--repeat`` times, each time against a fresh database (a new SQLite file, or
a new PostgreSQL database created and dropped on the server of
``--postgres``) and a new consumer group; medians are reported. Batch size 1
is one transaction per event, so it applies only the first
``--events-single`` events.

The peer is the ``eventsourcing`` library (``pip install -e '.[bench]'``) on
the same PostgreSQL server in the same run: the first ``--peer-events`` of the
same events are recorded once as domain events of per-user aggregates in its
PostgreSQL event store,
and its ``ProjectionRunner`` folds them into the same two tables (hand-written
upserts in a ``PostgresTrackingRecorder`` view, which commits the rows and
its tracking record in one transaction per event, as that library's
projections do). Its clock runs from its first event to the commit of its
last. It keeps no event index. The ratio divides eventplatform's median by
the library's.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from bench.harness import (
    BrokerProcess,
    Deadline,
    PageViewed,
    Spread,
    describe_machine,
    format_spread,
    invocation,
    markdown_table,
    metadata,
    page_stats,
    page_view_projection,
    page_views,
    progress,
    user_stats,
)
from eventplatform.events import EventProducer
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.migrate import upgrade
from eventplatform.projections.runner import ProjectionRunner, RunnerStats
from eventplatform.projections.store import ProjectionStore

try:
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event
    from eventsourcing.persistence import Tracking
    from eventsourcing.postgres import PostgresTrackingRecorder
    from eventsourcing.projection import Projection as PeerProjectionBase
    from eventsourcing.projection import ProjectionRunner as PeerRunner
    from eventsourcing.utils import get_topic
    from psycopg.sql import SQL, Identifier

    PEER_VERSION: str | None = importlib.metadata.version("eventsourcing")
except ImportError:
    PEER_VERSION = None

GOAL_EVENTS_PER_S = {"postgresql": 20_000, "sqlite": 50_000}
GOAL_BATCH_SIZE = 1000
BATCH_SIZES = (1, 100, 1000)
EVENTS_DEFAULT = 200_000
EVENTS_SINGLE_DEFAULT = 10_000
PEER_EVENTS_DEFAULT = 20_000
REPEAT_DEFAULT = 3
PARTITIONS_DEFAULT = 4
APPEND_CHUNK = 5_000
PEER_SAVE_CHUNK = 2_000
STEP_TIMEOUT_S = 900.0
POSTGRES_ADMIN_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


# ---------------------------------------------------------------- appending


def append_all(bootstrap: str, views: Sequence[PageViewed]) -> None:
    deadline = Deadline(STEP_TIMEOUT_S)
    with EventProducer(bootstrap) as producer:
        for start in range(0, len(views), APPEND_CHUNK):
            if deadline.passed():
                raise SystemExit("appending the events ran out of time")
            producer.append(views[start : start + APPEND_CHUNK])


# ---------------------------------------------------------------- databases


@dataclass(frozen=True)
class Sample:
    """One timed repetition: ``events`` applied in ``seconds`` (this process: ``cpu_seconds``)."""

    engine: str
    database: str
    batch_size: int
    events: int
    seconds: float
    cpu_seconds: float

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_seconds / self.events * 1e6


def server_url(admin_url: str, database: str) -> str:
    return make_url(admin_url).set(database=database).render_as_string(hide_password=False)


@contextmanager
def fresh_postgres(admin_url: str, prefix: str) -> Iterator[str]:
    """A new database on the admin URL's server; yields its URL, drops it afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server_url(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def fresh_database(kind: str, admin_url: str, scratch: Path) -> Iterator[str]:
    if kind == "postgresql":
        with fresh_postgres(admin_url, "ep_bench") as url:
            yield url
        return
    path = scratch / f"projections-{uuid.uuid4().hex[:10]}.db"
    try:
        yield f"sqlite:///{path}"
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


# ---------------------------------------------------------------- eventplatform runner


class Timer:
    """Notes when the runner got its partitions and when it committed the ``target``-th event.

    ``timed`` is the count committed at that moment (the target, or a little
    more when a batch crosses it); ``events`` the count at the last commit.
    """

    def __init__(self, target: int) -> None:
        self.target = target
        self.stop_event = threading.Event()
        self.started: tuple[float, float] | None = None
        self.finished: tuple[float, float] | None = None
        self.events = 0
        self.timed = 0

    def assigned(self, _partitions: list[tuple[str, int]]) -> None:
        if self.started is None:
            self.started = (time.perf_counter(), time.process_time())

    def committed(self, stats: RunnerStats) -> None:
        self.events = stats.events
        if self.finished is None and stats.events >= self.target:
            self.finished = (time.perf_counter(), time.process_time())
            self.timed = stats.events
            self.stop_event.set()


def run_eventplatform(url: str, kind: str, bootstrap: str, batch_size: int, events: int) -> Sample:
    engine = create_store_engine(url)
    try:
        upgrade(engine)
        metadata.create_all(engine)
        projection = page_view_projection(f"bench-{uuid.uuid4().hex[:10]}")
        clock = Timer(events)
        runner = ProjectionRunner(
            ProjectionStore(engine, projection),
            bootstrap,
            batch_size=batch_size,
            on_assign=clock.assigned,
            on_commit=clock.committed,
        )
        timeout = threading.Timer(STEP_TIMEOUT_S, clock.stop_event.set)
        timeout.start()
        try:
            runner.run(clock.stop_event)
        finally:
            timeout.cancel()
        check_rows(engine, clock.events)
    finally:
        engine.dispose()
    if clock.started is None or clock.finished is None:
        raise SystemExit(f"{kind} batch {batch_size}: applied {clock.events} of {events}")
    seconds = clock.finished[0] - clock.started[0]
    cpu_seconds = clock.finished[1] - clock.started[1]
    return Sample("eventplatform", kind, batch_size, clock.timed, seconds, cpu_seconds)


def check_rows(engine: Any, events: int) -> None:
    """Every applied event counted once in each table."""
    with engine.connect() as connection:
        for table in (page_stats, user_stats):
            total = connection.exec_driver_sql(f"SELECT SUM(views) FROM {table.name}").scalar()
            if total != events:
                raise SystemExit(f"{table.name}: {total} views counted, {events} applied")


# ---------------------------------------------------------------- the peer: eventsourcing

if PEER_VERSION is not None:

    class Visitor(Aggregate):
        """One user's page views, as an event-sourced aggregate."""

        def __init__(self, user_id: str) -> None:
            self.user_id = user_id

        @event("Viewed")
        def view(self, user_id: str, url: str, duration_ms: int) -> None:
            pass

    class PageViewLog(Application[uuid.UUID]):
        """The application whose event store the peer projection follows."""

    class PageStatsView(PostgresTrackingRecorder):
        """The two tables, upserted with the tracking record in one transaction per event."""

        def __init__(self, datastore: Any, **kwargs: Any) -> None:
            super().__init__(datastore, **kwargs)
            self.sql_create_statements.extend(
                [
                    SQL(
                        "CREATE TABLE IF NOT EXISTS {0}.bench_page_stats (url text PRIMARY KEY, "
                        "views bigint, total_duration_ms bigint, longest_ms integer, "
                        "first_seen timestamptz, last_seen timestamptz, last_user text)"
                    ).format(Identifier(self.datastore.schema)),
                    SQL(
                        "CREATE TABLE IF NOT EXISTS {0}.bench_user_stats (user_id text "
                        "PRIMARY KEY, views bigint, total_duration_ms bigint, first_url text, "
                        "last_url text, last_seen timestamptz)"
                    ).format(Identifier(self.datastore.schema)),
                ]
            )
            self.upsert_page = SQL(
                "INSERT INTO {0}.bench_page_stats AS t VALUES (%(url)s, 1, %(duration)s, "
                "%(duration)s, %(seen)s, %(seen)s, %(user)s) ON CONFLICT (url) DO UPDATE SET "
                "views = t.views + 1, total_duration_ms = t.total_duration_ms + %(duration)s, "
                "longest_ms = GREATEST(t.longest_ms, %(duration)s), "
                "first_seen = LEAST(t.first_seen, %(seen)s), "
                "last_seen = GREATEST(t.last_seen, %(seen)s), last_user = %(user)s"
            ).format(Identifier(self.datastore.schema))
            self.upsert_user = SQL(
                "INSERT INTO {0}.bench_user_stats AS t VALUES (%(user)s, 1, %(duration)s, "
                "%(url)s, %(url)s, %(seen)s) ON CONFLICT (user_id) DO UPDATE SET "
                "views = t.views + 1, total_duration_ms = t.total_duration_ms + %(duration)s, "
                "last_url = %(url)s, last_seen = GREATEST(t.last_seen, %(seen)s)"
            ).format(Identifier(self.datastore.schema))

        def record_view(
            self, user_id: str, url: str, duration_ms: int, seen: datetime, tracking: Tracking
        ) -> None:
            parameters = {"user": user_id, "url": url, "duration": duration_ms, "seen": seen}
            with self.datastore.transaction(commit=True) as cursor:
                self._insert_tracking(cursor, tracking)
                cursor.execute(self.upsert_page, parameters, prepare=True)
                cursor.execute(self.upsert_user, parameters, prepare=True)

        def total_views(self) -> tuple[int, int]:
            with self.datastore.transaction(commit=False) as cursor:
                pages = cursor.execute("SELECT SUM(views) AS n FROM bench_page_stats").fetchone()
                users = cursor.execute("SELECT SUM(views) AS n FROM bench_user_stats").fetchone()
            assert pages is not None and users is not None
            return int(pages["n"] or 0), int(users["n"] or 0)

    class PageStatsProjection(PeerProjectionBase[PageStatsView]):
        """Applies each ``Visitor.Viewed`` event; notes the first and the ``target``-th."""

        name = "pagestats"
        topics = (get_topic(Visitor.Viewed),)
        target = 0
        applied = 0
        started: tuple[float, float] | None = None
        finished: tuple[float, float] | None = None
        done = threading.Event()

        def process_event(self, domain_event: Any, tracking: Tracking) -> None:
            cls = type(self)
            if cls.started is None:
                cls.started = (time.perf_counter(), time.process_time())
            self.view.record_view(
                domain_event.user_id,
                domain_event.url,
                domain_event.duration_ms,
                domain_event.timestamp,
                tracking,
            )
            cls.applied += 1
            if cls.applied == cls.target:
                cls.finished = (time.perf_counter(), time.process_time())
                cls.done.set()


def peer_env(admin_url: str, app_database: str) -> dict[str, str]:
    url = make_url(admin_url)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": app_database,
        "POSTGRES_HOST": url.host or "127.0.0.1",
        "POSTGRES_PORT": str(url.port or 5432),
        "POSTGRES_USER": url.username or "postgres",
        "POSTGRES_PASSWORD": url.password or "",
    }


def record_peer_events(env: dict[str, str], views: Sequence[PageViewed]) -> int:
    """Record the views as ``Visitor.Viewed`` events; returns the last notification id."""
    application = PageViewLog(env=env)
    visitors: dict[str, Visitor] = {}
    deadline = Deadline(STEP_TIMEOUT_S)
    for start in range(0, len(views), PEER_SAVE_CHUNK):
        if deadline.passed():
            raise SystemExit("recording the peer's events ran out of time")
        touched: dict[str, Visitor] = {}
        for view in views[start : start + PEER_SAVE_CHUNK]:
            visitor = visitors.get(view.user_id)
            if visitor is None:
                visitor = visitors[view.user_id] = Visitor(view.user_id)
            visitor.view(view.user_id, view.url, view.duration_ms)
            touched[view.user_id] = visitor
        application.save(*touched.values())
    last = application.recorder.max_notification_id()
    application.close()
    assert last is not None
    return last


def run_peer(env: dict[str, str], view_database: str, events: int) -> Sample:
    PageStatsProjection.target = events
    PageStatsProjection.applied = 0
    PageStatsProjection.started = PageStatsProjection.finished = None
    PageStatsProjection.done = threading.Event()
    runner_env = {**env, "PAGESTATS_POSTGRES_DBNAME": view_database}
    with PeerRunner(
        application_class=PageViewLog,
        projection_class=PageStatsProjection,
        view_class=PageStatsView,
        env=runner_env,
    ) as runner:
        if not PageStatsProjection.done.wait(STEP_TIMEOUT_S):
            raise SystemExit(f"eventsourcing applied {PageStatsProjection.applied} of {events}")
        totals = runner.view.total_views()
    if totals != (events, events):
        raise SystemExit(f"eventsourcing tables counted {totals}, {events} applied")
    started, finished = PageStatsProjection.started, PageStatsProjection.finished
    assert started is not None and finished is not None
    return Sample(
        "eventsourcing", "postgresql", 1, events, finished[0] - started[0], finished[1] - started[1]
    )


def measure_peer(admin_url: str, views: Sequence[PageViewed], repeat: int) -> list[Sample]:
    samples = []
    with fresh_postgres(admin_url, "es_bench_app") as app_url:
        env = peer_env(admin_url, make_url(app_url).database or "")
        progress(f"eventsourcing: recording {len(views):,} events")
        record_peer_events(env, views)
        for repetition in range(repeat):
            with fresh_postgres(admin_url, "es_bench_view") as view_url:
                sample = run_peer(env, make_url(view_url).database or "", len(views))
            samples.append(sample)
            progress(
                f"eventsourcing postgresql repetition {repetition + 1}: "
                f"{sample.events_per_second:,.0f} events/s"
            )
    return samples


# ---------------------------------------------------------------- report


@dataclass(frozen=True)
class Plan:
    events: int
    events_single: int
    peer_events: int
    repeat: int
    partitions: int
    databases: tuple[str, ...]
    batch_sizes: tuple[int, ...]


def median_rate(samples: list[Sample], engine: str, database: str, batch_size: int) -> float:
    rates = [
        sample.events_per_second
        for sample in samples
        if (sample.engine, sample.database, sample.batch_size) == (engine, database, batch_size)
    ]
    return statistics.median(rates) if rates else float("nan")


def report(samples: list[Sample]) -> str:
    rows = [
        [
            "engine",
            "database",
            "batch size",
            "events",
            "events/s median (min-max)",
            "CPU µs/event (runner process)",
            "goal",
            "met?",
        ]
    ]
    keys = dict.fromkeys((s.engine, s.database, s.batch_size, s.events) for s in samples)
    for engine, database, batch_size, events in keys:
        group = [
            s
            for s in samples
            if (s.engine, s.database, s.batch_size, s.events)
            == (engine, database, batch_size, events)
        ]
        rate = Spread.of([s.events_per_second for s in group])
        cpu = statistics.median(s.cpu_us_per_event for s in group)
        goal = GOAL_EVENTS_PER_S[database] if engine == "eventplatform" else None
        goal_applies = goal is not None and batch_size == GOAL_BATCH_SIZE
        rows.append(
            [
                engine if engine == "eventplatform" else f"eventsourcing {PEER_VERSION}",
                database,
                str(batch_size) if engine == "eventplatform" else "1 (per event)",
                f"{events:,}",
                format_spread(rate),
                f"{cpu:,.0f}",
                f">= {goal:,}/s" if goal_applies else "-",
                ("yes" if rate.median >= goal else "no") if goal_applies and goal else "-",
            ]
        )
    return markdown_table(rows)


def ratios(samples: list[Sample], batch_sizes: Sequence[int]) -> list[str]:
    peer = median_rate(samples, "eventsourcing", "postgresql", 1)
    if peer != peer:  # no peer samples
        return []
    lines = []
    for batch_size in batch_sizes:
        ours = median_rate(samples, "eventplatform", "postgresql", batch_size)
        if ours == ours:
            lines.append(
                f"eventplatform (batch {batch_size}) / eventsourcing on PostgreSQL: "
                f"{ours / peer:.2f} ({ours:,.0f} / {peer:,.0f} events/s)"
            )
    return lines


# ---------------------------------------------------------------- main


def measure_eventplatform(
    plan: Plan, bootstrap: str, admin_url: str, scratch: Path
) -> list[Sample]:
    samples = []
    for database in plan.databases:
        for batch_size in plan.batch_sizes:
            events = plan.events_single if batch_size == 1 else plan.events
            for repetition in range(plan.repeat):
                with fresh_database(database, admin_url, scratch) as url:
                    sample = run_eventplatform(url, database, bootstrap, batch_size, events)
                samples.append(sample)
                progress(
                    f"eventplatform {database} batch {batch_size} repetition "
                    f"{repetition + 1}: {sample.events_per_second:,.0f} events/s"
                )
    return samples


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=EVENTS_DEFAULT, help="events per run")
    parser.add_argument(
        "--events-single",
        type=int,
        default=EVENTS_SINGLE_DEFAULT,
        help="events applied at batch size 1 (one transaction per event)",
    )
    parser.add_argument(
        "--peer-events", type=int, default=PEER_EVENTS_DEFAULT, help="events for eventsourcing"
    )
    parser.add_argument("--repeat", type=int, default=REPEAT_DEFAULT, help="runs per setting")
    parser.add_argument("--partitions", type=int, default=PARTITIONS_DEFAULT)
    parser.add_argument(
        "--database", choices=("sqlite", "postgresql"), action="append", default=None
    )
    parser.add_argument("--batch-size", type=int, action="append", default=None)
    parser.add_argument("--skip-peer", action="store_true", help="do not run eventsourcing")
    parser.add_argument(
        "--postgres",
        default=POSTGRES_ADMIN_DEFAULT,
        help="admin URL of the PostgreSQL server; fresh databases are made and dropped there",
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the scratch dir")
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> None:
    arguments = parse_arguments(argv)
    if not arguments.skip_peer and PEER_VERSION is None:
        raise SystemExit("eventsourcing is not installed: pip install -e '.[bench]' or --skip-peer")
    plan = Plan(
        events=arguments.events,
        events_single=min(arguments.events_single, arguments.events),
        peer_events=0 if arguments.skip_peer else min(arguments.peer_events, arguments.events),
        repeat=arguments.repeat,
        partitions=arguments.partitions,
        databases=tuple(arguments.database or ("sqlite", "postgresql")),
        batch_sizes=tuple(arguments.batch_size or BATCH_SIZES),
    )
    scratch = Path(tempfile.mkdtemp(prefix="bench-projections-", dir=arguments.data_dir))
    results: dict[str, Any] = {"plan": asdict(plan), "machine": describe_machine(scratch)}
    views = page_views(plan.events)
    broker = BrokerProcess(
        scratch / "log",
        overrides=[f"num.partitions={plan.partitions}", "group.initial.rebalance.delay.ms=0"],
    ).start()
    try:
        progress(f"appending {plan.events:,} events to {plan.partitions} partitions")
        append_all(broker.bootstrap, views)
        samples = measure_eventplatform(plan, broker.bootstrap, arguments.postgres, scratch)
        if plan.peer_events:
            samples += measure_peer(arguments.postgres, views[: plan.peer_events], plan.repeat)
    finally:
        broker.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    results["samples"] = [asdict(sample) for sample in samples]
    results["command"] = invocation(__file__, argv)
    results["peer"] = None if arguments.skip_peer else f"eventsourcing {PEER_VERSION}"
    print(f"command: {results['command']}\n")
    print(report(samples))
    for line in ratios(samples, plan.batch_sizes):
        print(f"\n{line}")
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
