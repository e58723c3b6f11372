"""``platform apps logs``: simulation, file tails, stdin, syslog, redaction, pruning.

The app's declaration names :data:`commands` (``App(commands=...)``), so the
platform imports this module only when it builds ``platform apps``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from eventplatform.apps.log_aggregation import APP_NAME
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
    this_host,
    window,
    window_options,
)
from eventplatform.events import ClientConfig

if TYPE_CHECKING:
    from eventplatform.apps.log_aggregation.redaction import Redaction

APPLY_TIMEOUT_S_DEFAULT = 120.0
"""As :data:`.redaction.APPLY_TIMEOUT_S_DEFAULT`, which this module does not import for
``--help``'s sake."""


@click.group(name=APP_NAME)
def commands() -> None:
    """Log aggregation: files, stdin and syslog; counts, fingerprints and search."""


@commands.command("simulate")
@client_options
@window_options
def logs_simulate(client: ClientConfig, hours: float, start: str | None, seed: int) -> None:
    """Append what a few simulated services log (some lines leak a password)."""
    from eventplatform.apps.log_aggregation.retention import ensure_topic
    from eventplatform.apps.log_aggregation.simulator import LogSimulator

    simulation = LogSimulator(seed=seed).run(*window(start, hours))
    ensure_topic(client)
    append_in_chunks(client, simulation.lines)
    click.echo(
        f"appended {len(simulation.lines)} lines; {simulation.leaking} hold the password "
        f"{simulation.leaked!r} (platform apps logs redact {simulation.leaked!r} ...)"
    )


@commands.command("tail")
@client_options
@click.argument("paths", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--service", required=True, help="The service the lines are of.")
@click.option(
    "--host", default=this_host, show_default="this host's name", help="The host they come from."
)
@click.option(
    "--state-dir",
    default=".eventplatform/tail",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where each file's position is saved between runs.",
)
def logs_tail(
    client: ClientConfig, paths: tuple[str, ...], service: str, host: str, state_dir: str
) -> None:
    """Follow log files (through rotations) and append their lines, until stopped."""
    import hashlib
    import threading

    from eventplatform.apps.log_aggregation.retention import ensure_topic
    from eventplatform.apps.log_aggregation.tail import FileTail, TailSource, follow
    from eventplatform.events import EventProducer

    log_to_stderr()
    folder = Path(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    sources = []
    for raw in paths:
        path = Path(raw).resolve()
        digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
        state = folder / f"{path.name}.{digest}.json"
        sources.append(TailSource(FileTail(path, state), service, host))
    ensure_topic(client)
    stop = threading.Event()
    click.echo(f"following {len(sources)} file(s); positions in {folder}", err=True)
    with EventProducer(client) as producer:
        try:
            stats = follow(sources, producer, stop=stop)
        except KeyboardInterrupt:
            stop.set()
            click.echo("stopped", err=True)
            return
    click.echo(f"appended {_counted(stats.lines, 'line')}")


@commands.command("ingest")
@client_options
@click.option("--service", required=True, help="The service the lines are of.")
@click.option(
    "--host", default=this_host, show_default="this host's name", help="The host they come from."
)
def logs_ingest(client: ClientConfig, service: str, host: str) -> None:
    """Append every line of standard input, until it ends."""
    import sys

    from eventplatform.apps.log_aggregation.retention import ensure_topic
    from eventplatform.apps.log_aggregation.tail import read_stream
    from eventplatform.events import EventProducer

    ensure_topic(client)
    with EventProducer(client) as producer:
        total = read_stream(sys.stdin.buffer, service, host, producer)
    click.echo(f"appended {_counted(total, 'line')}", err=True)


@commands.command("syslog")
@client_options
@click.option(
    "--udp",
    "udp_listen",
    default="127.0.0.1:5514",
    show_default=True,
    help="host:port for syslog over UDP ('' for none).",
)
@click.option(
    "--tcp",
    "tcp_listen",
    default="127.0.0.1:5514",
    show_default=True,
    help="host:port for syslog over TCP ('' for none).",
)
@click.option(
    "--tls",
    "tls_listen",
    default="",
    help="host:port for syslog over TLS, RFC 5425 (its port is 6514); needs --tls-cert "
    "and --tls-key.",
)
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), help="PEM chain.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="PEM key.")
@click.option(
    "--tls-client-ca",
    type=click.Path(exists=True, dir_okay=False),
    help="Require client certificates this CA signed (PEM).",
)
@metrics_listen_option
def logs_syslog(
    client: ClientConfig,
    udp_listen: str,
    tcp_listen: str,
    tls_listen: str,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    metrics_listen: str | None,
) -> None:
    """Receive RFC 5424 syslog over UDP, TCP and TLS and append the lines."""
    import ssl

    import trio

    from eventplatform.apps.log_aggregation.retention import ensure_topic
    from eventplatform.apps.log_aggregation.syslog import (
        SyslogCollector,
        SyslogListener,
        tls_context,
    )
    from eventplatform.events import EventProducer

    log_to_stderr()
    if not udp_listen and not tcp_listen and not tls_listen:
        raise click.UsageError("give --udp, --tcp or --tls")
    udp = address(udp_listen, "--udp") if udp_listen else None
    tcp = address(tcp_listen, "--tcp") if tcp_listen else None
    tls = address(tls_listen, "--tls") if tls_listen else None
    context = None
    if tls is not None:
        if tls_cert is None or tls_key is None:
            raise click.UsageError("--tls needs --tls-cert and --tls-key")
        try:
            context = tls_context(tls_cert, tls_key, tls_client_ca)
        except (ssl.SSLError, OSError) as exc:
            raise click.UsageError(f"the TLS certificate or key does not load: {exc}") from exc
    metrics_socket = metrics_socket_of(metrics_listen)
    ensure_topic(client)

    async def run() -> None:
        with EventProducer(client, config={"linger.ms": 5}) as producer:
            listener = SyslogListener(producer)
            async with trio.open_nursery() as nursery:
                if metrics_socket is not None:
                    collector = SyslogCollector(listener)
                    await nursery.start(serve_metrics, metrics_socket, collector)
                nursery.start_soon(listener.run_writer)
                if udp is not None:
                    port = await nursery.start(listener.serve_udp, *udp)
                    click.echo(f"receiving syslog on udp://{udp[0]}:{port}", err=True)
                if tcp is not None:
                    port = await nursery.start(listener.serve_tcp, *tcp)
                    click.echo(f"receiving syslog on tcp://{tcp[0]}:{port}", err=True)
                if tls is not None:
                    port = await nursery.start(listener.serve_tls, *tls, context)
                    click.echo(f"receiving syslog over TLS on {tls[0]}:{port}", err=True)

    run_trio_until_interrupted(run)


@commands.command("redact")
@database_option
@client_options
@click.argument("text")
@click.option("--reason", required=True, help="Why (never the secret itself).")
@click.option("--service", default=None, help="Only lines of this service.")
@click.option("--dry-run", is_flag=True, help="Only count the lines it would retract and erase.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=APPLY_TIMEOUT_S_DEFAULT,
    show_default=True,
    metavar="SECONDS",
    help="How long the logs.lines runner may take to apply the retraction.",
)
@click.option(
    "--keep-log",
    is_flag=True,
    help="Only retract the lines from the tables; leave them in the log (a cluster "
    "without erasure, or no runner running).",
)
@click.option(
    "--pending-dir",
    default=".eventplatform/redactions",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the positions of lines retracted but not yet erased wait for the next run.",
)
def logs_redact(
    database: str | None,
    client: ClientConfig,
    text: str,
    reason: str,
    service: str | None,
    dry_run: bool,
    timeout: float,
    keep_log: bool,
    pending_dir: Path,
) -> None:
    """Retract every recent line whose message holds TEXT from every table, then erase
    those lines from the log.

    It waits for the logs.lines runner to apply the retraction, since the runner reads
    the lines from the log to take them out, and erases them after. A run that fails in
    between leaves the lines' positions in --pending-dir; the next run erases them."""
    from eventplatform.apps.log_aggregation.redaction import RedactionError, redact

    if not text:
        raise click.BadParameter("give the text the lines hold", param_hint="TEXT")
    with reported_errors():
        try:
            done = redact(
                database_url_of(database),
                client,
                text,
                reason,
                service=service,
                dry_run=dry_run,
                erase=not keep_log,
                apply_timeout_s=timeout,
                pending=pending_dir,
            )
        except RedactionError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(_redacted(done, dry_run))


def _redacted(done: Redaction, dry_run: bool) -> str:
    lines = _counted(done.lines, "line")
    if done.erased is None:
        verb = "would retract" if dry_run else "retracted"
        return f"{verb} {lines} from the tables; the log keeps them"
    earlier = f" ({done.earlier} left by an earlier run)" if done.earlier else ""
    records = _counted(done.erased, "record")
    if dry_run:
        return f"would retract {lines} from the tables and erase {records} from the log{earlier}"
    return f"retracted {lines} from the tables and erased {records} from the log{earlier}"


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


@commands.command("prune")
@database_option
@client_options
def logs_prune(database: str | None, client: ClientConfig) -> None:
    """Delete from the log tables what the topic's retention has deleted from the log."""
    from eventplatform.apps.log_aggregation.retention import prune

    with reported_errors():
        pruned = prune(database_url_of(database), client)
    click.echo(
        f"pruned {pruned.lines} lines, {pruned.errors} errors, {pruned.count_rows} count rows, "
        f"{pruned.template_rows} template rows"
    )
