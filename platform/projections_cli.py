"""``platform projections``: run projections, report their status, retry dead letters,
rebuild one whose definition changed."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import click

from eventplatform.cli_support import (
    client_options,
    database_option,
    database_url_of,
    metrics_listen_option,
    metrics_socket_of,
    reported_errors,
)
from eventplatform.client_config import ClientConfig
from eventplatform.db_cli import apps_option, load_apps


@click.group()
def projections() -> None:
    """Run SQL projections and inspect them."""


@projections.command("run")
@click.argument("name")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="Most events applied in one SQL transaction.",
)
@click.option(
    "--consumer",
    "-c",
    "consumer_settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A librdkafka consumer setting, e.g. session.timeout.ms=10000; repeatable.",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
@click.option(
    "--progress-interval",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds between the progress lines it logs (events applied, lag).",
)
@click.option(
    "--rebuild/--no-rebuild",
    default=True,
    show_default=True,
    help="When NAME's definition changed since its tables were built, rebuild them from "
    "the log with Spark before running (the live tables serve until the swap); with "
    "--no-rebuild, stop and say so instead.",
)
@metrics_listen_option
@client_options
@database_option
@apps_option
def projections_run(
    name: str,
    batch_size: int,
    consumer_settings: tuple[str, ...],
    log_level: str,
    progress_interval: float,
    rebuild: bool,
    metrics_listen: str | None,
    client: ClientConfig,
    database: str | None,
    app_references: tuple[str, ...],
) -> None:
    """Run projection NAME as a member of its consumer group until SIGINT or SIGTERM.

    If NAME's definition changed since its tables were built, the tables are first
    rebuilt from the whole log under the new definition (as `platform projections
    rebuild` does), unless --no-rebuild."""
    from eventplatform.projections.operations import run_projection

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if rebuild:
        _rebuild_if_changed(name, client, database_url_of(database), app_references)
    metrics_socket = metrics_socket_of(metrics_listen)
    stop = threading.Event()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signal_number, lambda *_: stop.set())
    with reported_errors():
        runner = run_projection(
            name,
            load_apps(app_references, database=database_url_of(database)),
            database_url=database_url_of(database),
            bootstrap=client,
            batch_size=batch_size,
            consumer_config=_settings(consumer_settings),
            stop=stop,
            metrics_socket=metrics_socket,
            progress_interval_s=progress_interval,
        )
    stats = runner.stats
    click.echo(
        f"{name}: stopped after {stats.events} event{'' if stats.events == 1 else 's'} in "
        f"{stats.batches} batch{'' if stats.batches == 1 else 'es'} ({stats.parked} parked, "
        f"{stats.conflicts} checkpoint conflict{'' if stats.conflicts == 1 else 's'})"
    )


def _rebuild_if_changed(
    name: str, client: ClientConfig, url: str, app_references: tuple[str, ...]
) -> None:
    """Rebuild NAME's tables first when they were built under another definition."""
    from eventplatform.projections.apps import find_projection
    from eventplatform.projections.operations import definition_change

    with reported_errors():
        projection = find_projection(name, load_apps(app_references, database=url))
        if definition_change(url, projection) is None:
            return
    click.echo(
        f"{name}: its definition changed since its tables were built; rebuilding them from "
        "the log with Spark first (the live tables serve until the swap)"
    )
    _rebuild(projection, client, url, spark_master=None, spark_settings=())


def _rebuild(
    projection: Any,
    client: ClientConfig,
    url: str,
    *,
    spark_master: str | None,
    spark_settings: tuple[str, ...],
) -> None:
    from eventplatform.spark_projections.errors import ReplayError
    from eventplatform.spark_projections.evolving import rebuild_definition
    from eventplatform.spark_projections.session import parse_pairs

    with reported_errors():
        try:
            outcome = rebuild_definition(
                projection,
                url,
                client.spark_options(),
                spark_master=spark_master,
                spark_settings=parse_pairs(",".join(spark_settings), source="--spark-conf"),
            )
        except ReplayError as error:
            raise click.ClickException(str(error)) from error
    for line in outcome.lines():
        click.echo(line)


@projections.command("rebuild")
@click.argument("name")
@click.option("--spark-master", default=None, metavar="URL", help="[default: local[*]]")
@click.option(
    "--spark-conf",
    "spark_settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A spark.* setting; repeatable.",
)
@client_options
@database_option
@apps_option
def projections_rebuild(
    name: str,
    spark_master: str | None,
    spark_settings: tuple[str, ...],
    client: ClientConfig,
    database: str | None,
    app_references: tuple[str, ...],
) -> None:
    """Rebuild NAME's tables from the whole log under its current definition, with Spark.

    The tables are computed into shadow tables while the live ones keep serving
    (and a running runner keeps applying; the rebuild catches up with it), then
    swapped in with the checkpoints at the rebuild's end and the definition's
    fingerprint, in one transaction. A runner stopped because the definition
    changed then runs again from there.
    """
    from eventplatform.projections.apps import find_projection

    url = database_url_of(database)
    with reported_errors():
        projection = find_projection(name, load_apps(app_references, database=url))
    _rebuild(projection, client, url, spark_master=spark_master, spark_settings=spark_settings)


@projections.command("list")
@database_option
@apps_option
def projections_list(database: str | None, app_references: tuple[str, ...]) -> None:
    """List installed and registered projections with their status."""
    from eventplatform.projections.operations import projection_status

    with reported_errors():
        statuses = projection_status(
            load_apps(app_references, database=database_url_of(database)),
            database_url=database_url_of(database),
            bootstrap=None,
        )
    for status in statuses:
        tables = ", ".join(status.rows) or "-"
        click.echo(f"{status.name}\t{status.status}\tgroup {status.group_id}\ttables {tables}")


@projections.command("status")
@click.argument("name", required=False)
@client_options
@database_option
@apps_option
def projections_status(
    name: str | None, client: ClientConfig, database: str | None, app_references: tuple[str, ...]
) -> None:
    """Lag in events and seconds, last error, parked events and rows per table."""
    from eventplatform.projections.operations import projection_status

    with reported_errors():
        statuses = projection_status(
            load_apps(app_references, database=database_url_of(database)),
            database_url=database_url_of(database),
            bootstrap=client,
            name=name,
        )
    for status in statuses:
        seconds = "-" if status.lag_seconds is None else f"{status.lag_seconds:.1f}s"
        click.echo(f"{status.name}: {status.status}")
        click.echo(f"  group: {status.group_id}")
        if status.lag_error is not None:
            click.echo(f"  lag: unknown ({status.lag_error})")
        else:
            events = f"{status.lag_events} event{'' if status.lag_events == 1 else 's'}"
            click.echo(f"  lag: {events}, {seconds}")
        for partition in status.partitions:
            click.echo(
                f"    {partition.topic}/{partition.partition}: next {partition.next_offset}, "
                f"end {partition.end_offset}, lag {partition.lag_events}"
            )
        click.echo(f"  parked events: {status.parked}")
        click.echo(f"  last error: {status.last_error or '-'}")
        for table, count in status.rows.items():
            shown = "no such table (run platform db upgrade)" if count is None else count
            click.echo(f"  rows {table}: {shown}")


@projections.command("retry")
@click.argument("name")
@click.option(
    "--id", "ids", type=int, multiple=True, help="Retry only this dead letter; repeatable."
)
@client_options
@database_option
@apps_option
def projections_retry(
    name: str,
    ids: tuple[int, ...],
    client: ClientConfig,
    database: str | None,
    app_references: tuple[str, ...],
) -> None:
    """Apply NAME's parked events again; the ones that still fail stay parked."""
    from eventplatform.projections.operations import retry_dead_letters

    with reported_errors():
        outcome = retry_dead_letters(
            name,
            load_apps(app_references, database=database_url_of(database)),
            database_url=database_url_of(database),
            bootstrap=client,
            ids=ids,
        )
    click.echo(f"{name}: {outcome.retried} applied, {outcome.still_parked} still parked")


def _settings(pairs: tuple[str, ...]) -> dict[str, str]:
    settings = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--consumer")
        settings[key.strip()] = value.strip()
    return settings
