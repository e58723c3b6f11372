"""``platform demo``: the whole platform on embedded defaults, in one command.

Each step prints what it did and how long it took:

1. a broker starts in this process, on a fresh data directory in the demo's own
   folder (``.eventplatform/demo``: not the folders ``platform serve`` and
   ``--database`` use by default);
2. the migrations create the platform's and the demo apps' tables (SQLite);
3. the apps' simulations append some hours of events: with the bundled
   apps, website traffic, a fleet's metrics (one agent faulty for a while)
   and services' logs (some lines leaking a password);
4. the apps' projection runners fold it all into SQL;
5. corrections: bot sessions are retracted, the faulty agent's points are
   replaced with the right values, and the leaking lines are redacted; the
   runners apply them;
6. Spark rebuilds a projection from the log into shadow tables and swaps
   them in; its tables must equal the runner's, row for row; then it
   downsamples the metrics to days;
7. the apps' named queries run and print as tables.

The demo imports no app. Its apps are the bundled apps, which it asks for
by name, and the installed apps, each that declares its part,
``App(demo="package.module:attribute")``, an
:class:`~eventplatform.projections.AppDemo` saying what to simulate, correct,
replay and compute with Spark. The broker's folder and the database stay
behind for ``platform query``.

A run replaces what an earlier demo left in its folder, which it knows by the
:data:`DEMO_MARKER` file there. A folder with anything else in it is refused
unless ``reset`` is given: the demo never deletes data it did not make.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from eventplatform.client_config import ClientConfig
from eventplatform.events import Event, EventProducer
from eventplatform.log.config import BrokerConfig
from eventplatform.projections import AppDemo, DemoRun, DemoSimulation, migrate
from eventplatform.projections.apps import (
    App,
    AppError,
    find_projection,
    installed_apps,
    resolve_reference,
)
from eventplatform.projections.operations import projection_rows
from eventplatform.projections.query import named_parameters, run_named_query
from eventplatform.query_cli import render_table
from eventplatform.runtime import embedded_broker, running_projections, wait_caught_up

APPEND_CHUNK_EVENTS = 10_000
APPLY_TIMEOUT_S = 300.0
BROKER_OVERRIDES = ("num.partitions=4", "group.initial.rebalance.delay.ms=0")
STORY_ORDER = ("activity", "metrics", "logs")
"""The bundled apps in the order the demo tells their story; other apps follow, by name."""
DEMO_DIRECTORY_DEFAULT = Path(".eventplatform/demo")
DEMO_MARKER = "made-by-platform-demo"
"""The file that marks a folder as the demo's, so that a later run may replace it."""
SPARK_SETTINGS = {"spark.ui.showConsoleProgress": "false"}
"""The demo prints its own progress; Spark's bars would garble it."""

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
    reset: bool = False
    """Replace the folder's contents even when no earlier demo made them."""

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.directory / 'projections.db'}"


@dataclass(frozen=True)
class DemoApp:
    """An installed app and its part of the demo."""

    app: App
    demo: AppDemo


def demo_apps(apps: Sequence[App] | None = None) -> list[DemoApp]:
    """The apps (by default the installed ones and the bundled ones) that declare a part of
    the demo, in story order."""
    try:
        found = [DemoApp(app, _part(app)) for app in _apps(apps) if app.demo is not None]
    except AppError as exc:
        raise DemoError(str(exc)) from exc
    if not found:
        raise DemoError("no installed app declares a part of the demo (App(demo=...))")
    return sorted(found, key=_story_position)


def _apps(apps: Sequence[App] | None) -> Sequence[App]:
    # The bundled apps are not installed apps: the demo asks for the ones it tells of.
    return installed_apps(STORY_ORDER) if apps is None else apps


def _part(app: App) -> AppDemo:
    assert app.demo is not None
    part = resolve_reference(app.demo, what=f"demo of app {app.name}")
    if not isinstance(part, AppDemo):
        raise AppError(f"demo of app {app.name} {app.demo!r}: resolves to {type(part).__name__}")
    return part


def run_demo(settings: DemoSettings, echo: Echo) -> None:
    """Every step in order; raises DemoError when one fails (the replay check included)."""
    parts = demo_apps()
    apps = [part.app for part in parts]
    streamed = [name for part in parts for name in part.demo.streamed]
    prepare_directory(settings)
    config = BrokerConfig.load(None, BROKER_OVERRIDES, data_dir=settings.data_dir, listen_port=0)
    url = settings.database_url
    with ExitStack() as stack:
        with _step(echo, f"starting a broker on {settings.data_dir}"):
            address = stack.enter_context(embedded_broker(config))
            echo(f"   listening on {address}")
        # the demo's own broker is plaintext, whatever the environment says of other clusters
        bootstrap = ClientConfig(address)
        run = _demo_run(settings, bootstrap)
        with _step(echo, "creating the tables (platform db upgrade)"):
            migrate.upgrade(url, apps)
        hours = f"{settings.hours:g} hour{'' if settings.hours == 1 else 's'}"
        stories = _listing([part.demo.simulates for part in parts])
        with _step(echo, f"simulating {hours} of {stories}"):
            simulations = _simulate(parts, run, echo)
        with running_projections(streamed, apps, url, bootstrap):
            with _step(echo, f"folding the events into SQL ({', '.join(streamed)})"):
                _wait_applied(parts, url, bootstrap)
            corrected = ", ".join(part.demo.corrects for part in parts if part.demo.corrects)
            with _step(echo, f"correcting: {corrected}"):
                _correct(simulations, run, echo)
                _wait_applied(parts, url, bootstrap)
        _spark_steps(parts, settings, run, echo)
    _print_queries(parts, settings, echo)
    echo(
        f"\nThe log is in {settings.data_dir}, the projections in {url}.\n"
        f"Keep a broker running on it:  platform serve --data-dir {settings.data_dir}\n"
        f"Query the projections:        platform query --database {url} "
        '"SELECT * FROM logs_counts LIMIT 5"\n'
        f"The apps' named queries:      platform query --database {url} --list\n"
        f"Or, for every command:        export EVENTPLATFORM_DATABASE_URL={url}\n"
        f"Open the console in a browser: platform console --database {url}\n"
        "  (with the broker above serving; it prints the address to open, "
        "http://127.0.0.1:8080/ by default)"
    )


def _demo_run(settings: DemoSettings, bootstrap: ClientConfig) -> DemoRun:
    """The window ends at this minute; Spark's source reads the demo's log directly."""
    end = datetime.now(UTC).replace(second=0, microsecond=0)
    # absolute: Spark's Python workers need not share this working directory
    options = {**bootstrap.spark_options(), "dataDir": str(settings.data_dir.resolve())}
    return DemoRun(
        bootstrap=bootstrap,
        database_url=settings.database_url,
        begin=end - timedelta(hours=settings.hours),
        end=end,
        seed=settings.seed,
        sessions_per_hour=settings.sessions_per_hour,
        source_options=options,
    )


def _story_position(part: DemoApp) -> tuple[int, str]:
    name = part.app.name
    return (STORY_ORDER.index(name) if name in STORY_ORDER else len(STORY_ORDER), name)


def _listing(words: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def _wait_applied(parts: Sequence[DemoApp], url: str, bootstrap: ClientConfig) -> None:
    """Until every streamed projection has applied its own topics to their ends."""
    for part in parts:
        for projection in part.app.projections:
            if projection.name in part.demo.streamed:
                topics = list(projection.topics)
                wait_caught_up([projection.name], url, bootstrap, topics, APPLY_TIMEOUT_S)


def prepare_directory(settings: DemoSettings) -> None:
    """The demo starts from nothing in its folder: an earlier demo's log and database go.

    Raises DemoError, deleting nothing, for a folder that holds anything no demo made
    (no :data:`DEMO_MARKER`), unless ``settings.reset``."""
    directory = settings.directory
    if directory.exists() and not directory.is_dir():
        raise DemoError(f"{directory} is a file, not a folder for the demo")
    contents = sorted(path.name for path in directory.iterdir()) if directory.is_dir() else []
    if contents and DEMO_MARKER not in contents and not settings.reset:
        shown = ", ".join(contents[:5]) + (", ..." if len(contents) > 5 else "")
        raise DemoError(
            f"{directory} holds data the demo did not make ({shown}); give the demo "
            "another --directory, or --reset to delete what is there"
        )
    if contents:
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    (directory / DEMO_MARKER).write_text(
        "This folder is platform demo's: a later run of the demo replaces all of it.\n"
    )


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
    parts: Sequence[DemoApp], run: DemoRun, echo: Echo
) -> list[tuple[DemoApp, DemoSimulation]]:
    """Each app's simulation, appended in story order; one report line per app."""
    simulations = [(part, part.demo.simulate(run)) for part in parts]
    with EventProducer(run.bootstrap) as producer:
        for _, simulation in simulations:
            _append(producer, simulation.events)
    width = max(len(part.app.name) for part in parts) + 2
    for part, simulation in simulations:
        echo(f"   {part.app.name + ':':<{width}}{simulation.report}")
    return simulations


def _append(producer: EventProducer, events: Sequence[Event]) -> None:
    for first in range(0, len(events), APPEND_CHUNK_EVENTS):
        producer.append(events[first : first + APPEND_CHUNK_EVENTS])


def _correct(
    simulations: Sequence[tuple[DemoApp, DemoSimulation]], run: DemoRun, echo: Echo
) -> None:
    for _, simulation in simulations:
        for line in simulation.correct(run):
            echo(f"   {line}")


def _spark_steps(
    parts: Sequence[DemoApp], settings: DemoSettings, run: DemoRun, echo: Echo
) -> None:
    """The replay checks, then the apps' own Spark jobs, each a step."""
    for part in parts:
        for name in part.demo.replayed:
            with _step(echo, f"rebuilding {name} from the log with Spark"):
                _replay_check(part.app, name, settings, run, echo)
    for part in parts:
        for spark_step in part.demo.spark_steps:
            with _step(echo, spark_step.title):
                from eventplatform.spark_projections.session import spark_session

                spark = spark_session(settings.spark_master, SPARK_SETTINGS)
                for line in spark_step.run(spark, run):
                    echo(f"   {line}")


def _replay_check(app: App, name: str, settings: DemoSettings, run: DemoRun, echo: Echo) -> None:
    """Rebuild the projection in place; its tables must come out as the runner left them."""
    from eventplatform.spark_projections.replay import ReplayRequest, plan_ranges, rebuild
    from eventplatform.spark_projections.session import spark_session

    projection = find_projection(name, [app])
    live = projection_rows(run.database_url, projection)
    options = run.source_options
    ranges = plan_ranges(projection, run.database_url, options, ReplayRequest())
    spark = spark_session(settings.spark_master, SPARK_SETTINGS)
    spark.sparkContext.setLogLevel("ERROR")
    summary = rebuild(spark, projection, run.database_url, ranges, options, from_start=True)
    for line in summary.lines():
        echo(f"   {line}")
    rebuilt = projection_rows(run.database_url, projection)
    rows = sum(len(table_rows) for table_rows in live.values())
    if rebuilt != live:
        differing = sorted(table for table in live if live[table] != rebuilt.get(table))
        raise DemoError(f"replay check failed: {', '.join(differing)} differ from the runner's")
    echo(f"   replay check passed: the rebuilt tables equal the live ones ({rows} rows)")


DEMO_ROWS = "8"
"""The demo shows a few rows of each query that takes a limit."""


def _print_queries(parts: Sequence[DemoApp], settings: DemoSettings, echo: Echo) -> None:
    window = f"{int(settings.hours * 60) + 60}m"
    for part in parts:
        app = part.app
        for named in app.queries:
            name = f"{app.name}.{named.name}"
            since = window if named.since_default is not None else None
            given = dict(part.demo.query_parameters.get(named.name, {}))
            if "limit" in named.parameters:
                given["limit"] = DEMO_ROWS
            parameters = named_parameters(named, since=since, given=given)
            result = run_named_query(settings.database_url, named, parameters, allow_superuser=True)
            shown = f" --since {window}" if since else ""
            shown += "".join(f" --param {key}={value!r}" for key, value in given.items())
            echo(f"\n$ platform query {name}{shown}\n  ({named.description})")
            echo(render_table(result).rstrip("\n"))
