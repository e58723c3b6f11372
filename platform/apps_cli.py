"""``platform apps``: the bundled apps' own commands (traffic simulation, bot retraction)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import click

from eventplatform.db_cli import database_option, database_url_of, reported_errors
from eventplatform.projections_cli import bootstrap_option

SIMULATE_CHUNK_EVENTS = 10_000


@click.group()
def apps() -> None:
    """Commands of the bundled apps."""


@apps.group()
def activity() -> None:
    """Website activity tracking."""


def _moment(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@activity.command()
@bootstrap_option
@click.option(
    "--hours",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Length of the simulated window.",
)
@click.option(
    "--start",
    default=None,
    metavar="TIME",
    help="Start of the window (ISO 8601; UTC if no zone).  [default: --hours before now]",
)
@click.option(
    "--sessions-per-hour",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="Session starts per hour at the daily peak.",
)
@click.option(
    "--bot-share",
    type=click.FloatRange(0, 1),
    default=0.02,
    show_default=True,
    help="Share of sessions that are crawlers.",
)
@click.option("--seed", type=int, default=0, show_default=True)
def simulate(
    bootstrap: str,
    hours: float,
    start: str | None,
    sessions_per_hour: float,
    bot_share: float,
    seed: int,
) -> None:
    """Append simulated website traffic (sessions, page views, clicks, searches, bots)."""
    from dataclasses import replace

    from eventplatform.apps.activity_tracking.events import TOPIC
    from eventplatform.apps.activity_tracking.simulator import TrafficShape, TrafficSimulator
    from eventplatform.events import EventProducer

    begin = _moment(start) or datetime.now(UTC) - timedelta(hours=hours)
    shape = replace(TrafficShape(), sessions_per_hour=sessions_per_hour, bot_share=bot_share)
    simulator = TrafficSimulator(shape, seed=seed)
    sessions = list(simulator.sessions(begin, begin + timedelta(hours=hours)))
    events = sorted((e for session in sessions for e in session.events), key=lambda e: e.at)
    started = time.perf_counter()
    with EventProducer(bootstrap) as producer:
        for first in range(0, len(events), SIMULATE_CHUNK_EVENTS):
            producer.append(events[first : first + SIMULATE_CHUNK_EVENTS])
    seconds = time.perf_counter() - started
    bots = sum(session.bot for session in sessions)
    click.echo(
        f"appended {len(events)} events of {len(sessions)} sessions ({bots} bots) to "
        f"{TOPIC!r}, {begin:%Y-%m-%d %H:%M} to {begin + timedelta(hours=hours):%H:%M} UTC, "
        f"in {seconds:.1f} s"
    )


@activity.command()
@bootstrap_option
@click.option(
    "--listen",
    default="127.0.0.1:8080",
    show_default=True,
    help="host:port to accept beacons on (port 0 picks a free one).",
)
def collect(bootstrap: str, listen: str) -> None:
    """Accept JSON beacons over HTTP (POST /v1/beacons) and append them as events."""
    import trio

    from eventplatform.apps.activity_tracking.collector import (
        BEACONS_PATH,
        COLLECTOR_PRODUCER,
        Collector,
    )
    from eventplatform.events import EventProducer

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{listen!r} is not host:port", param_hint="--listen")

    async def run() -> None:
        with EventProducer(bootstrap, config=COLLECTOR_PRODUCER) as producer:
            collector = Collector(producer)
            async with trio.open_nursery() as nursery:
                bound = await nursery.start(collector.serve, host, int(port))
                click.echo(f"collecting beacons on http://{host}:{bound}{BEACONS_PATH}", err=True)

    try:
        trio.run(run)
    except KeyboardInterrupt:
        click.echo("stopped", err=True)


@activity.command("retract-bots")
@database_option
@bootstrap_option
@click.option(
    "--min-pages",
    type=click.IntRange(1),
    default=20,
    show_default=True,
    help="Pages a fast session needs to count as a bot.",
)
@click.option(
    "--max-seconds-per-page",
    type=click.FloatRange(min=0),
    default=3.0,
    show_default=True,
    help="Slower than this on average is a person.",
)
@click.option("--dry-run", is_flag=True, help="Only list the sessions it would retract.")
def retract_bots(
    database: str | None,
    bootstrap: str,
    min_pages: int,
    max_seconds_per_page: float,
    dry_run: bool,
) -> None:
    """Find bot sessions in the sessions projection and retract all their events."""
    from eventplatform.apps.activity_tracking import bots

    with reported_errors():
        done = bots.retract_bots(
            database_url_of(database),
            bootstrap,
            min_pages=min_pages,
            max_seconds_per_page=max_seconds_per_page,
            dry_run=dry_run,
        )
    verb = "would retract" if dry_run else "retracted"
    for retraction in done:
        click.echo(
            f"{verb} {retraction.session_id} ({retraction.events} events): {retraction.reason}"
        )
    click.echo(f"{verb} {len(done)} sessions, {sum(r.events for r in done)} events")


@apps.group()
def metrics() -> None:
    """Metrics: StatsD, Prometheus scrapes, rollups and quantiles."""


def _address(listen: str, option: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{listen!r} is not host:port", param_hint=option)
    return host.strip("[]"), int(port)


@metrics.command("simulate")
@bootstrap_option
@click.option(
    "--hours",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Length of the simulated window.",
)
@click.option(
    "--start",
    default=None,
    metavar="TIME",
    help="Start of the window (ISO 8601; UTC if no zone).  [default: --hours before now]",
)
@click.option("--seed", type=int, default=0, show_default=True)
def metrics_simulate(bootstrap: str, hours: float, start: str | None, seed: int) -> None:
    """Append what a simulated fleet's agents report (one of them faulty for a while)."""
    from eventplatform.apps.metrics.simulator import FleetSimulator
    from eventplatform.events import EventProducer

    begin = _moment(start) or datetime.now(UTC) - timedelta(hours=hours)
    simulation = FleetSimulator(seed=seed).run(begin, begin + timedelta(hours=hours))
    started = time.perf_counter()
    with EventProducer(bootstrap) as producer:
        for first in range(0, len(simulation.points), SIMULATE_CHUNK_EVENTS):
            producer.append(simulation.points[first : first + SIMULATE_CHUNK_EVENTS])
    click.echo(f"appended {len(simulation.points)} points in {time.perf_counter() - started:.1f} s")
    if simulation.faulty is not None:
        faulty = simulation.faulty
        click.echo(
            f"faulty agent: {faulty.series} from {faulty.start:%H:%M:%S} to "
            f"{faulty.end:%H:%M:%S} UTC (values 100 times too large)"
        )


@metrics.command("statsd")
@bootstrap_option
@click.option(
    "--listen",
    default="127.0.0.1:8125",
    show_default=True,
    help="host:port to receive StatsD datagrams on (UDP; port 0 picks a free one).",
)
def metrics_statsd(bootstrap: str, listen: str) -> None:
    """Receive the StatsD line protocol over UDP and append the points."""
    import logging

    import trio

    from eventplatform.apps.metrics.statsd import StatsdListener
    from eventplatform.events import EventProducer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    host, port = _address(listen, "--listen")

    async def run() -> None:
        with EventProducer(bootstrap, config={"linger.ms": 5}) as producer:
            listener = StatsdListener(producer)
            async with trio.open_nursery() as nursery:
                bound = await nursery.start(listener.serve, host, port)
                click.echo(f"receiving StatsD on udp://{host}:{bound}", err=True)

    try:
        trio.run(run)
    except KeyboardInterrupt:
        click.echo("stopped", err=True)


@metrics.command("scrape")
@bootstrap_option
@click.option(
    "--target",
    "targets",
    multiple=True,
    required=True,
    metavar="URL",
    help="A Prometheus endpoint (http://host:port/metrics); repeatable.",
)
@click.option("--job", default="prometheus", show_default=True, help="The job tag of the points.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=15.0,
    show_default=True,
    help="Seconds between scrapes.",
)
@click.option(
    "--scrapes",
    type=click.IntRange(1),
    default=None,
    help="Stop after this many rounds.  [default: run until stopped]",
)
def metrics_scrape(
    bootstrap: str, targets: tuple[str, ...], job: str, interval: float, scrapes: int | None
) -> None:
    """Scrape Prometheus text exposition from the targets and append the points.

    Counters become the increase since the previous scrape, so the first round
    appends only the gauges.
    """
    import logging

    from eventplatform.apps.metrics.prometheus import Scraper, Target
    from eventplatform.events import EventProducer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for url in targets:
        if not url.startswith(("http://", "https://")):
            raise click.BadParameter(f"{url!r} is not an http(s) URL", param_hint="--target")
    with EventProducer(bootstrap) as producer:
        scraper = Scraper(producer, [Target(url, job) for url in targets], interval_s=interval)
        try:
            for number, appended in enumerate(scraper.run(scrapes), start=1):
                failed = sum(maker.stats.failed for maker in scraper.makers.values())
                click.echo(f"round {number}: appended {appended} points ({failed} failed scrapes)")
        except KeyboardInterrupt:
            click.echo("stopped", err=True)


@metrics.command("correct")
@database_option
@bootstrap_option
@click.argument("series")
@click.option("--start", required=True, metavar="TIME", help="Window start (ISO 8601).")
@click.option("--end", required=True, metavar="TIME", help="Window end, excluded (ISO 8601).")
@click.option(
    "--scale",
    type=float,
    default=None,
    help="Replace each point by its value times this factor.  [default: delete the points]",
)
@click.option("--reason", required=True, help="Why the points are replaced.")
@click.option("--dry-run", is_flag=True, help="Only count the points it would replace.")
def metrics_correct(
    database: str | None,
    bootstrap: str,
    series: str,
    start: str,
    end: str,
    scale: float | None,
    reason: str,
    dry_run: bool,
) -> None:
    """Replace SERIES' points in [--start, --end): delete them, or rescale them (--scale)."""
    from eventplatform.apps.metrics.corrections import correct_points, rescaled_points

    begin, finish = _moment(start), _moment(end)
    assert begin is not None and finish is not None
    if finish <= begin:
        raise click.BadParameter("the window's end must come after its start", param_hint="--end")
    url = database_url_of(database)
    with reported_errors():
        replacements = []
        if scale is not None:
            replacements = rescaled_points(url, series, begin, finish, scale)
        done = correct_points(
            url, bootstrap, series, begin, finish, replacements, reason, dry_run=dry_run
        )
    verb = "would replace" if dry_run else "replaced"
    click.echo(
        f"{verb} {done.retracted} points of {series} with {done.replacements} points: {reason}"
    )


@metrics.command("downsample")
@database_option
@bootstrap_option
@click.option(
    "--data-dir",
    default=None,
    metavar="PATH",
    help="The broker's data directory: read segments directly.",
)
@click.option("--spark-master", default=None, metavar="URL", help="[default: local[*]]")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
def metrics_downsample(
    database: str | None,
    bootstrap: str,
    data_dir: str | None,
    spark_master: str | None,
    dry_run: bool,
) -> None:
    """Compute the per-day rollups and sketches (metrics.daily) from the log with Spark.

    The first run reads the whole log; later runs recompute only the days that
    events appended since touch.
    """
    from pathlib import Path

    from eventplatform.apps.metrics.downsample import downsample
    from eventplatform.spark_projections.errors import ReplayError
    from eventplatform.spark_projections.session import spark_session

    options = {"bootstrap.servers": bootstrap}
    if data_dir:
        options["dataDir"] = str(Path(data_dir).resolve())
    with reported_errors():
        try:
            spark = None if dry_run else spark_session(spark_master)
            summary = downsample(spark, database_url_of(database), options, dry_run=dry_run)
        except ReplayError as error:
            raise click.ClickException(str(error)) from error
    for line in summary.lines():
        click.echo(line)
