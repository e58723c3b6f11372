"""``platform apps activity``: simulated traffic, the beacon collector, bot retraction.

The app's declaration names :data:`commands` (``App(commands=...)``), so the
platform imports this module only when it builds ``platform apps``.
"""

from __future__ import annotations

import time

import click

from eventplatform.apps.activity_tracking import APP_NAME
from eventplatform.cli_support import (
    address,
    append_in_chunks,
    client_options,
    database_option,
    database_url_of,
    log_to_stderr,
    metrics_listen_option,
    metrics_socket_of,
    reported_errors,
    run_trio_until_interrupted,
    serve_metrics,
    window,
    window_options,
)
from eventplatform.events import ClientConfig


@click.group(name=APP_NAME)
def commands() -> None:
    """Website activity tracking."""


@commands.command()
@client_options
@window_options
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
def simulate(
    client: ClientConfig,
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

    begin, end = window(start, hours)
    shape = replace(TrafficShape(), sessions_per_hour=sessions_per_hour, bot_share=bot_share)
    simulator = TrafficSimulator(shape, seed=seed)
    sessions = list(simulator.sessions(begin, end))
    events = sorted((e for session in sessions for e in session.events), key=lambda e: e.at)
    started = time.perf_counter()
    append_in_chunks(client, events)
    seconds = time.perf_counter() - started
    bots = sum(session.bot for session in sessions)
    click.echo(
        f"appended {len(events)} events of {len(sessions)} sessions ({bots} bots) to "
        f"{TOPIC!r}, {begin:%Y-%m-%d %H:%M} to {end:%H:%M} UTC, in {seconds:.1f} s"
    )


@commands.command()
@client_options
@click.option(
    "--listen",
    default="127.0.0.1:8080",
    show_default=True,
    help="host:port to accept beacons on (port 0 picks a free one).",
)
@click.option(
    "--write-key",
    "write_keys",
    multiple=True,
    metavar="SITE=KEY",
    envvar="EVENTPLATFORM_COLLECTOR_WRITE_KEYS",
    help="A site's write key; beacons must carry one (X-Write-Key or ?key=). Repeatable; "
    "the variable takes them space-separated.",
)
@click.option(
    "--signing-secret",
    "signing_secrets",
    multiple=True,
    metavar="SITE=SECRET",
    envvar="EVENTPLATFORM_COLLECTOR_SIGNING_SECRETS",
    help="A server-side site's secret: its beacons must be signed (X-Signature: sha256=<HMAC "
    "of the body>). Repeatable; the variable takes them space-separated.",
)
@click.option(
    "--allow-origin",
    "allowed_origins",
    multiple=True,
    metavar="ORIGIN",
    help="A web origin (https://shop.example) browsers may send beacons from; others get "
    "403. Repeatable.",
)
@click.option(
    "--open",
    "open_to_all",
    is_flag=True,
    help="Accept beacons without a write key, from anyone who reaches the port.",
)
@metrics_listen_option
def collect(
    client: ClientConfig,
    listen: str,
    write_keys: tuple[str, ...],
    signing_secrets: tuple[str, ...],
    allowed_origins: tuple[str, ...],
    open_to_all: bool,
    metrics_listen: str | None,
) -> None:
    """Accept JSON beacons over HTTP (POST /v1/beacons) and append them as events."""
    import trio

    from eventplatform.apps.activity_tracking.collector import (
        BEACONS_PATH,
        COLLECTOR_PRODUCER,
        Collector,
        CollectorMetrics,
    )
    from eventplatform.events import EventProducer

    host, port = address(listen, "--listen")
    metrics_socket = metrics_socket_of(metrics_listen)
    log_to_stderr()
    if not write_keys and not open_to_all:
        raise click.UsageError(
            "give each site's write key (--write-key SITE=KEY, or "
            "$EVENTPLATFORM_COLLECTOR_WRITE_KEYS), or --open to accept beacons from anyone"
        )
    keys = {key: site for site, key in _pairs(write_keys, "--write-key", "SITE=KEY")} or None
    secrets = {
        site: secret.encode()
        for site, secret in _pairs(signing_secrets, "--signing-secret", "SITE=SECRET")
    }
    unknown = sorted(set(secrets) - set((keys or {}).values()))
    if unknown:
        raise click.UsageError(f"--signing-secret for a site without a write key: {unknown[0]}")

    async def run() -> None:
        with EventProducer(client, config=COLLECTOR_PRODUCER) as producer:
            collector = Collector(
                producer,
                write_keys=keys,
                signing_secrets=secrets,
                allowed_origins=allowed_origins,
            )
            async with trio.open_nursery() as nursery:
                if metrics_socket is not None:
                    await nursery.start(serve_metrics, metrics_socket, CollectorMetrics(collector))
                bound = await nursery.start(collector.serve, host, port)
                click.echo(f"collecting beacons on http://{host}:{bound}{BEACONS_PATH}", err=True)

    run_trio_until_interrupted(run)


def _pairs(given: tuple[str, ...], option: str, shape: str) -> list[tuple[str, str]]:
    pairs = []
    for pair in given:
        name, sep, value = pair.partition("=")
        if not sep or not name or not value:
            raise click.UsageError(f"{option} {pair!r} is not {shape}")
        pairs.append((name, value))
    return pairs


@commands.command("retract-bots")
@database_option
@client_options
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
    client: ClientConfig,
    min_pages: int,
    max_seconds_per_page: float,
    dry_run: bool,
) -> None:
    """Find bot sessions in the sessions projection and retract all their events."""
    from eventplatform.apps.activity_tracking import bots

    with reported_errors():
        done = bots.retract_bots(
            database_url_of(database),
            client,
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
