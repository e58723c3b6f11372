"""Which bundled apps a database has: those whose revisions it is at.

The bundled apps are not installed apps: ``platform db upgrade --app
activity`` gives a database their tables. From then on the commands that work
on that database (``platform db``, ``platform projections``, ``platform
query``) load the app unasked, so a later upgrade keeps its tables current
and its projections and named queries are there.

It reads the database's version table and each bundled app's revision ids,
which it takes from its revision files without importing them, so a command
pays neither for Alembic nor for the revisions' imports. A SQLite file is
opened read-only, and one that does not exist is not created.
"""

from __future__ import annotations

import ast
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Engine, MetaData, Table, create_engine, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from eventplatform.projections.apps import App, bundled_apps
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.errors import MigrationError

VERSION_TABLE = "ep_alembic_version"
"""Alembic's version table, as :mod:`eventplatform.projections.migrate` names it."""


def bundled_apps_in(target: Engine | str, loaded: Sequence[App] = ()) -> list[App]:
    """The bundled apps, other than those named in ``loaded``, whose revisions the database
    is at (a revision of theirs is among the heads its version table holds)."""
    taken = {app.name for app in loaded}
    candidates = [app for app in bundled_apps() if app.name not in taken]
    if not candidates:
        return []
    heads = database_heads(target)
    return [app for app in candidates if heads & revision_ids(app)]


def database_heads(target: Engine | str) -> set[str]:
    """The revisions in the database's version table; none when it has no such table."""
    try:
        with _reading_engine(target) as engine:
            if engine is None:
                return set()
            with engine.connect() as connection:
                if not inspect(connection).has_table(VERSION_TABLE):
                    return set()
                table = Table(VERSION_TABLE, MetaData(), autoload_with=connection)
                return {row[0] for row in connection.execute(select(table.c.version_num))}
    except DBAPIError as exc:
        reason = str(exc.orig).strip().split("\n", 1)[0]
        raise MigrationError(f"database {_shown(target)}: {reason}") from exc
    except SQLAlchemyError as exc:
        raise MigrationError(str(exc)) from exc


def _shown(target: Engine | str) -> str:
    """The database's URL without its password."""
    url = target.url if isinstance(target, Engine) else make_url(target)
    return url.render_as_string(hide_password=True)


def revision_ids(app: App) -> set[str]:
    """The ids of the revisions in the app's migrations folder, read from their source: each
    revision file assigns its id to ``revision`` at its top level."""
    if app.migrations is None or not Path(app.migrations).is_dir():
        return set()
    ids = set()
    for path in Path(app.migrations).glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.AnnAssign):
                targets: list[ast.expr] = [node.target]
            elif isinstance(node, ast.Assign):
                targets = node.targets
            else:
                continue
            value = node.value
            named = any(isinstance(t, ast.Name) and t.id == "revision" for t in targets)
            if named and isinstance(value, ast.Constant) and isinstance(value.value, str):
                ids.add(value.value)
    return ids


@contextmanager
def _reading_engine(target: Engine | str) -> Iterator[Engine | None]:
    """An engine for reading ``target``: a SQLite file opened read-only (``None`` when there
    is none: it is not created), any other database as the stores connect to it."""
    if isinstance(target, Engine):
        yield target
        return
    url = make_url(target)
    database = url.database
    sqlite_file = url.get_backend_name() == "sqlite" and database and database != ":memory:"
    if not sqlite_file or database is None or database.startswith("file:"):
        engine = create_store_engine(target)
    else:
        path = Path(database).resolve()
        if not path.is_file():
            yield None
            return
        uri = f"file:{quote(str(path))}?mode=ro"
        engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True))
    try:
        yield engine
    finally:
        engine.dispose()
