"""``platform demo``: the whole platform on embedded defaults, in one command.

Each step prints what it did and how long it took:

1. a broker starts in this process, on a fresh data directory;
2. the migrations create the platform's and the apps' tables (SQLite);
3. the activity app's simulator appends some hours of website traffic;
4. the app's projection runners fold it into SQL;
5. bot sessions are found in the projection and retracted by corrections,
   which the runners apply;
6. Spark rebuilds one projection from the log into shadow tables and swaps
   them in; its tables must equal the runner's, row for row;
7. the app's named queries run and print as tables.

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
from eventplatform.apps.activity_tracking.events import TOPIC
from eventplatform.apps.activity_tracking.simulator import TrafficShape, TrafficSimulator
from eventplatform.events import EventProducer
from eventplatform.log.broker.config import BrokerConfig
from eventplatform.projections import migrate
from eventplatform.projections.operations import projection_rows
from eventplatform.projections.query import named_parameters, run_named_query
from eventplatform.query_cli import render_table
from eventplatform.runtime import embedded_broker, running_projections, wait_caught_up

APPEND_CHUNK_EVENTS = 10_000
APPLY_TIMEOUT_S = 300.0
REPLAYED_PROJECTION = "activity.sessions"
BROKER_OVERRIDES = ("num.partitions=4", "group.initial.rebalance.delay.ms=0")

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
    apps = [activity]
    names = [projection.name for projection in activity.projections]
    config = BrokerConfig.load(None, BROKER_OVERRIDES, data_dir=settings.data_dir, listen_port=0)
    with ExitStack() as stack:
        with _step(echo, f"starting a broker on {settings.data_dir}"):
            bootstrap = stack.enter_context(embedded_broker(config))
            echo(f"   listening on {bootstrap}")
        with _step(echo, "creating the tables (platform db upgrade)"):
            migrate.upgrade(settings.database_url, apps)
        hours = f"{settings.hours:g} hour{'' if settings.hours == 1 else 's'}"
        with _step(echo, f"simulating {hours} of website traffic"):
            echo(f"   {_simulate(settings, bootstrap)}")
        with running_projections(names, apps, settings.database_url, bootstrap):
            with _step(echo, f"folding the events into SQL ({', '.join(names)})"):
                wait_caught_up(names, settings.database_url, bootstrap, [TOPIC], APPLY_TIMEOUT_S)
            with _step(echo, "retracting bot sessions with corrections"):
                retracted = bots.retract_bots(settings.database_url, bootstrap)
                events = sum(retraction.events for retraction in retracted)
                echo(f"   retracted {len(retracted)} bot sessions ({events} events)")
                wait_caught_up(names, settings.database_url, bootstrap, [TOPIC], APPLY_TIMEOUT_S)
        with _step(echo, f"rebuilding {REPLAYED_PROJECTION} from the log with Spark"):
            _replay_check(settings, bootstrap, echo)
    _print_queries(settings, echo)
    echo(
        f"\nThe log is in {settings.data_dir}, the projections in {settings.database_url}.\n"
        f"Keep a broker running on it:  platform serve --data-dir {settings.data_dir}\n"
        'Query the projections:        platform query "SELECT * FROM activity_referrers"\n'
        "The apps' named queries:      platform query --list"
    )


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


def _simulate(settings: DemoSettings, bootstrap: str) -> str:
    shape = replace(TrafficShape(), sessions_per_hour=settings.sessions_per_hour)
    end = datetime.now(UTC).replace(second=0, microsecond=0)
    begin = end - timedelta(hours=settings.hours)
    sessions = list(TrafficSimulator(shape, seed=settings.seed).sessions(begin, end))
    events = sorted((event for session in sessions for event in session.events), key=_moment)
    with EventProducer(bootstrap) as producer:
        for first in range(0, len(events), APPEND_CHUNK_EVENTS):
            producer.append(events[first : first + APPEND_CHUNK_EVENTS])
    bots_simulated = sum(session.bot for session in sessions)
    return f"appended {len(events)} events of {len(sessions)} sessions ({bots_simulated} bots)"


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
    spark = spark_session(settings.spark_master)
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


def _print_queries(settings: DemoSettings, echo: Echo) -> None:
    window = f"{int(settings.hours * 60) + 60}m"
    for named in activity.queries:
        since = window if named.since_default is not None else None
        parameters = named_parameters(named, since=since, given={})
        result = run_named_query(settings.database_url, named, parameters)
        shown = f" --since {window}" if since else ""
        echo(f"\n$ platform query activity.{named.name}{shown}\n  ({named.description})")
        echo(render_table(result).rstrip("\n"))
