"""What an app's commands share with the platform's: options, parsing, appending, errors.

An app declares its commands with ``App(commands="package.module:attribute")``,
a :class:`click.Command` (usually a group) that ``platform apps <app name>``
runs. Those commands are written with the helpers here, so that every app,
bundled or not, takes ``--bootstrap``, ``--client-config``, ``--database`` and a
simulated window the same way and reports errors the same way::

    import click

    from eventplatform.cli_support import client_options, reported_errors
    from eventplatform.events import ClientConfig, EventProducer

    @click.group()
    def commands() -> None:
        \"\"\"My app.\"\"\"

    @commands.command()
    @client_options
    def simulate(client: ClientConfig) -> None:
        with EventProducer(client) as producer: ...

``client`` holds the brokers and the security settings of the client config file
and environment (docs/security.md). :func:`bootstrap_option` gives the brokers
alone; the SDK then reads the security settings from the environment itself.

This module imports click, since it is command-line support; the SDK and
the :class:`~eventplatform.projections.App` declaration do not. SQLAlchemy
and the Kafka client are imported inside the functions that need them, so
``platform --help`` does not pay for them.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import click

from eventplatform.cli_failures import note_brokers, note_database
from eventplatform.client_config import (
    BOOTSTRAP_DEFAULT,
    BOOTSTRAP_ENV,
    CLIENT_CONFIG_ENV,
    ClientConfig,
    ClientConfigError,
    KafkaConnection,
    load_client_config,
)
from eventplatform.interrupts import python_sigint

__all__ = [
    "APPEND_CHUNK_EVENTS",
    "BOOTSTRAP_DEFAULT",
    "BOOTSTRAP_ENV",
    "address",
    "append_in_chunks",
    "append_queue_metrics",
    "bootstrap_option",
    "client_config_of_options",
    "client_options",
    "database_option",
    "database_url_of",
    "ingest_counters",
    "log_to_stderr",
    "metrics_listen_option",
    "metrics_socket_of",
    "moment",
    "reported_errors",
    "run_trio_until_interrupted",
    "serve_metrics",
    "this_host",
    "window",
    "window_options",
]

APPEND_CHUNK_EVENTS = 10_000
"""Events handed to the producer in one ``append``: bounds the memory of one call."""

Decorated = TypeVar("Decorated", bound=Callable[..., Any])


def bootstrap_option(command: Decorated) -> Decorated:
    """``--bootstrap``: the brokers, from ``$EVENTPLATFORM_BOOTSTRAP`` unless given."""
    return click.option(
        "--bootstrap",
        default=lambda: os.environ.get(BOOTSTRAP_ENV, BOOTSTRAP_DEFAULT),
        show_default=f"${BOOTSTRAP_ENV}, else {BOOTSTRAP_DEFAULT}",
        metavar="HOST:PORT[,...]",
        help="Brokers of the log the projections read.",
    )(command)


def client_options(command: Decorated) -> Decorated:
    """``--bootstrap`` and ``--client-config``: the command receives ``client``, the
    :class:`ClientConfig` they resolve to with the environment (docs/security.md)."""

    @click.option(
        "--bootstrap",
        default=None,
        metavar="HOST:PORT[,...]",
        help="Brokers to connect to first.  [default: $EVENTPLATFORM_BOOTSTRAP, else the "
        "client config's bootstrap.servers, else 127.0.0.1:9092]",
    )
    @click.option(
        "--client-config",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        metavar="PATH",
        help="A Kafka client properties file: security.protocol, sasl.*, ssl.* "
        f"(docs/security.md).  [default: ${CLIENT_CONFIG_ENV}]",
    )
    @functools.wraps(command)
    def with_client(
        *args: Any, bootstrap: str | None, client_config: Path | None, **kwargs: Any
    ) -> Any:
        return command(*args, client=client_config_of_options(bootstrap, client_config), **kwargs)

    return with_client  # type: ignore[return-value]


def client_config_of_options(bootstrap: str | None, client_config: Path | None) -> ClientConfig:
    """The :class:`ClientConfig` of ``--bootstrap`` and ``--client-config``; a usage
    error naming the bad setting and its source otherwise."""
    try:
        client = load_client_config(bootstrap=bootstrap, config_file=client_config)
    except ClientConfigError as error:
        raise click.UsageError(str(error)) from error
    note_brokers(client.bootstrap)
    return client


def database_option(command: Decorated) -> Decorated:
    """``--database``: a SQLAlchemy URL; :func:`database_url_of` applies the default."""
    return click.option(
        "--database",
        default=None,
        metavar="URL",
        help="SQLAlchemy URL of the projection database.  "
        "[default: $EVENTPLATFORM_DATABASE_URL, else sqlite:///.eventplatform/projections.db]",
    )(command)


def database_url_of(database: str | None) -> str:
    """The URL ``--database`` gave, else ``$EVENTPLATFORM_DATABASE_URL``, else the local file."""
    from eventplatform.projections.database import database_url

    url = database_url(database)
    note_database(url)
    return url


@contextmanager
def reported_errors() -> Iterator[None]:
    """Turn a projection-layer error into click's one-line ``Error: ...`` and exit status 1."""
    from eventplatform.projections.errors import ProjectionError

    try:
        yield
    except ProjectionError as error:
        raise click.ClickException(str(error)) from error


def run_trio_until_interrupted(main: Callable[[], Awaitable[object]]) -> None:
    """``trio.run(main)`` until it returns or Ctrl-C stops it, which says ``stopped``."""
    import trio

    try:
        with python_sigint():
            trio.run(main)
    except KeyboardInterrupt:
        click.echo("stopped", err=True)


def window_options(command: Decorated) -> Decorated:
    """``--hours``, ``--start`` and ``--seed``: the window a simulator fills."""
    for option in reversed(
        [
            click.option(
                "--hours",
                type=click.FloatRange(min=0, min_open=True),
                default=1.0,
                show_default=True,
                help="Length of the simulated window.",
            ),
            click.option(
                "--start",
                default=None,
                metavar="TIME",
                help="Start of the window (ISO 8601; UTC if no zone).  "
                "[default: --hours before now]",
            ),
            click.option("--seed", type=int, default=0, show_default=True),
        ]
    ):
        command = option(command)
    return command


def moment(value: str | None, option: str = "--start") -> datetime | None:
    """An ISO 8601 time (UTC when it names no zone), or None for None."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time", param_hint=option) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def window(start: str | None, hours: float) -> tuple[datetime, datetime]:
    """``[start, start + hours)``; without ``--start`` the window ends now."""
    begin = moment(start) or datetime.now(UTC) - timedelta(hours=hours)
    return begin, begin + timedelta(hours=hours)


def address(listen: str, option: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as a pair; a usage error otherwise."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{listen!r} is not host:port", param_hint=option)
    return host.strip("[]"), int(port)


def append_in_chunks(bootstrap: KafkaConnection, events: Sequence[Any]) -> None:
    """Append ``events`` in order, :data:`APPEND_CHUNK_EVENTS` to a call."""
    from eventplatform.events import EventProducer

    with EventProducer(bootstrap) as producer:
        for first in range(0, len(events), APPEND_CHUNK_EVENTS):
            producer.append(events[first : first + APPEND_CHUNK_EVENTS])


def log_to_stderr() -> None:
    """INFO and above on standard error, for commands that run until stopped."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")


def this_host() -> str:
    """This machine's name, the default ``--host`` of ingested lines."""
    return socket.gethostname() or "localhost"


METRICS_LISTEN_HELP = (
    "Serve Prometheus metrics at http://HOST:PORT/metrics (port 0 picks a free one; "
    "the log says which). Off unless given (docs/metrics.md)."
)


def metrics_listen_option(command: Decorated) -> Decorated:
    """``--metrics-listen HOST:PORT``: the command receives ``metrics_listen``, a checked
    address or None (off, the default); :func:`metrics_socket_of` binds it."""

    def checked(context: click.Context, parameter: click.Parameter, value: str | None) -> Any:
        from eventplatform.log.metrics_endpoint import MetricsEndpointError, parse_metrics_listen

        if value is not None:
            try:
                parse_metrics_listen(value)
            except MetricsEndpointError as error:
                raise click.BadParameter(str(error)) from error
        return value

    return click.option(
        "--metrics-listen",
        default=None,
        metavar="HOST:PORT",
        callback=checked,
        help=METRICS_LISTEN_HELP,
    )(command)


def metrics_socket_of(listen: str | None) -> socket.socket | None:
    """The listening socket ``--metrics-listen`` asks for, bound now, so that an address
    in use stops the command before it starts; None when the endpoint is off."""
    from eventplatform.log.metrics_endpoint import (
        MetricsEndpointError,
        bind_metrics_socket,
        parse_metrics_listen,
    )

    if listen is None:
        return None
    try:
        return bind_metrics_socket(*parse_metrics_listen(listen))
    except MetricsEndpointError as error:
        raise click.UsageError(str(error)) from error


def ingest_counters(collector: str, counters: Sequence[tuple[str, str, int]]) -> list[Any]:
    """One ``eventplatform_ingest_<name>`` counter per ``(name, help, value)``, labelled
    ``collector`` (docs/metrics.md). For a prometheus_client collector's ``collect``."""
    from prometheus_client.core import CounterMetricFamily

    metrics: list[Any] = []
    for name, text, value in counters:
        counter = CounterMetricFamily(f"eventplatform_ingest_{name}", text, labels=["collector"])
        counter.add_metric([collector], value)
        metrics.append(counter)
    return metrics


def append_queue_metrics(collector: str, queue: Any) -> list[Any]:
    """The Prometheus figures of a collector's :class:`~eventplatform.events.AppendQueue`,
    labelled ``collector``: events queued, appended, dropped, failed appends, and those
    waiting now (docs/metrics.md). For a prometheus_client collector's ``collect``."""
    from prometheus_client.core import GaugeMetricFamily

    stats = queue.stats
    counters = (
        ("events_queued", "Events queued for appending.", stats.queued),
        ("events_appended", "Events the log acknowledged.", stats.appended),
        (
            "events_dropped",
            "Events dropped: the queue was full, or their append failed.",
            stats.dropped,
        ),
        (
            "append_errors",
            "Appends the log refused or did not answer in time.",
            stats.append_errors,
        ),
    )
    metrics = ingest_counters(collector, counters)
    waiting = GaugeMetricFamily(
        "eventplatform_ingest_events_waiting",
        "Events queued and not yet appended.",
        labels=["collector"],
    )
    waiting.add_metric([collector], queue.waiting)
    metrics.append(waiting)
    return metrics


async def serve_metrics(sock: socket.socket, *collectors: Any, task_status: Any = None) -> None:
    """Serve a registry of this process's own, with the standard process figures and
    ``collectors`` (prometheus_client collectors, read at each scrape), on ``sock``
    until cancelled. A trio task: ``await nursery.start(serve_metrics, sock, ...)``."""
    import trio

    from eventplatform.log.metrics_endpoint import new_registry
    from eventplatform.log.metrics_endpoint import serve_metrics as serve

    registry = new_registry()
    for collector in collectors:
        registry.register(collector)
    await serve(registry, sock, task_status=task_status or trio.TASK_STATUS_IGNORED)
