"""``platform db``: create and upgrade the SQL schema of the platform and its apps.

Every command works on the platform's tables plus the tables of the apps it
loads: installed apps (entry points of group ``eventplatform.apps``), those
listed in ``$EVENTPLATFORM_APPS``, and those named with ``--app``, a reference
or a bundled app's name (``--app activity``). A bundled app whose tables the
database has already is loaded unasked. Alembic and SQLAlchemy are imported
inside the commands, so other ``platform`` commands do not pay for them at
start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from eventplatform.cli_support import (
    client_config_of_options,
    database_option,
    database_url_of,
    reported_errors,
)
from eventplatform.client_config import CLIENT_CONFIG_ENV, ClientConfig

if TYPE_CHECKING:
    from eventplatform.projections.apps import App
    from eventplatform.projections.migrate import MigrationResult


TOPIC_TIMEOUT_S = 30.0


def apps_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--app",
        "app_references",
        multiple=True,
        metavar="REF",
        help="Also load this app: package.module (its 'app') or package.module:attribute, "
        "found from the current directory too, or a bundled app's name (activity, metrics, "
        "logs); repeatable.",
    )(command)


@click.group()
def db() -> None:
    """Create, upgrade and inspect the SQL schema of the platform and its apps."""


@db.command("upgrade")
@click.option(
    "--revision", default="heads", show_default=True, help="Target revision (or branch@head)."
)
@database_option
@apps_option
@click.option(
    "--bootstrap",
    default=None,
    metavar="HOST:PORT[,...]",
    help="Also create the apps' event topics that are missing on these brokers, as the "
    "event SDK creates them (kept forever, never compacted, entity versions on).",
)
@click.option(
    "--client-config",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    metavar="PATH",
    help="With --bootstrap: a Kafka client properties file, security.protocol, sasl.*, "
    f"ssl.* (docs/security.md).  [default: ${CLIENT_CONFIG_ENV}]",
)
def db_upgrade(
    database: str | None,
    app_references: tuple[str, ...],
    revision: str,
    bootstrap: str | None,
    client_config: Path | None,
) -> None:
    """Apply every pending revision.

    Prints each revision applied, then the heads the database is at; with --bootstrap,
    then each event topic of the loaded apps, created or found.
    """
    from eventplatform.projections.migrate import upgrade

    with reported_errors():
        url = database_url_of(database)
        apps = load_apps(app_references, database=url)
        result = upgrade(url, apps, revision)
    _echo_result("applied", result)
    if bootstrap is not None:
        _create_event_topics(client_config_of_options(bootstrap, client_config), apps)


def _create_event_topics(client: ClientConfig, apps: Sequence[App]) -> None:
    from eventplatform.events import AppendError
    from eventplatform.events.topics import create_event_topics

    topics = sorted({event.event_topic for app in apps for event in app.event_types})
    settings = client.librdkafka()
    try:
        created = set(create_event_topics(settings, topics, timeout_s=TOPIC_TIMEOUT_S))
    except AppendError as exc:
        raise click.ClickException(str(exc)) from exc
    for topic in topics:
        click.echo(f"event topic {topic}: {'created' if topic in created else 'exists'}")


@db.command("downgrade")
@click.argument("revision")
@database_option
@apps_option
def db_downgrade(database: str | None, app_references: tuple[str, ...], revision: str) -> None:
    """Revert to REVISION, dropping tables.

    Revisions that depend on a reverted one are reverted first, so
    eventplatform@base reverts every branch. The rows of dropped tables are lost.
    """
    from eventplatform.projections.migrate import downgrade

    with reported_errors():
        url = database_url_of(database)
        result = downgrade(url, load_apps(app_references, database=url), revision)
    _echo_result("reverted", result)


@db.command("current")
@database_option
def db_current(database: str | None) -> None:
    """Print the revisions the database is at.

    One per line; a branch whose head another head depends on is not repeated.
    """
    from eventplatform.projections.migrate import current

    with reported_errors():
        heads = current(database_url_of(database))
    for head in heads:
        click.echo(head)
    if not heads:
        click.echo("no revision is applied yet", err=True)


@db.command("history")
@apps_option
def db_history(app_references: tuple[str, ...]) -> None:
    """Print all revisions, oldest first."""
    from eventplatform.projections.migrate import history

    with reported_errors():
        revisions = history(load_apps(app_references))
    for revision in revisions:
        click.echo(f"{revision.id} ({', '.join(revision.branches)}): {revision.description}")


@db.command("check")
@database_option
@apps_option
def db_check(database: str | None, app_references: tuple[str, ...]) -> None:
    """Diff the database against declared tables.

    Prints each difference and exits 1 if there is any: a declaration changed
    without a revision, or the database needs an upgrade.
    """
    from eventplatform.projections.migrate import schema_differences

    with reported_errors():
        url = database_url_of(database)
        differences = schema_differences(url, load_apps(app_references, database=url))
    for difference in differences:
        click.echo(difference)
    if differences:
        raise click.ClickException(
            f"{len(differences)} difference(s): a table declaration changed without a revision, "
            "or the database needs 'platform db upgrade'"
        )
    click.echo("the database matches the declared tables", err=True)


@db.command("revision")
@click.argument("app_name", required=False)
@click.option("--message", "-m", required=True, help="What the revision changes.")
@click.option("--empty", is_flag=True, help="Write an empty revision instead of autogenerating.")
@database_option
@apps_option
def db_revision(
    database: str | None,
    app_references: tuple[str, ...],
    app_name: str | None,
    message: str,
    empty: bool,
) -> None:
    """Write APP_NAME's next revision (by default, that of the one app --app names).

    Autogenerated from what the database (which must be at every head) lacks
    of the app's tables, unless --empty is given. An app's first revision creates
    all its tables and needs no database. Review the file before upgrading.
    """
    from eventplatform.projections.apps import load_app
    from eventplatform.projections.migrate import new_revision

    with reported_errors():
        url = database_url_of(database)
        if app_name is None:
            if len(app_references) != 1:
                raise click.UsageError("name the app: platform db revision APP_NAME")
            app_name = load_app(app_references[0]).name
        path = new_revision(
            url,
            load_apps(app_references, database=url),
            app_name=app_name,
            message=message,
            autogenerate=not empty,
        )
    click.echo(str(path))


def load_apps(references: Sequence[str], *, database: str | None = None) -> list[App]:
    """The installed apps and those ``references`` name; with ``database``, also the
    bundled apps whose tables that database has."""
    from eventplatform.projections.apps import installed_apps

    apps = installed_apps(references)
    if database is None:
        return apps
    from eventplatform.projections.app_databases import bundled_apps_in

    return [*apps, *bundled_apps_in(database, apps)]


def _echo_result(verb: str, result: MigrationResult) -> None:
    for revision in result.revisions:
        branches = ", ".join(revision.branches)
        click.echo(f"{verb} {revision.id} ({branches}): {revision.description}")
    if not result.revisions:
        click.echo("nothing to do: the database is already there")
    click.echo(f"heads: {', '.join(result.heads) or '(none)'}")
