"""``platform demo``: the whole platform on embedded defaults, in one command.

Each step prints what it did and how long it took:

1. a broker starts in this process, on a fresh data directory;
2. the migrations create the platform's and the three apps' tables (SQLite);
3. the generators append some hours of website traffic, of a fleet's
   metrics (one agent faulty for a while) and of services' logs (some lines
   leaking a password);
4. the apps' projection runners fold it all into SQL;
5. corrections: bot sessions are retracted, the faulty agent's points are
   replaced with the right values, and the leaking lines are redacted; the
   runners apply them;
6. Spark rebuilds one projection from the log into shadow tables and swaps
   them in; its tables must equal the runner's, row for row; then it
   downsamples the metrics to days;
7. the apps' named queries run and print as tables.

The broker's folder and the database stay behind for ``platform query``.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from eventplatform.apps.activity_tracking import app as activity
from eventplatform.apps.activity_tracking import bots
from eventplatform.apps.activity_tracking.simulator import TrafficShape, TrafficSimulator
from eventplatform.apps.log_aggregation import app as logs
from eventplatform.apps.log_aggregation.redaction import redact
from eventplatform.apps.log_aggregation.retention import ensure_topic
from eventplatform.apps.log_aggregation.simulator import LogShape, LogSimulator
from eventplatform.apps.log_aggregation.simulator import Simulation as LogSimulation
from eventplatform.apps.metrics import app as metrics
from eventplatform.apps.metrics.corrections import correct_points, rescaled_points
from eventplatform.apps.metrics.simulator import FAULTY_FACTOR, FleetShape, FleetSimulator
from eventplatform.apps.metrics.simulator import Simulation as FleetSimulation
from eventplatform.events import EventProducer
from eventplatform.log.config import BrokerConfig
from eventplatform.projections import migrate
from eventplatform.projections.apps import App
from eventplatform.projections.operations import projection_rows
from eventplatform.projections.query import named_parameters, run_named_query
from eventplatform.query_cli import render_table
from eventplatform.runtime import embedded_broker, running_projections, wait_caught_up

APPEND_CHUNK_EVENTS = 10_000
APPLY_TIMEOUT_S = 300.0
REPLAYED_PROJECTION = "activity.sessions"
BROKER_OVERRIDES = ("num.partitions=4", "group.initial.rebalance.delay.ms=0")
APPS: tuple[App, ...] = (activity, metrics, logs)
STREAMED = ("activity.traffic", "activity.sessions", "metrics.rollups", "logs.lines")
"""The projections the runners keep (``metrics.daily`` is Spark's, by downsampling)."""
SPARK_SETTINGS = {"spark.ui.showConsoleProgress": "false"}
"""The demo prints its own progress; Spark's bars would garble it."""
FLEET = FleetShape(interval_s=15.0, latency_samples=5)
SERVICES = LogShape(lines_per_second=1.0)

Echo = Callable[[str], Any]


class DemoError(Exception):
    """A step of the demo failed; the message says which and why."""


@dataclass(frozen=True)
class DemoSettings:
    directory: Path
    hours: float
    sessions_per_hour: float
    spark_master: str | None
    seed: int = 0

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.directory / 'projections.db'}"


def run_demo(settings: DemoSettings, echo: Echo) -> None:
    """Every step in order; raises DemoError when one fails (the replay check included)."""
    _fresh(settings)
    config = BrokerConfig.load(None, BROKER_OVERRIDES, data_dir=settings.data_dir, listen_port=0)
    url = settings.database_url
    with ExitStack() as stack:
        with _step(echo, f"starting a broker on {settings.data_dir}"):
            bootstrap = stack.enter_context(embedded_broker(config))
            echo(f"   listening on {bootstrap}")
        with _step(echo, "creating the tables (platform db upgrade)"):
            migrate.upgrade(url, list(APPS))
        hours = f"{settings.hours:g} hour{'' if settings.hours == 1 else 's'}"
        with _step(echo, f"simulating {hours} of website traffic, metrics and logs"):
            fleet, services = _simulate(settings, bootstrap, echo)
        with running_projections(STREAMED, list(APPS), url, bootstrap):
            with _step(echo, f"folding the events into SQL ({', '.join(STREAMED)})"):
                _wait_applied(url, bootstrap)
            with _step(echo, "correcting: bots, a faulty metrics agent, leaked passwords"):
                _correct(settings, bootstrap, fleet, services, echo)
                _wait_applied(url, bootstrap)
        with _step(echo, f"rebuilding {REPLAYED_PROJECTION} from the log with Spark"):
            _replay_check(settings, bootstrap, echo)
        with _step(echo, "downsampling the metrics to days with Spark (metrics.daily)"):
            _downsample(settings, bootstrap, echo)
    _print_queries(settings, echo)
    echo(
        f"\nThe log is in {settings.data_dir}, the projections in {url}.\n"
        f"Keep a broker running on it:  platform serve --data-dir {settings.data_dir}\n"
        'Query the projections:        platform query "SELECT * FROM logs_counts LIMIT 5"\n'
        "The apps' named queries:      platform query --list"
    )


def _wait_applied(url: str, bootstrap: str) -> None:
    """Until every streamed projection has applied its own topics to their ends."""
    for app in APPS:
        for projection in app.projections:
            if projection.name in STREAMED:
                topics = list(projection.topics)
                wait_caught_up([projection.name], url, bootstrap, topics, APPLY_TIMEOUT_S)


def _fresh(settings: DemoSettings) -> None:
    """The demo starts from nothing: an earlier demo's log and database go."""
    shutil.rmtree(settings.data_dir, ignore_errors=True)
    database = settings.directory / "projections.db"
    for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        path.unlink(missing_ok=True)
    settings.directory.mkdir(parents=True, exist_ok=True)


@contextmanager
def _step(echo: Echo, title: str) -> Iterator[None]:
    echo(f"-> {title}")
    started = time.perf_counter()
    try:
        yield
    except DemoError:
        raise
    except Exception as exc:
        raise DemoError(f"{title}: {exc}") from exc
    echo(f"   done in {time.perf_counter() - started:.1f} s")


def _simulate(
    settings: DemoSettings, bootstrap: str, echo: Echo
) -> tuple[FleetSimulation, LogSimulation]:
    end = datetime.now(UTC).replace(second=0, microsecond=0)
    begin = end - timedelta(hours=settings.hours)
    shape = replace(TrafficShape(), sessions_per_hour=settings.sessions_per_hour)
    sessions = list(TrafficSimulator(shape, seed=settings.seed).sessions(begin, end))
    events = sorted((event for session in sessions for event in session.events), key=_moment)
    fleet = FleetSimulator(FLEET, seed=settings.seed).run(begin, end)
    services = LogSimulator(SERVICES, seed=settings.seed).run(begin, end)
    ensure_topic(bootstrap)
    with EventProducer(bootstrap) as producer:
        for batch in (events, fleet.points, services.lines):
            for first in range(0, len(batch), APPEND_CHUNK_EVENTS):
                producer.append(batch[first : first + APPEND_CHUNK_EVENTS])
    bots_simulated = sum(session.bot for session in sessions)
    echo(f"   activity: {len(events)} events of {len(sessions)} sessions ({bots_simulated} bots)")
    echo(f"   metrics:  {len(fleet.points)} points of a fleet of {len(FleetSimulator().hosts())}")
    echo(f"   logs:     {len(services.lines)} lines ({services.leaking} leak a password)")
    return fleet, services


def _correct(
    settings: DemoSettings,
    bootstrap: str,
    fleet: FleetSimulation,
    services: LogSimulation,
    echo: Echo,
) -> None:
    url = settings.database_url
    retracted = bots.retract_bots(url, bootstrap)
    events = sum(retraction.events for retraction in retracted)
    echo(f"   retracted {len(retracted)} bot sessions ({events} events)")
    faulty = fleet.faulty
    if faulty is not None:
        right = rescaled_points(url, faulty.series, faulty.start, faulty.end, 1 / FAULTY_FACTOR)
        done = correct_points(
            url, bootstrap, faulty.series, faulty.start, faulty.end, right, "agent reported x100"
        )
        echo(
            f"   replaced {done.retracted} points of {faulty.series} "
            f"({faulty.start:%H:%M} to {faulty.end:%H:%M} UTC), a hundred times too large"
        )
    redacted = redact(url, bootstrap, services.leaked, "a password in the auth service's log")
    echo(f"   redacted {redacted.lines} log lines that held a password")


def _moment(event: Any) -> datetime:
    moment: datetime = event.at
    return moment


def _replay_check(settings: DemoSettings, bootstrap: str, echo: Echo) -> None:
    """Rebuild the projection in place; its tables must come out as the runner left them."""
    from eventplatform.spark_projections.replay import ReplayRequest, plan_ranges, rebuild
    from eventplatform.spark_projections.session import spark_session

    projection = next(p for p in activity.projections if p.name == REPLAYED_PROJECTION)
    live = projection_rows(settings.database_url, projection)
    # absolute: Spark's Python workers need not share this working directory
    options = {"bootstrap.servers": bootstrap, "dataDir": str(settings.data_dir.resolve())}
    ranges = plan_ranges(projection, settings.database_url, options, ReplayRequest())
    spark = spark_session(settings.spark_master, SPARK_SETTINGS)
    spark.sparkContext.setLogLevel("ERROR")
    summary = rebuild(spark, projection, settings.database_url, ranges, options, from_start=True)
    for line in summary.lines():
        echo(f"   {line}")
    rebuilt = projection_rows(settings.database_url, projection)
    rows = sum(len(table_rows) for table_rows in live.values())
    if rebuilt != live:
        differing = sorted(name for name in live if live[name] != rebuilt.get(name))
        raise DemoError(f"replay check failed: {', '.join(differing)} differ from the runner's")
    echo(f"   replay check passed: the rebuilt tables equal the live ones ({rows} rows)")


def _downsample(settings: DemoSettings, bootstrap: str, echo: Echo) -> None:
    from eventplatform.apps.metrics.downsample import downsample
    from eventplatform.spark_projections.session import spark_session

    options = {"bootstrap.servers": bootstrap, "dataDir": str(settings.data_dir.resolve())}
    spark = spark_session(settings.spark_master, SPARK_SETTINGS)
    summary = downsample(spark, settings.database_url, options)
    echo(f"   {summary.rows_written} day rows from {summary.events_read} events")


DEMO_PARAMETERS = {"logs.search": {"q": "login failed"}}
"""Parameters the demo gives named queries that need one."""
DEMO_ROWS = "8"
"""The demo shows a few rows of each query that takes a limit."""


def _print_queries(settings: DemoSettings, echo: Echo) -> None:
    window = f"{int(settings.hours * 60) + 60}m"
    for app in APPS:
        for named in app.queries:
            name = f"{app.name}.{named.name}"
            since = window if named.since_default is not None else None
            given = dict(DEMO_PARAMETERS.get(name, {}))
            if "limit" in named.parameters:
                given["limit"] = DEMO_ROWS
            parameters = named_parameters(named, since=since, given=given)
            result = run_named_query(settings.database_url, named, parameters)
            shown = f" --since {window}" if since else ""
            shown += "".join(f" --param {key}={value!r}" for key, value in given.items())
            echo(f"\n$ platform query {name}{shown}\n  ({named.description})")
            echo(render_table(result).rstrip("\n"))
