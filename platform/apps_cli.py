"""``platform apps``: the commands the installed apps declare, one group per app.

An app names its commands in its declaration,
``App(commands="package.module:attribute")``, a :class:`click.Command`
(usually a group) that runs as ``platform apps <app name> ...``. The apps are
found as every ``platform`` command finds them: the entry points of group
``eventplatform.apps``, ``$EVENTPLATFORM_APPS``, and ``--app``. An app's
command-line module is imported only when this group lists or runs its
commands, and the platform imports no app: an app written outside the
repository gets ``platform apps <name>`` exactly as the bundled ones do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from eventplatform.projections.apps import App

APPS_META_KEY = "eventplatform.apps"
"""Where the click context keeps the apps it found, so they are found once per command."""


class AppsGroup(click.Group):
    """A group whose subcommands are the installed apps' declared commands."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(app.name for app in _apps(ctx) if app.commands is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
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
    """Commands of the installed apps."""


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
        from eventplatform.projections.apps import AppError, installed_apps

        try:
            found = installed_apps(ctx.params.get("app_references", ()))
        except AppError as error:
            raise click.ClickException(str(error)) from error
        ctx.meta[APPS_META_KEY] = found
    return found
