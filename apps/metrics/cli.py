"""``platform apps metrics``: simulation, StatsD, Prometheus scrapes, corrections, downsampling.

The app's declaration names :data:`commands` (``App(commands=...)``), so the
platform imports this module only when it builds ``platform apps``.
"""

from __future__ import annotations

import click

from eventplatform.apps.metrics import APP_NAME
from eventplatform.cli_support import (
    address,
    append_in_chunks,
    client_options,
    database_option,
    database_url_of,
    log_to_stderr,
    metrics_listen_option,
    metrics_socket_of,
    moment,
    reported_errors,
    run_trio_until_interrupted,
    serve_metrics,
    window,
    window_options,
)
from eventplatform.events import ClientConfig


@click.group(name=APP_NAME)
def commands() -> None:
    """Metrics: StatsD, Prometheus scrapes, rollups and quantiles."""


@commands.command("simulate")
@client_options
@window_options
def metrics_simulate(client: ClientConfig, hours: float, start: str | None, seed: int) -> None:
    """Append what a simulated fleet's agents report (one of them faulty for a while)."""
    from eventplatform.apps.metrics.simulator import FleetSimulator

    simulation = FleetSimulator(seed=seed).run(*window(start, hours))
    append_in_chunks(client, simulation.points)
    click.echo(f"appended {len(simulation.points)} points")
    if simulation.faulty is not None:
        faulty = simulation.faulty
        click.echo(
            f"faulty agent: {faulty.series} from {faulty.start:%H:%M:%S} to "
            f"{faulty.end:%H:%M:%S} UTC (values 100 times too large)"
        )


@commands.command("statsd")
@client_options
@click.option(
    "--listen",
    default="127.0.0.1:8125",
    show_default=True,
    help="host:port to receive StatsD datagrams on (UDP; port 0 picks a free one).",
)
@metrics_listen_option
def metrics_statsd(client: ClientConfig, listen: str, metrics_listen: str | None) -> None:
    """Receive the StatsD line protocol over UDP and append the points."""

    import trio

    from eventplatform.apps.metrics.statsd import StatsdCollector, StatsdListener
    from eventplatform.events import EventProducer

    log_to_stderr()
    host, port = address(listen, "--listen")
    metrics_socket = metrics_socket_of(metrics_listen)

    async def run() -> None:
        with EventProducer(client, config={"linger.ms": 5}) as producer:
            listener = StatsdListener(producer)
            async with trio.open_nursery() as nursery:
                if metrics_socket is not None:
                    collector = StatsdCollector(listener)
                    await nursery.start(serve_metrics, metrics_socket, collector)
                bound = await nursery.start(listener.serve, host, port)
                click.echo(f"receiving StatsD on udp://{host}:{bound}", err=True)

    run_trio_until_interrupted(run)


@commands.command("scrape")
@client_options
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="URL",
    help="A Prometheus endpoint (http://host:port/metrics); repeatable.",
)
@click.option(
    "--targets-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="More targets, a line each: URL and an optional job ('#' starts a comment).",
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
    client: ClientConfig,
    targets: tuple[str, ...],
    targets_file: str | None,
    job: str,
    interval: float,
    scrapes: int | None,
) -> None:
    """Scrape Prometheus text exposition from the targets and append the points.

    Counters become the increase since the previous scrape, so the first round
    appends only the gauges.
    """
    from pathlib import Path

    from eventplatform.apps.metrics.prometheus import Scraper, Target, TargetError, read_targets
    from eventplatform.events import EventProducer

    log_to_stderr()
    try:
        chosen = [Target.of(url, job) for url in targets]
        if targets_file is not None:
            chosen += read_targets(Path(targets_file).read_text(), job)
    except TargetError as exc:
        raise click.BadParameter(str(exc), param_hint="--target or --targets-file") from exc
    if not chosen:
        raise click.UsageError("give --target or --targets-file")
    with EventProducer(client) as producer:
        scraper = Scraper(producer, chosen, interval_s=interval)
        try:
            for number, appended in enumerate(scraper.run(scrapes), start=1):
                failed = sum(maker.stats.failed for maker in scraper.makers.values())
                click.echo(f"round {number}: appended {appended} points ({failed} failed scrapes)")
        except KeyboardInterrupt:
            click.echo("stopped", err=True)


@commands.command("correct")
@database_option
@client_options
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
    client: ClientConfig,
    series: str,
    start: str,
    end: str,
    scale: float | None,
    reason: str,
    dry_run: bool,
) -> None:
    """Replace SERIES' points in [--start, --end): delete them, or rescale them (--scale)."""
    from eventplatform.apps.metrics.corrections import correct_points, rescaled_points

    begin, finish = moment(start), moment(end, "--end")
    assert begin is not None and finish is not None
    if finish <= begin:
        raise click.BadParameter("the window's end must come after its start", param_hint="--end")
    url = database_url_of(database)
    with reported_errors():
        replacements = []
        if scale is not None:
            replacements = rescaled_points(url, series, begin, finish, scale)
        done = correct_points(
            url, client, series, begin, finish, replacements, reason, dry_run=dry_run
        )
    verb = "would replace" if dry_run else "replaced"
    click.echo(
        f"{verb} {done.retracted} points of {series} with {done.replacements} points: {reason}"
    )


@commands.command("downsample")
@database_option
@client_options
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
    client: ClientConfig,
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
    from eventplatform.spark_projections import ReplayError, spark_session

    options = client.spark_options()
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
