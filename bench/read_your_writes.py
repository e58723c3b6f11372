"""Read-your-writes benchmark: from an append to its row, through the wait API, at a fixed rate.

Everything runs with the defaults a user gets: the runner's batch size and
poll timeout, the producer's settings, and the wait API
(``wait_until_applied``) called as its documentation shows, with the
database URL, right after ``append`` returns, with its default timeout.

The workload is orders. ``OrderPlaced(order_id, customer_id, amount_cents)``
events, keyed by customer (1,000 customers, fixed seed), go to a new topic of
``--partitions`` partitions per run, created before the run with the configs
the SDK gives the event topics it creates (entity versions on; none on
revisions whose SDK creates none, or with ``--plain-topics``), on a
``platform serve`` broker started for the benchmark (fresh data directory,
deleted at the end). One projection folds each event into two tables:
``bench_ryw_orders``, one row per order (``Only`` merges), and
``bench_ryw_customers``, per customer the order count (``Count``), the total
(``Sum``) and the last order time (``Max``, so each event also writes an
``ep_event_index`` row).

Each run, for each ``--database`` (SQLite, PostgreSQL) and each ``--rate``
(500 and 2,000 events/s), gets a fresh database (a new SQLite file, or a new
PostgreSQL database created and dropped on the server of ``--postgres``),
migrated (``upgrade``) and with the projection's tables created, and a new
consumer group. A :class:`ProjectionRunner` with its defaults runs in a
background thread of this process. Once the group has assigned it the
partitions, the main thread appends single events on a fixed schedule (the
i-th at i / rate seconds) for ``--warmup`` seconds and then ``--seconds``
more. Appending one event at a time and waiting for each acknowledgement
(milliseconds each, ``linger.ms`` included) cannot keep 2,000 events/s, so
the schedule goes through ``submit`` (which sends and returns a future
without waiting) from one ``EventProducer``, except for a sample
of about ``--samples-per-second`` slots per second (every 10th event at
500/s, every 40th at 2,000/s). Each sampled slot goes to a pool of
32 threads, each of which does what a request handler would:
``refs = producer.append([event])``, then
``wait_until_applied(database_url, projection, refs)``. Samples of the
warm-up are taken but not counted. For each sample:

* **append**: the time ``append`` took (sending, and waiting for the log's
  acknowledgement, ``acks=all``);
* **wait API**: from ``append`` returning to ``wait_until_applied``
  returning; this is the read-your-writes latency (the CPU time the request
  thread spends in ``wait_until_applied`` goes to ``--json``);
* **direct query**: from ``append`` returning to the first direct query of
  ``bench_ryw_orders`` that returns the event's row. One thread queries for
  all the sampled rows not seen yet, each time the runner reports a commit
  (its ``on_commit`` callback wakes the thread) and each time a sample is
  added, so this is about the earliest a reader could have seen the row,
  with no polling interval of its own.

Reported per (database, rate): the achieved rate, the number of samples,
p50, p99 and max of each latency, and CPU microseconds per event applied
between the first and the last commit of the measured window: of this whole
process (user + system, every thread: the producer, the sampled requests,
whose waits given a URL each build an engine and connect, the runner,
librdkafka's threads) and of the runner's thread alone. The goals are
p50 < 20 ms and p99 < 50 ms for the wait API's latency. A run at a rate
this machine cannot keep shows it in the achieved rate.

``--wait-engine`` passes the application's engine (a pool of one connection
per request thread) to the wait API instead of the URL. Run
``python -m bench.read_your_writes --quick`` for a smoke run of about a minute.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import tempfile
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from confluent_kafka.admin import AdminClient, NewTopic
from sqlalchemy import BigInteger, Column, DateTime, Engine, MetaData, String, bindparam, select

from bench.harness import (
    BrokerProcess,
    Deadline,
    describe_machine,
    invocation,
    markdown_table,
    progress,
)
from bench.projections import fresh_database
from eventplatform.events import Envelope, Event, EventProducer, EventRef
from eventplatform.projections.database import create_store_engine, reading
from eventplatform.projections.errors import ApplyTimeoutError
from eventplatform.projections.merge import Count, Max, Only, Sum
from eventplatform.projections.migrate import upgrade
from eventplatform.projections.model import Projection, Row, merge_column, projection_table
from eventplatform.projections.operations import wait_until_applied
from eventplatform.projections.runner import ProjectionRunner, RunnerStats
from eventplatform.projections.store import ProjectionStore

try:
    from eventplatform.events.topics import EVENT_TOPIC_CONFIG
except ImportError:  # older revisions' SDK created no topics, so gave them no configs
    EVENT_TOPIC_CONFIG = {}

GOAL_P50_MS = 20.0
GOAL_P99_MS = 50.0
RATES = (500, 2_000)
SECONDS_DEFAULT = 20.0
WARMUP_S_DEFAULT = 3.0
QUICK_SECONDS = 5.0
QUICK_WARMUP_S = 2.0
SAMPLES_PER_S_DEFAULT = 50.0
PARTITIONS_DEFAULT = 4
REQUEST_THREADS = 32
POSTGRES_ADMIN_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
PROJECTION_NAME = "bench.read_your_writes"
EVENT_TYPE = "benchryw.order_placed"
CUSTOMERS = 1_000
AMOUNT_CENTS_MAX = 100_000
SEED = 20261121
KEY_LENGTH = 64
TOPIC_TIMEOUT_S = 30.0
ASSIGN_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 120.0
RUNNER_STOP_TIMEOUT_S = 30.0
OBSERVER_IDLE_S = 0.05
MS = 1000.0


# ---------------------------------------------------------------- the workload


class Order(Event):
    """The payload of ``OrderPlaced``; each run's class adds its type and topic."""

    order_id: str
    customer_id: str
    amount_cents: int


def order_placed_class(topic: str) -> type[Order]:
    """``OrderPlaced``, type ``benchryw.order_placed`` v1 keyed by customer, on ``topic``."""
    keywords = {"type": EVENT_TYPE, "version": 1, "key": "customer_id", "topic": topic}
    return cast(type[Order], types.new_class("OrderPlaced", (Order,), keywords))


def orders_of(event_class: type[Order], count: int) -> list[Order]:
    generator = random.Random(SEED)
    return [
        event_class(
            order_id=f"order-{index:08d}",
            customer_id=f"customer-{generator.randrange(CUSTOMERS):04d}",
            amount_cents=generator.randrange(AMOUNT_CENTS_MAX),
        )
        for index in range(count)
    ]


metadata = MetaData()

orders_table = projection_table(
    "bench_ryw_orders",
    metadata,
    Column("order_id", String(KEY_LENGTH), primary_key=True),
    merge_column("customer_id", String(KEY_LENGTH), Only()),
    merge_column("amount_cents", BigInteger, Only()),
    merge_column("placed_at", DateTime(timezone=True), Only()),
)

customers_table = projection_table(
    "bench_ryw_customers",
    metadata,
    Column("customer_id", String(KEY_LENGTH), primary_key=True),
    merge_column("orders", BigInteger, Count()),
    merge_column("total_cents", BigInteger, Sum()),
    merge_column("last_order_at", DateTime(timezone=True), Max()),
)


def order_projection(event_class: type[Order], group_id: str) -> Projection:
    orders, customers = orders_table, customers_table

    def order_rows(envelope: Envelope[Order]) -> Iterator[Row]:
        order, placed_at = envelope.event, envelope.occurred_at
        yield Row(
            orders,
            order_id=order.order_id,
            customer_id=order.customer_id,
            amount_cents=order.amount_cents,
            placed_at=placed_at,
        )
        yield Row(
            customers,
            customer_id=order.customer_id,
            total_cents=order.amount_cents,
            last_order_at=placed_at,
        )

    projection = Projection(PROJECTION_NAME, tables=[orders, customers], group_id=group_id)
    projection.on(event_class)(order_rows)
    return projection


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 1, config=config)
    futures = admin.create_topics([new], request_timeout=TOPIC_TIMEOUT_S)
    futures[topic].result(timeout=TOPIC_TIMEOUT_S)


# ---------------------------------------------------------------- databases


# ---------------------------------------------------------------- observing the runner


@dataclass(frozen=True)
class Commit:
    """What the runner's ``on_commit`` saw: when, the CPU clocks, and events applied so far."""

    at: float
    process_cpu: float
    thread_cpu: float
    events: int


class RunnerWatch:
    """The runner's callbacks: the assignment, and each commit (also waking the observer)."""

    def __init__(self, wake: threading.Event) -> None:
        self.assigned_event = threading.Event()
        self.commits: list[Commit] = []
        self.wake = wake

    def assigned(self, _partitions: list[tuple[str, int]]) -> None:
        self.assigned_event.set()

    def committed(self, stats: RunnerStats) -> None:
        now = time.perf_counter()
        self.commits.append(Commit(now, time.process_time(), time.thread_time(), stats.events))
        self.wake.set()

    @property
    def events(self) -> int:
        return self.commits[-1].events if self.commits else 0


class DirectObserver:
    """Queries ``bench_ryw_orders`` for the sampled rows not seen yet, whenever woken."""

    def __init__(
        self, engine: Engine, wake: threading.Event, timeout_s: float, wakeups_max: int
    ) -> None:
        """``wakeups_max`` bounds the queries: one per sample, commit, or idle interval."""
        self.engine = engine
        self.wake = wake
        self.timeout_s = timeout_s
        self.wakeups_max = wakeups_max
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.pending: set[str] = set()
        self.seen: dict[str, float] = {}
        self.queries = 0
        self.failure: BaseException | None = None

    def watch(self, order_id: str) -> None:
        with self.lock:
            self.pending.add(order_id)
        self.wake.set()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the run
            self.failure = exc

    def _run(self) -> None:
        column = orders_table.c.order_id
        query = select(column).where(column.in_(bindparam("ids", expanding=True)))
        deadline = Deadline(self.timeout_s)
        with reading(self.engine) as connection:
            for _ in range(self.wakeups_max):
                if self.stop.is_set() or deadline.passed():
                    break
                self.wake.wait(OBSERVER_IDLE_S)
                self.wake.clear()
                with self.lock:
                    ids = list(self.pending)
                if not ids:
                    continue
                found = connection.execute(query, {"ids": ids}).scalars().all()
                now = time.perf_counter()
                connection.rollback()
                self.queries += 1
                with self.lock:
                    for order_id in found:
                        self.pending.discard(order_id)
                        self.seen[order_id] = now


# ---------------------------------------------------------------- one run


@dataclass(frozen=True)
class Request:
    """One sampled append and its wait: perf_counter times (``visible`` None if the wait
    timed out), and the CPU time of the request thread in the wait."""

    order_id: str
    measured: bool
    called: float
    acked: float
    visible: float | None
    wait_cpu: float


@dataclass
class Run:
    database: str
    rate: int
    wait_target: str
    scheduled: int
    appended: int
    achieved_rate: float
    schedule_lag_max_ms: float
    append_ms: list[float] = field(default_factory=list)
    wait_ms: list[float] = field(default_factory=list)
    wait_cpu_ms: list[float] = field(default_factory=list)
    direct_ms: list[float] = field(default_factory=list)
    timeouts: int = 0
    unseen: int = 0
    process_cpu_us_per_event: float = math.nan
    runner_cpu_us_per_event: float = math.nan
    commits: int = 0
    observer_queries: int = 0


@dataclass(frozen=True)
class Plan:
    databases: tuple[str, ...]
    rates: tuple[int, ...]
    seconds: float
    warmup_s: float
    samples_per_s: float
    partitions: int
    wait_engine: bool
    topic_config: dict[str, str]

    @property
    def run_timeout_s(self) -> float:
        """The longest one (database, rate) run may take."""
        return self.warmup_s + self.seconds + DRAIN_TIMEOUT_S + ASSIGN_TIMEOUT_S


def sample_every(rate: int, samples_per_s: float) -> int:
    return max(1, round(rate / samples_per_s))


def request(
    producer: EventProducer,
    wait_target: Engine | str,
    observer: DirectObserver,
    event: Order,
    measured: bool,
) -> Request:
    """What a request handler does: append, then wait until the projection has it."""
    called = time.perf_counter()
    refs: list[EventRef] = producer.append([event])
    acked = time.perf_counter()
    observer.watch(event.order_id)
    cpu = time.thread_time()
    try:
        wait_until_applied(wait_target, PROJECTION_NAME, refs)
    except ApplyTimeoutError:
        return Request(event.order_id, measured, called, acked, None, time.thread_time() - cpu)
    visible = time.perf_counter()
    return Request(event.order_id, measured, called, acked, visible, time.thread_time() - cpu)


def run_once(plan: Plan, bootstrap: str, url: str, database: str, rate: int) -> Run:
    topic = f"benchryw-{database}-{rate}-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, plan.partitions, plan.topic_config)
    event_class = order_placed_class(topic)
    warm_count = round(rate * plan.warmup_s)
    events = orders_of(event_class, warm_count + round(rate * plan.seconds))

    engine = create_store_engine(url)
    app_engine = create_store_engine(url, pool_size=REQUEST_THREADS + 1)
    upgrade(engine)
    metadata.create_all(engine)
    wake = threading.Event()
    watch = RunnerWatch(wake)
    # Each sample and each commit (at most one per event) wakes it once, besides the idle ones.
    wakeups_max = 2 * len(events) + round(plan.run_timeout_s / OBSERVER_IDLE_S)
    observer = DirectObserver(app_engine, wake, plan.run_timeout_s, wakeups_max)
    projection = order_projection(event_class, f"bench-ryw-{uuid.uuid4().hex[:10]}")
    runner = ProjectionRunner(
        ProjectionStore(engine, projection),
        bootstrap,
        on_assign=watch.assigned,
        on_commit=watch.committed,
    )
    stop = threading.Event()
    failures: list[BaseException] = []

    def run_runner() -> None:
        try:
            runner.run(stop)
        except BaseException as exc:  # reported below
            failures.append(exc)

    runner_thread = threading.Thread(target=run_runner, name="projection runner", daemon=True)
    observer_thread = threading.Thread(target=observer.run, name="direct observer", daemon=True)
    wait_target: Engine | str = app_engine if plan.wait_engine else url
    try:
        runner_thread.start()
        observer_thread.start()
        if not watch.assigned_event.wait(ASSIGN_TIMEOUT_S):
            raise SystemExit(f"{database} {rate}/s: the runner got no partitions")
        with (
            EventProducer(bootstrap) as producer,
            ThreadPoolExecutor(REQUEST_THREADS, thread_name_prefix="request") as pool,
        ):

            def handle(event: Order, measured: bool) -> Future[Request]:
                return pool.submit(request, producer, wait_target, observer, event, measured)

            pacing = pace(producer, handle, events, rate, warm_count, plan.samples_per_s)
            drain = Deadline(DRAIN_TIMEOUT_S)
            requests = [item.result(timeout=drain.remaining()) for item in pacing.requests]
        for _ in range(round(DRAIN_TIMEOUT_S / OBSERVER_IDLE_S)):
            if watch.events >= pacing.sent or drain.passed() or failures:
                break
            time.sleep(OBSERVER_IDLE_S)
        if not failures:
            check_rows(engine, pacing.sent, watch.events)
    finally:
        stop.set()
        observer.stop.set()
        wake.set()
        runner_thread.join(RUNNER_STOP_TIMEOUT_S)
        observer_thread.join(RUNNER_STOP_TIMEOUT_S)
        engine.dispose()
        app_engine.dispose()
    if failures:
        raise SystemExit(f"{database} {rate}/s: the runner failed: {failures[0]!r}")
    if observer.failure is not None:
        raise SystemExit(f"{database} {rate}/s: direct queries failed: {observer.failure!r}")
    measured_from = pacing.started + warm_count / rate
    measured_slots = max(pacing.sent - warm_count, 0)
    measured_seconds = pacing.elapsed - warm_count / rate
    result = Run(
        database=database,
        rate=rate,
        wait_target="engine" if plan.wait_engine else "url",
        scheduled=len(events),
        appended=pacing.sent,
        achieved_rate=measured_slots / measured_seconds if measured_seconds > 0 else math.nan,
        schedule_lag_max_ms=pacing.lag_max_s * MS,
        observer_queries=observer.queries,
    )
    fill_latencies(result, requests, observer.seen)
    fill_cpu(result, watch.commits, measured_from, pacing.started + pacing.elapsed)
    return result


@dataclass(frozen=True)
class Pacing:
    """How the schedule went: start (perf_counter), length, appends sent, the worst lag."""

    started: float
    elapsed: float
    sent: int
    lag_max_s: float
    requests: list[Future[Request]]


def pace(
    producer: EventProducer,
    handle: Callable[[Order, bool], Future[Request]],
    events: Sequence[Order],
    rate: int,
    warm_count: int,
    samples_per_s: float,
) -> Pacing:
    """Append ``events`` on schedule: the sampled ones through ``handle`` (a request
    thread's ``append`` and wait), the others through ``submit``."""
    every = sample_every(rate, samples_per_s)
    errors: list[BaseException] = []

    def noted(future: Future[list[EventRef]]) -> None:
        error = future.exception()
        if error is not None:
            errors.append(error)

    requests: list[Future[Request]] = []
    deadline = Deadline(len(events) / rate + DRAIN_TIMEOUT_S)
    lag_max = 0.0
    started = time.perf_counter()
    sent = 0
    for index, event in enumerate(events):
        if deadline.passed():
            break
        delay = started + index / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        elif index >= warm_count:
            lag_max = max(lag_max, -delay)
        if index % every == 0:
            requests.append(handle(event, index >= warm_count))
        else:
            producer.submit([event]).add_done_callback(noted)
        sent += 1
    elapsed = time.perf_counter() - started
    producer.flush()
    if errors:
        raise SystemExit(f"{len(errors)} appends failed: {errors[0]!r}")
    return Pacing(started, elapsed, sent, lag_max, requests)


def fill_latencies(result: Run, requests: Sequence[Request], seen: dict[str, float]) -> None:
    for item in requests:
        if not item.measured:
            continue
        result.append_ms.append((item.acked - item.called) * MS)
        if item.visible is None:
            result.timeouts += 1
        else:
            result.wait_ms.append((item.visible - item.acked) * MS)
            result.wait_cpu_ms.append(item.wait_cpu * MS)
        direct = seen.get(item.order_id)
        if direct is None:
            result.unseen += 1
        else:
            result.direct_ms.append(max(direct - item.acked, 0.0) * MS)


def fill_cpu(result: Run, commits: Sequence[Commit], start: float, end: float) -> None:
    """CPU per event between the first and the last commit inside [start, end]."""
    inside = [commit for commit in commits if start <= commit.at <= end]
    result.commits = len(inside)
    if len(inside) < 2 or inside[-1].events == inside[0].events:
        return
    first, last = inside[0], inside[-1]
    applied = last.events - first.events
    result.process_cpu_us_per_event = (last.process_cpu - first.process_cpu) / applied * 1e6
    result.runner_cpu_us_per_event = (last.thread_cpu - first.thread_cpu) / applied * 1e6


def check_rows(engine: Engine, appended: int, applied: int) -> None:
    """Every appended event applied once: one order row each, counted once per customer."""
    with reading(engine) as connection:
        rows = connection.exec_driver_sql("SELECT COUNT(*) FROM bench_ryw_orders").scalar()
        counted = connection.exec_driver_sql("SELECT SUM(orders) FROM bench_ryw_customers").scalar()
    if not rows == counted == applied == appended:
        raise SystemExit(
            f"{appended} appended, {applied} applied, {rows} order rows, {counted} counted"
        )


# ---------------------------------------------------------------- report


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` of 1); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def latency_cell(values: Sequence[float]) -> str:
    if not values:
        return "-"
    p50, p99 = percentile(values, 0.50), percentile(values, 0.99)
    return f"{p50:,.1f} / {p99:,.1f} / {max(values):,.1f}"


def goal_cell(values: Sequence[float], fraction: float, goal_ms: float) -> str:
    if not values:
        return "-"
    return "yes" if percentile(values, fraction) < goal_ms else "no"


def cpu_cell(run: Run) -> str:
    """Process (runner thread) CPU µs per event; "-" when the window held under two commits."""
    if math.isnan(run.process_cpu_us_per_event):
        return "-"
    return f"{run.process_cpu_us_per_event:,.0f} ({run.runner_cpu_us_per_event:,.0f})"


def report(runs: Sequence[Run]) -> str:
    rows = [
        [
            "database",
            "rate/s (achieved)",
            "samples",
            "append ms p50 / p99 / max",
            "append → wait API returns, ms p50 / p99 / max",
            "append → direct query sees row, ms p50 / p99 / max",
            "CPU µs/event: process (runner thread)",
            f"p50 < {GOAL_P50_MS:.0f} ms",
            f"p99 < {GOAL_P99_MS:.0f} ms",
        ]
    ]
    for run in runs:
        samples = f"{len(run.append_ms):,}"
        if run.timeouts or run.unseen:
            samples += f" ({run.timeouts} timed out, {run.unseen} unseen)"
        rows.append(
            [
                run.database,
                f"{run.rate:,} ({run.achieved_rate:,.0f})",
                samples,
                latency_cell(run.append_ms),
                latency_cell(run.wait_ms),
                latency_cell(run.direct_ms),
                cpu_cell(run),
                goal_cell(run.wait_ms, 0.50, GOAL_P50_MS),
                goal_cell(run.wait_ms, 0.99, GOAL_P99_MS),
            ]
        )
    return markdown_table(rows)


def summary(run: Run) -> dict[str, Any]:
    """The run without its raw latencies, with their percentiles."""
    fields = asdict(run)
    for name in ("append_ms", "wait_ms", "wait_cpu_ms", "direct_ms"):
        values = fields.pop(name)
        fields[name] = {
            "count": len(values),
            "p50": percentile(values, 0.50),
            "p90": percentile(values, 0.90),
            "p99": percentile(values, 0.99),
            "max": max(values) if values else math.nan,
        }
    return fields


# ---------------------------------------------------------------- main


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database", choices=("sqlite", "postgresql"), action="append", default=None
    )
    parser.add_argument("--rate", type=int, action="append", default=None, help="events/s")
    parser.add_argument("--seconds", type=float, default=None, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=None, help="seconds before measuring")
    parser.add_argument(
        "--samples-per-second",
        type=float,
        default=SAMPLES_PER_S_DEFAULT,
        help="sampled appends per second (each a request thread's append and wait)",
    )
    parser.add_argument("--partitions", type=int, default=PARTITIONS_DEFAULT)
    parser.add_argument(
        "--plain-topics",
        action="store_true",
        help="create the topics without the configs of the SDK's event topics",
    )
    parser.add_argument(
        "--wait-engine",
        action="store_true",
        help="give the wait API the application's engine instead of the database URL",
    )
    parser.add_argument(
        "--postgres",
        default=POSTGRES_ADMIN_DEFAULT,
        help="admin URL of the PostgreSQL server; fresh databases are made and dropped there",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run: {QUICK_SECONDS:.0f} s per rate after {QUICK_WARMUP_S:.0f} s warm-up",
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the scratch dir")
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> None:
    arguments = parse_arguments(argv)
    quick = arguments.quick
    warmup_s = QUICK_WARMUP_S if quick else WARMUP_S_DEFAULT
    plan = Plan(
        databases=tuple(arguments.database or ("sqlite", "postgresql")),
        rates=tuple(arguments.rate or RATES),
        seconds=arguments.seconds or (QUICK_SECONDS if quick else SECONDS_DEFAULT),
        warmup_s=warmup_s if arguments.warmup is None else arguments.warmup,
        samples_per_s=arguments.samples_per_second,
        partitions=arguments.partitions,
        wait_engine=arguments.wait_engine,
        topic_config={} if arguments.plain_topics else dict(EVENT_TOPIC_CONFIG),
    )
    scratch = Path(tempfile.mkdtemp(prefix="bench-read-your-writes-", dir=arguments.data_dir))
    results: dict[str, Any] = {"plan": asdict(plan), "machine": describe_machine(scratch)}
    broker = BrokerProcess(scratch / "log", overrides=["group.initial.rebalance.delay.ms=0"])
    broker.start()
    runs: list[Run] = []
    deadline = Deadline(plan.run_timeout_s * len(plan.databases) * len(plan.rates))
    try:
        for database in plan.databases:
            for rate in plan.rates:
                if deadline.passed():
                    raise SystemExit(f"ran out of time before {database} at {rate:,}/s")
                progress(
                    f"{database} at {rate:,}/s: {plan.warmup_s:g} s warm-up, "
                    f"{plan.seconds:g} s measured, 1 append in "
                    f"{sample_every(rate, plan.samples_per_s)} sampled"
                )
                with fresh_database(database, arguments.postgres, scratch) as url:
                    run = run_once(plan, broker.bootstrap, url, database, rate)
                runs.append(run)
                progress(
                    f"{database} at {rate:,}/s: wait API p50 "
                    f"{percentile(run.wait_ms, 0.5):.1f} ms, p99 "
                    f"{percentile(run.wait_ms, 0.99):.1f} ms ({len(run.wait_ms)} samples)"
                )
    finally:
        broker.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    results["runs"] = [summary(run) for run in runs]
    results["raw_ms"] = [
        {"append": run.append_ms, "wait": run.wait_ms, "direct": run.direct_ms} for run in runs
    ]
    results["command"] = invocation(__file__, argv)
    print(f"command: {results['command']}\n")
    print(report(runs))
    wait_target = "the application's engine" if plan.wait_engine else "the database URL"
    configs = ", ".join(f"{name}={value}" for name, value in plan.topic_config.items())
    print(f"\nThe wait API is given {wait_target}. Topic configs: {configs or 'none'}.")
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
