"""``platform console``: serve a read-only web view of the cluster, groups and projections."""

from __future__ import annotations

import click

from eventplatform.cli_support import address, client_options, database_option, database_url_of
from eventplatform.client_config import ClientConfig
from eventplatform.db_cli import apps_option, load_apps

LISTEN_DEFAULT = "127.0.0.1:8080"
PORT_MAX = 65535


@click.command()
@click.option(
    "--listen",
    default=LISTEN_DEFAULT,
    show_default=True,
    metavar="HOST:PORT",
    help="Address to serve the console on (port 0 picks a free one).",
)
@click.option(
    "--operator",
    is_flag=True,
    help="Offer the operator's actions (retrying parked events); without it the console "
    "only reads.",
)
@client_options
@database_option
@apps_option
def console(
    listen: str,
    operator: bool,
    client: ClientConfig,
    database: str | None,
    app_references: tuple[str, ...],
) -> None:
    """Serve the console: brokers and topics, consumer groups and their lag, projections,
    a record browser and the apps' dashboards. Prints the URL to open and runs until
    Ctrl-C. It only reads, unless given --operator."""
    from eventplatform.cli_support import reported_errors
    from eventplatform.console.data import ConsoleSettings
    from eventplatform.console.server import bind, serve, url_of

    host, port = address(listen, "--listen")
    if port > PORT_MAX:
        raise click.BadParameter(f"port {port} is above {PORT_MAX}", param_hint="--listen")
    url = database_url_of(database)
    with reported_errors():  # the bundled apps only where the database has their tables
        apps = load_apps(app_references, database=url)
        settings = ConsoleSettings(client, url, apps, operator=operator)
    try:
        sock = bind(host, port)
    except OSError as error:
        raise click.ClickException(
            f"cannot listen on {listen}: {error.strerror or error}"
        ) from None
    click.echo(f"console at {url_of(sock)} (Ctrl-C stops it)")
    try:
        serve(settings, sock)
    finally:
        sock.close()
