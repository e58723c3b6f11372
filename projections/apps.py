"""Installed applications: what an app brings to the platform, and how it is found.

An application is one :class:`App` value naming its projections, its event
types and the folder of Alembic revisions that create its tables. The
platform finds apps in three places, in this order:

1. the entry points of group ``eventplatform.apps`` of every installed
   distribution (``my_app = "my_package.app:app"``), so installing an app is
   enough to make ``platform db upgrade`` create its tables;
2. the references in ``$EVENTPLATFORM_APPS``, comma-separated;
3. the references a caller passes (``--app`` on the command line).

A reference is ``package.module`` (the module's attribute ``app``) or
``package.module:attribute``, imported with the current directory on
``sys.path`` (first, as ``python -m`` puts it), so a package in the current
directory needs no ``PYTHONPATH``. The same app found twice counts once; two
different apps with one name are refused, because the name is the app's
Alembic branch label.

The apps that ship with the platform (activity, metrics, logs) are not
installed apps: they are entry points of group ``eventplatform.bundled_apps``,
and a reference that is exactly one of their names (``--app activity``)
loads that one. So a database gets their tables only when asked for. Their
commands are always there (:func:`available_apps`), and a database that has
their tables keeps them (``app_databases.bundled_apps_in``).

An app may also bring its own commands and its part of ``platform demo``.
Both are named by a lazy reference, ``package.module:attribute``, resolved
only when the command line is built (:func:`resolve_reference`), so the
declaration imports neither click nor the app's command-line code:

    app = App(
        name="metrics",
        commands="eventplatform.apps.metrics.cli:commands",  # platform apps metrics ...
        demo="eventplatform.apps.metrics.demo:demo",  # an AppDemo
        ...
    )

An app's first revision declares ``branch_labels = ("<app name>",)`` and
``depends_on = "eventplatform_0001"`` (the platform's first revision), so
the app's branch always runs after the platform's tables exist.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from eventplatform.events.model import Event
from eventplatform.projections.errors import ProjectionError
from eventplatform.projections.model import Projection

APPS_ENTRY_POINT_GROUP = "eventplatform.apps"
BUNDLED_APPS_ENTRY_POINT_GROUP = "eventplatform.bundled_apps"
APPS_ENV = "EVENTPLATFORM_APPS"
APP_ATTRIBUTE_DEFAULT = "app"

# The name becomes an Alembic branch label: no "@", no spaces, no leading digit.
APP_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
# A lazy reference to one object: ``package.module:attribute[.attribute...]``.
OBJECT_REFERENCE_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class AppError(ProjectionError):
    """An app reference does not resolve to an :class:`App`, or names collide."""


@dataclass(frozen=True)
class NamedQuery:
    """SQL an app ships for analysts, run as ``platform query <app>.<name>``.

    The SQL must run on SQLite and PostgreSQL alike, unless ``dialect_sql``
    gives one database its own. With ``since_default``
    (a duration such as ``1h``) it binds ``:since``, the start of the window:
    now minus the duration, or minus ``--since``. ``parameters`` are its
    other bind parameters with their defaults (``--param name=value``).
    """

    name: str
    sql: str
    description: str
    since_default: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)
    dialect_sql: Mapping[str, str] = field(default_factory=dict)
    """SQL for one database (``sqlite``, ``postgresql``) where it must differ from ``sql``,
    as full-text search does."""

    def sql_for(self, dialect: str) -> str:
        return self.dialect_sql.get(dialect, self.sql)


@dataclass(frozen=True, eq=False)
class App:
    """An installed application, as the platform sees it.

    ``migrations`` is the folder of the app's Alembic revisions (``None`` for
    an app without tables of its own). Apps compare by identity: the same
    object found through an entry point and through ``--app`` is one app.

    ``commands`` names the app's :class:`click.Command` (a group, usually),
    which ``platform apps <name>`` runs, and ``demo`` names its
    :class:`~eventplatform.projections.AppDemo`, its part of ``platform
    demo``; each is ``package.module:attribute``, imported only when used.
    """

    name: str
    projections: Sequence[Projection] = ()
    event_types: Sequence[type[Event]] = ()
    migrations: Path | None = None
    description: str = ""
    queries: Sequence[NamedQuery] = ()
    commands: str | None = None
    demo: str | None = None

    def __post_init__(self) -> None:
        if not APP_NAME_PATTERN.match(self.name):
            raise AppError(
                f"app name {self.name!r} must be letters, digits, '_', '.' or '-', "
                "not starting with a digit"
            )
        for hook, reference in (("commands", self.commands), ("demo", self.demo)):
            if reference is not None and not OBJECT_REFERENCE_PATTERN.match(reference):
                raise AppError(
                    f"app {self.name}: {hook}={reference!r} is not 'package.module:attribute'"
                )
        for projection in self.projections:
            if not isinstance(projection, Projection):
                raise AppError(f"app {self.name}: {projection!r} is not a Projection")
        names = [query.name for query in self.queries]
        if len(set(names)) != len(names):
            raise AppError(f"app {self.name}: two named queries share a name")
        for event_type in self.event_types:
            if not (isinstance(event_type, type) and issubclass(event_type, Event)):
                raise AppError(f"app {self.name}: {event_type!r} is not an Event class")


def installed_apps(extra: Sequence[str] = ()) -> list[App]:
    """Every app the platform should serve: entry points, ``$EVENTPLATFORM_APPS``, ``extra``.

    A bundled app is among them only when ``$EVENTPLATFORM_APPS`` or ``extra`` names it.
    """
    found = [
        *_entry_point_apps(APPS_ENTRY_POINT_GROUP),
        *(load_app(reference) for reference in env_references()),
    ]
    found.extend(load_app(reference) for reference in extra)
    return _distinct(found)


def bundled_apps() -> list[App]:
    """The apps that ship with the platform, installed or not, by name."""
    return _entry_point_apps(BUNDLED_APPS_ENTRY_POINT_GROUP)


def bundled_app_names() -> list[str]:
    """The names of the bundled apps (their entry points'), without importing them."""
    return sorted({entry.name for entry in entry_points(group=BUNDLED_APPS_ENTRY_POINT_GROUP)})


def available_apps(extra: Sequence[str] = ()) -> list[App]:
    """:func:`installed_apps`, then each bundled app whose name none of them takes.

    What ``platform apps`` offers commands of: a bundled app's commands need no
    ``--app``, and need not its tables in the database.
    """
    found = installed_apps(extra)
    taken = {app.name for app in found}
    return found + [app for app in bundled_apps() if app.name not in taken]


def env_references(environ: Mapping[str, str] | None = None) -> list[str]:
    """The app references listed in ``$EVENTPLATFORM_APPS`` (blank entries ignored)."""
    value = (os.environ if environ is None else environ).get(APPS_ENV, "")
    return [reference.strip() for reference in value.split(",") if reference.strip()]


def load_app(reference: str) -> App:
    """The app at ``package.module`` (attribute ``app``) or ``package.module:attribute``.

    A reference that is a bundled app's name is that app. Any other is imported with
    the current directory first on ``sys.path``, as ``python -m`` would have it.
    """
    name = reference.strip()
    for entry_point in entry_points(group=BUNDLED_APPS_ENTRY_POINT_GROUP):
        if entry_point.name == name:
            return _loaded_entry_point(entry_point)
    _current_directory_on_path()
    target = resolve_reference(reference, APP_ATTRIBUTE_DEFAULT, what="app reference")
    return _checked(target, f"app reference {reference!r}")


def resolve_reference(reference: str, default: str | None = None, *, what: str) -> object:
    """The object ``package.module:attribute`` names, importing the module.

    Without ``:attribute`` the attribute is ``default``; with no default the
    reference must name one. ``what`` (``"app reference"``, ``"commands of
    app metrics"``) begins the :class:`AppError` that a bad reference raises.
    """
    module_name, _, attribute_path = reference.strip().partition(":")
    attribute_path = attribute_path or default or ""
    if not module_name or not attribute_path:
        expected = "package.module[:attribute]" if default else "package.module:attribute"
        raise AppError(f"{what} {reference!r}: expected {expected!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppError(f"{what} {reference!r}: cannot import {module_name}: {exc}") from exc
    target: object = module
    for attribute in attribute_path.split("."):
        try:
            target = getattr(target, attribute)
        except AttributeError as exc:
            raise AppError(
                f"{what} {reference!r}: {module_name} has no attribute {attribute_path!r}"
            ) from exc
    return target


def find_projection(name: str, apps: Iterable[App]) -> Projection:
    """The projection called ``name`` among the apps' projections."""
    known: list[str] = []
    for app in apps:
        for projection in app.projections:
            if projection.name == name:
                return projection
            known.append(projection.name)
    listing = ", ".join(sorted(known)) if known else "none: no app is installed"
    raise AppError(
        f"no projection named {name!r}; known projections: {listing}{bundled_hint(name)}"
    )


def bundled_hint(name: str) -> str:
    """For a ``<app>.<name>`` that a bundled app not loaded would have: how to ask for it."""
    app_name = name.partition(".")[0]
    if app_name not in bundled_app_names():
        return ""
    return (
        f" ({app_name} is a bundled app: name it with --app {app_name}, and create its "
        f"tables with platform db upgrade --app {app_name})"
    )


def _current_directory_on_path() -> None:
    """The current directory first on ``sys.path``, unless it is on it already."""
    here = Path.cwd().resolve()
    if all(Path(entry or os.curdir).resolve() != here for entry in sys.path):
        sys.path.insert(0, str(here))


def _entry_point_apps(group: str) -> list[App]:
    """Apps from installed distributions, sorted by entry-point name for a stable order."""
    return [
        _loaded_entry_point(entry_point)
        for entry_point in sorted(entry_points(group=group), key=lambda e: e.name)
    ]


def _loaded_entry_point(entry_point: EntryPoint) -> App:
    where = f"entry point {entry_point.name} = {entry_point.value}"
    try:
        loaded = entry_point.load()
    except (ImportError, AttributeError) as exc:
        raise AppError(f"{where}: cannot load it: {exc}") from exc
    return _checked(loaded, where)


def _checked(target: object, where: str) -> App:
    if not isinstance(target, App):
        raise AppError(f"{where}: resolves to {type(target).__name__}, not an App")
    return target


def _distinct(apps: Iterable[App]) -> list[App]:
    """``apps`` without repeats; two different apps may not share a name."""
    by_name: dict[str, App] = {}
    for app in apps:
        seen = by_name.setdefault(app.name, app)
        if seen is not app:
            raise AppError(f"two different apps are named {app.name!r}")
    return list(by_name.values())
