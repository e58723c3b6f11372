"""The ``platform`` command line. Commands parse arguments and call one function."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from eventplatform.cli_failures import PlatformGroup
from eventplatform.cli_support import client_config_of_options, metrics_listen_option
from eventplatform.client_config import BOOTSTRAP_DEFAULT, BOOTSTRAP_ENV, CLIENT_CONFIG_ENV
from eventplatform.cluster_cli import controllers_option, data_dir_option
from eventplatform.tools.arguments import (
    ACKS_CHOICES,
    COMPRESSION_CHOICES,
    DELIVERY_TIMEOUT_S_DEFAULT,
    REQUEST_TIMEOUT_S_DEFAULT,
    ClusterSettings,
    parse_bootstrap,
    parse_key_separator,
    parse_settings,
    parse_timestamp_ms,
)
from eventplatform.tools.errors import ToolError

if TYPE_CHECKING:
    from eventplatform.tools.reassign import Target


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


def _cluster_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--bootstrap``, ``--client-config`` and ``--request-timeout``; the command
    receives ``cluster``, with the client config's security (docs/security.md)."""

    @click.option(
        "--bootstrap",
        default=None,
        callback=_parsed(parse_bootstrap),
        metavar="HOST:PORT[,...]",
        help=f"Brokers to connect to first.  [default: ${BOOTSTRAP_ENV}, else the client "
        f"config's bootstrap.servers, else {BOOTSTRAP_DEFAULT}]",
    )
    @click.option(
        "--client-config",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        metavar="PATH",
        help="A Kafka client properties file: security.protocol, sasl.*, ssl.* "
        f"(docs/security.md).  [default: ${CLIENT_CONFIG_ENV}]",
    )
    @click.option(
        "--request-timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=REQUEST_TIMEOUT_S_DEFAULT,
        show_default=True,
        metavar="SECONDS",
        help="How long one request to the cluster may take.",
    )
    @functools.wraps(command)
    def with_cluster(
        *args: Any,
        bootstrap: str | None,
        client_config: Path | None,
        request_timeout: float,
        **kwargs: Any,
    ) -> Any:
        client = client_config_of_options(bootstrap, client_config)
        cluster = ClusterSettings(
            bootstrap=client.bootstrap, request_timeout_s=request_timeout, client=client
        )
        return command(*args, cluster=cluster, **kwargs)

    return with_cluster


def _parsed(parse: Callable[[Any], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback that runs a parser from ``eventplatform.tools.arguments``."""

    def callback(context: click.Context, parameter: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ToolError as error:
            raise click.BadParameter(str(error), context, parameter) from error

    return callback


@contextmanager
def _reported_errors() -> Iterator[None]:
    """Turn a :class:`ToolError` into click's one-line ``Error: ...`` and exit status 1."""
    try:
        yield
    except ToolError as error:
        raise click.ClickException(str(error)) from error


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


@main.group()
def topics() -> None:
    """Create, list, describe, alter, reassign and delete topics."""


@topics.command("create")
@click.argument("topic")
@click.option("--partitions", type=click.IntRange(1), default=None, help="[default: broker's]")
@click.option(
    "--replication-factor", type=click.IntRange(1), default=None, help="[default: broker's]"
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_parsed(parse_settings),
    help="A topic config override; repeatable.",
)
@_cluster_options
def topics_create(
    cluster: ClusterSettings,
    topic: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: dict[str, str],
) -> None:
    """Create TOPIC."""
    from eventplatform.tools.topics import create_topic

    with _reported_errors():
        create_topic(
            cluster,
            topic,
            partitions=partitions,
            replication_factor=replication_factor,
            configs=configs,
            echo=click.echo,
        )


@topics.command("list")
@_cluster_options
def topics_list(cluster: ClusterSettings) -> None:
    """Print every topic name, one per line."""
    from eventplatform.tools.topics import list_topics

    with _reported_errors():
        list_topics(cluster, echo=click.echo)


@topics.command("describe")
@click.argument("topic")
@_cluster_options
def topics_describe(cluster: ClusterSettings, topic: str) -> None:
    """Show TOPIC's partitions, leaders, replicas and configs with their sources."""
    from eventplatform.tools.topics import describe_topic

    with _reported_errors():
        describe_topic(cluster, topic, echo=click.echo)


@topics.command("alter")
@click.argument("topic")
@click.option(
    "--set",
    "set_configs",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_parsed(parse_settings),
    help="Set a config override; repeatable.",
)
@click.option(
    "--delete",
    "delete_configs",
    multiple=True,
    metavar="KEY",
    help="Remove a config override (back to the default); repeatable.",
)
@click.option("--partitions", type=click.IntRange(1), default=None, help="New partition count.")
@click.option(
    "--force",
    is_flag=True,
    help="With --partitions on a topic that keeps entity versions: turn them off first.",
)
@_cluster_options
def topics_alter(
    cluster: ClusterSettings,
    topic: str,
    set_configs: dict[str, str],
    delete_configs: tuple[str, ...],
    partitions: int | None,
    force: bool,
) -> None:
    """Change TOPIC's config overrides key by key, or raise its partition count.

    More partitions for a topic that keeps entity versions (an event topic) are refused:
    the entities whose keys would move lose their order and versions. --force turns the
    versions off first."""
    from eventplatform.tools.topics import alter_topic

    with _reported_errors():
        alter_topic(
            cluster,
            topic,
            set_configs=set_configs,
            delete_configs=delete_configs,
            partitions=partitions,
            echo=click.echo,
            force=force,
        )


@topics.command("delete")
@click.argument("topic")
@_cluster_options
def topics_delete(cluster: ClusterSettings, topic: str) -> None:
    """Delete TOPIC and all its records."""
    from eventplatform.tools.topics import delete_topic

    with _reported_errors():
        delete_topic(cluster, topic, echo=click.echo)


@topics.command("reassign")
@click.argument("topic", required=False)
@click.option("--partition", type=click.IntRange(0), default=None, help="TOPIC's partition.")
@click.option(
    "--replicas",
    default=None,
    metavar="ID[,ID...]",
    help="The partition's new replicas in order; the first is its preferred leader.",
)
@click.option(
    "--plan",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="A reassignment plan in Kafka's JSON format, instead of TOPIC.",
)
@click.option("--cancel", is_flag=True, help="Cancel the reassignment of the partitions named.")
@click.option("--list", "list_", is_flag=True, help="Show the reassignments in progress.")
@click.option("--wait", "wait_", is_flag=True, help="Block until the reassignment completes.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="How long --wait waits.",
)
@data_dir_option
@controllers_option
def topics_reassign(
    topic: str | None,
    partition: int | None,
    replicas: str | None,
    plan: Path | None,
    cancel: bool,
    list_: bool,
    wait_: bool,
    timeout: float,
    data_dir: Path,
    controllers: str | None,
) -> None:
    """Move partitions' replicas between brokers of a cluster.

    One partition: TOPIC --partition N --replicas 3,1,2. Many: --plan FILE. New
    replicas copy the partition, then the removed ones delete it; --cancel goes back
    to the replicas before, --list shows what is moving."""
    from eventplatform.tools import reassign
    from eventplatform.tools.cluster_status import controller_network, controller_voters

    network = controller_network(data_dir)
    with _reported_errors():
        if list_:
            voters = controller_voters(data_dir=data_dir, controllers=controllers)
            reassign.show(voters, topic, echo=click.echo, network=network)
            return
        targets = _reassign_targets(topic, partition, replicas, plan, cancel=cancel)
        voters = controller_voters(data_dir=data_dir, controllers=controllers)
        if cancel:
            reassign.cancel(voters, targets, echo=click.echo, network=network)
            return
        reassign.start(voters, targets, echo=click.echo, network=network)
        if wait_:
            reassign.wait(voters, targets, timeout, echo=click.echo, network=network)


def _reassign_targets(
    topic: str | None,
    partition: int | None,
    replicas: str | None,
    plan: Path | None,
    *,
    cancel: bool,
) -> list[Target]:
    from eventplatform.tools import reassign
    from eventplatform.tools.errors import InvalidInputError

    if plan is not None:
        if topic is not None or partition is not None or replicas is not None:
            raise InvalidInputError("give either --plan or TOPIC --partition, not both")
        return reassign.read_plan(plan, require_replicas=not cancel)
    if topic is None or partition is None:
        raise InvalidInputError("give TOPIC --partition N, or --plan FILE")
    if cancel:
        if replicas is not None:
            raise InvalidInputError("--cancel takes no --replicas")
        return [reassign.Target(topic, partition)]
    if replicas is None:
        raise InvalidInputError("give the new replicas with --replicas, as 3,1,2")
    return [reassign.Target(topic, partition, reassign.parse_replicas(replicas))]


@main.command()
@click.argument("topic")
@click.option(
    "--key-separator",
    default=None,
    callback=_parsed(parse_key_separator),
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
@_cluster_options
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
    with _reported_errors():
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
    callback=_parsed(parse_timestamp_ms),
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
    callback=_parsed(parse_key_separator),
    metavar="SEPARATOR",
    help="Text format: print key SEPARATOR value.",
)
@_cluster_options
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

    with _reported_errors(), _quiet_on_closed_pipe():
        consume_records(cluster, options, write=write, report=_report)


@main.group()
def groups() -> None:
    """List consumer groups, describe their lag, reset their offsets."""


@groups.command("list")
@_cluster_options
def groups_list(cluster: ClusterSettings) -> None:
    """Print every consumer group with its state."""
    from eventplatform.tools.groups import list_groups

    with _reported_errors():
        list_groups(cluster, echo=click.echo)


@groups.command("describe")
@click.argument("group")
@_cluster_options
def groups_describe(cluster: ClusterSettings, group: str) -> None:
    """Show GROUP's members and, per partition, committed offset, log end offset and lag."""
    from eventplatform.tools.groups import describe_group

    with _reported_errors():
        describe_group(cluster, group, echo=click.echo)


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", required=True, help="The topic whose offsets move.")
@click.option("--partition", type=click.IntRange(0), default=None, help="Only this partition.")
@click.option("--to-earliest", is_flag=True, help="To the oldest record still kept.")
@click.option("--to-latest", is_flag=True, help="To the log end (skip everything).")
@click.option(
    "--to-offset",
    type=click.IntRange(0),
    default=None,
    metavar="N",
    help="To offset N (clamped into the log).",
)
@click.option(
    "--to-datetime",
    default=None,
    metavar="ISO",
    help="To the first record at or after this time (without an offset: UTC).",
)
@click.option(
    "--execute", is_flag=True, help="Commit the new offsets; without it, only print the plan."
)
@click.option(
    "--dry-run", is_flag=True, help="Print the new offsets, change nothing (the default)."
)
@_cluster_options
def groups_reset_offsets(
    cluster: ClusterSettings,
    group: str,
    topic: str,
    partition: int | None,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    to_datetime: str | None,
    execute: bool,
    dry_run: bool,
) -> None:
    """Plan moving GROUP's committed offsets on a topic, and with --execute move them;
    refused while the group has members."""
    from eventplatform.tools.groups import reset_group_offsets, reset_target
    from eventplatform.tools.projection_groups import refuse_projection_group

    if execute and dry_run:
        raise click.UsageError("--execute and --dry-run exclude each other")
    with _reported_errors():
        refuse_projection_group(cluster, group)
        target = reset_target(
            to_earliest=to_earliest,
            to_latest=to_latest,
            to_offset=to_offset,
            to_datetime=to_datetime,
        )
        reset_group_offsets(
            cluster,
            group,
            topic=topic,
            partition=partition,
            target=target,
            dry_run=not execute,
            echo=click.echo,
        )


def _register_subcommands() -> None:
    from eventplatform.apps_cli import apps
    from eventplatform.cluster_cli import cluster
    from eventplatform.console_cli import console
    from eventplatform.db_cli import db
    from eventplatform.erase_cli import erase
    from eventplatform.projections_cli import projections
    from eventplatform.query_cli import query
    from eventplatform.replay_cli import replay
    from eventplatform.security_cli import acls, users

    main.add_command(acls)
    main.add_command(apps)
    main.add_command(cluster)
    main.add_command(console)
    main.add_command(db)
    main.add_command(erase)
    main.add_command(projections)
    main.add_command(query)
    main.add_command(replay)
    main.add_command(users)


_register_subcommands()
