"""``platform apps``: the commands the installed apps declare, one group per app.

An app names its commands in its declaration,
``App(commands="package.module:attribute")``, a :class:`click.Command`
(usually a group) that runs as ``platform apps <app name> ...``. The apps are
found as every ``platform`` command finds them: the entry points of group
``eventplatform.apps``, ``$EVENTPLATFORM_APPS``, and ``--app``; the bundled
apps' commands are there too, unasked. An app's command-line module is
imported only when this group lists or runs its commands, and the platform
imports no app: an app written outside the repository gets ``platform apps
<name>`` exactly as the bundled ones do.

``platform apps new NAME`` is the group's own: it writes a new app
(:mod:`eventplatform.new_app`). Its name is reserved: an app called ``new``
cannot shadow it, and ``platform apps new`` refuses to make one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from eventplatform.cli_support import reported_errors

if TYPE_CHECKING:
    from eventplatform.projections.apps import App

APPS_META_KEY = "eventplatform.apps"
"""Where the click context keeps the apps it found, so they are found once per command."""


class AppsGroup(click.Group):
    """A group whose subcommands are its own (``new``), then the apps' declared commands."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        own = super().list_commands(ctx)
        declared = (app.name for app in _apps(ctx) if app.commands is not None)
        return sorted({*own, *declared})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        own = super().get_command(ctx, cmd_name)
        if own is not None:
            return own
        for app in _apps(ctx):
            if app.name == cmd_name and app.commands is not None:
                return app_commands(app)
        return None


@click.group(cls=AppsGroup)
@click.option(
    "--app",
    "app_references",
    multiple=True,
    is_eager=True,  # before --help, so that the help lists the app's commands too
    metavar="REF",
    help="Also load this app: package.module (its 'app') or package.module:attribute; repeatable.",
)
def apps(app_references: tuple[str, ...]) -> None:
    """Commands of the installed apps, and a new app (platform apps new NAME)."""


@apps.command("new")
@click.argument("name")
@click.option(
    "--directory",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path(),
    show_default="the current directory",
    help="Write the package NAME into this folder.",
)
def new_app(name: str, directory: Path) -> None:
    """Write a new app, the package NAME, ready to migrate, run, test and install.

    An event, a projection of it with a named query, the App declaration, its
    migrations folder with its first revision, a test of the projection, and a
    pyproject.toml declaring its entry point (pip install -e NAME). Refuses an
    existing folder.
    """
    from eventplatform.new_app import create_app

    with reported_errors():
        package = create_app(name, directory)
    click.echo(f"wrote the app {name}: {package}{os.sep}")
    here = directory.resolve() == Path.cwd().resolve()
    click.echo(f"next, from {'this folder' if here else directory} (docs/apps.md):")
    for step in (
        f"platform db upgrade --app {name}",
        f"platform projections run {name}.totals --app {name}",
        f"platform query {name}.totals --app {name}",
        f"pytest {name}",
    ):
        click.echo(f"  {step}")


def app_commands(app: App) -> click.Command:
    """The command ``app.commands`` names, imported now; a usage error if it is none."""
    from eventplatform.projections.apps import AppError, resolve_reference

    assert app.commands is not None
    try:
        command = resolve_reference(app.commands, what=f"commands of app {app.name}")
    except AppError as error:
        raise click.ClickException(str(error)) from error
    if not isinstance(command, click.Command):
        raise click.ClickException(
            f"commands of app {app.name} {app.commands!r}: resolves to "
            f"{type(command).__name__}, not a click command"
        )
    return command


def _apps(ctx: click.Context) -> Sequence[App]:
    """The apps found for this invocation, with those ``--app`` named."""
    found: Sequence[App] | None = ctx.meta.get(APPS_META_KEY)
    if found is None:
        from eventplatform.projections.apps import AppError, available_apps

        try:
            found = available_apps(ctx.params.get("app_references", ()))
        except AppError as error:
            raise click.ClickException(str(error)) from error
        ctx.meta[APPS_META_KEY] = found
    return found
