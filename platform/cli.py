"""The ``platform`` command line. Commands parse arguments and call one function."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from eventplatform.cli_failures import PlatformGroup
from eventplatform.cli_support import metrics_listen_option
from eventplatform.interrupts import python_sigint
from eventplatform.tool_options import cluster_options, parsed, tool_errors
from eventplatform.tools.arguments import (
    ACKS_CHOICES,
    COMPRESSION_CHOICES,
    DELIVERY_TIMEOUT_S_DEFAULT,
    ClusterSettings,
    parse_key_separator,
    parse_timestamp_ms,
)

if TYPE_CHECKING:
    pass


@click.group(cls=PlatformGroup)
@click.version_option(package_name="eventplatform")
def main() -> None:
    """eventplatform: an event-sourcing platform on a Kafka-compatible commit log."""


@main.command()
@click.option(
    "--directory",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path(".eventplatform/demo"),
    show_default=True,
    help="The demo's own folder for its log (data/) and projection database; a later "
    "demo replaces it, and a folder with other data in it is refused.",
)
@click.option(
    "--reset",
    is_flag=True,
    help="Delete what --directory holds even though no demo made it.",
)
@click.option(
    "--hours",
    type=click.FloatRange(min=0, min_open=True, max=48),
    default=6.0,
    show_default=True,
    help="Hours of website traffic to simulate.",
)
@click.option(
    "--sessions-per-hour",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="Visits per hour at the daily peak.",
)
@click.option("--spark-master", default=None, help="Spark master URL.  [default: local[*]]")
@click.option(
    "--storage",
    is_flag=True,
    help="Instead: append --records records to a bare partition log and read them back.",
)
@click.option("--records", type=click.IntRange(1), default=1_000_000, show_default=True)
@click.option("--record-bytes", type=click.IntRange(1), default=100, show_default=True)
def demo(
    directory: Path,
    reset: bool,
    hours: float,
    sessions_per_hour: float,
    spark_master: str | None,
    storage: bool,
    records: int,
    record_bytes: int,
) -> None:
    """Run the platform end to end on embedded defaults, in a few minutes.

    A broker, the migrations, simulated website traffic, the projection
    runners, bot retraction by corrections, a Spark rebuild checked against
    the live tables, and the analysts' named queries.
    """
    if storage:
        from eventplatform.storage_demo import run_storage_demo

        run_storage_demo(
            directory / "demo-log", records=records, record_bytes=record_bytes, echo=click.echo
        )
        return
    from eventplatform.demo import DemoError, DemoSettings, run_demo

    settings = DemoSettings(directory, hours, sessions_per_hour, spark_master, reset=reset)
    try:
        run_demo(settings, click.echo)
    except DemoError as exc:
        raise click.ClickException(str(exc)) from exc


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where the broker keeps its logs.  [default: .eventplatform/data]",
)
@click.option(
    "--listen",
    default="127.0.0.1:9092",
    show_default=True,
    help="host:port to accept clients on (port 0 picks a free one).",
)
@click.option("--advertised-host", default=None, help="Host name clients are told to connect to.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="A TOML file of broker settings (Kafka's broker-level names).",
)
@click.option(
    "--override",
    "-o",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set one broker setting, after the config file; repeatable.",
)
@click.option("--log-level", default="INFO", show_default=True)
@metrics_listen_option
def serve(
    data_dir: Path | None,
    listen: str,
    advertised_host: str | None,
    config_file: Path | None,
    overrides: tuple[str, ...],
    log_level: str,
    metrics_listen: str | None,
) -> None:
    """Run a Kafka-compatible broker until SIGINT or SIGTERM."""
    from eventplatform.log.broker.runner import run_broker
    from eventplatform.log.config import BrokerConfigError

    try:
        with python_sigint():  # trio's own guard, and serve's signal receiver, need it
            run_broker(
                data_dir=data_dir,
                listen=listen,
                advertised_host=advertised_host,
                config_file=config_file,
                overrides=overrides,
                log_level=log_level,
                echo=click.echo,
                metrics_listen=metrics_listen,
            )
    except BrokerConfigError as exc:
        raise click.UsageError(str(exc)) from exc


@contextmanager
def _quiet_on_closed_pipe() -> Iterator[None]:
    """End quietly when the reader of standard output goes away (``| head``).

    Standard output is pointed at the null device first, so the interpreter's
    final flush cannot fail again on the closed pipe.
    """
    try:
        yield
    except BrokenPipeError:
        null_device = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null_device, sys.stdout.fileno())
        raise click.exceptions.Exit(0) from None


def _report(line: str) -> None:
    click.echo(line, err=True)


@main.command()
@click.argument("topic")
@click.option(
    "--key-separator",
    default=None,
    callback=parsed(parse_key_separator),
    help="Split each line into key and value at the first SEPARATOR.",
    metavar="SEPARATOR",
)
@click.option("--partition", type=click.IntRange(0), default=None, help="Write to this partition.")
@click.option("--acks", type=click.Choice(ACKS_CHOICES), default="all", show_default=True)
@click.option(
    "--compression", type=click.Choice(COMPRESSION_CHOICES), default="none", show_default=True
)
@click.option(
    "--delivery-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=DELIVERY_TIMEOUT_S_DEFAULT,
    show_default=True,
    metavar="SECONDS",
    help="How long a record may take to be acknowledged.",
)
@cluster_options
def produce(
    cluster: ClusterSettings,
    topic: str,
    key_separator: bytes | None,
    partition: int | None,
    acks: str,
    compression: str,
    delivery_timeout: float,
) -> None:
    """Write one record per line of standard input to TOPIC."""
    from eventplatform.tools.produce import ProduceOptions, produce_lines

    options = ProduceOptions(
        topic=topic,
        key_separator=key_separator,
        partition=partition,
        acks=acks,
        compression=compression,
        delivery_timeout_s=delivery_timeout,
    )
    with tool_errors():
        delivered = produce_lines(cluster, options, sys.stdin.buffer, report=_report)
    _report(f"produced {delivered} record{'' if delivered == 1 else 's'} to {topic}")


@main.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the oldest record.")
@click.option("--partition", type=click.IntRange(0), default=None, help="Read only this partition.")
@click.option(
    "--offset", type=click.IntRange(0), default=None, help="Start here (needs --partition)."
)
@click.option(
    "--from-timestamp",
    default=None,
    callback=parsed(parse_timestamp_ms),
    metavar="MS|DATETIME",
    help="Start at the first record at or after this time (ISO datetimes without offset: UTC).",
)
@click.option("--group", default=None, help="Consume as this group and commit its offsets.")
@click.option("--max-messages", type=click.IntRange(1), default=None, help="Stop after N records.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Stop after this long without a record.",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
)
@click.option(
    "--key-separator",
    default=None,
    callback=parsed(parse_key_separator),
    metavar="SEPARATOR",
    help="Text format: print key SEPARATOR value.",
)
@cluster_options
def consume(
    cluster: ClusterSettings,
    topic: str,
    from_beginning: bool,
    partition: int | None,
    offset: int | None,
    from_timestamp: int | None,
    group: str | None,
    max_messages: int | None,
    timeout: float | None,
    output_format: str,
    key_separator: bytes | None,
) -> None:
    """Print TOPIC's records to standard output, one per line."""
    from eventplatform.tools.consume import ConsumeOptions, OutputFormat, consume_records

    options = ConsumeOptions(
        topic=topic,
        group=group,
        from_beginning=from_beginning,
        partition=partition,
        offset=offset,
        from_timestamp_ms=from_timestamp,
        max_messages=max_messages,
        idle_timeout_s=timeout,
        output_format=OutputFormat(output_format),
        key_separator=key_separator,
    )
    stdout = sys.stdout.buffer

    def write(line: bytes) -> None:
        stdout.write(line)
        stdout.flush()

    with tool_errors(), _quiet_on_closed_pipe():
        consume_records(cluster, options, write=write, report=_report)


def _register_subcommands() -> None:
    from eventplatform.apps_cli import apps
    from eventplatform.cluster_cli import cluster
    from eventplatform.console_cli import console
    from eventplatform.db_cli import db
    from eventplatform.erase_cli import erase
    from eventplatform.groups_cli import groups
    from eventplatform.projections_cli import projections
    from eventplatform.query_cli import query
    from eventplatform.replay_cli import replay
    from eventplatform.security_cli import acls, users
    from eventplatform.topics_cli import topics

    main.add_command(acls)
    main.add_command(apps)
    main.add_command(cluster)
    main.add_command(console)
    main.add_command(db)
    main.add_command(erase)
    main.add_command(groups)
    main.add_command(projections)
    main.add_command(query)
    main.add_command(replay)
    main.add_command(topics)
    main.add_command(users)


_register_subcommands()
