"""Migrating the SQL schema: the platform's own tables and the installed apps' tables.

The schema is one Alembic history with one branch per owner. Branch
``eventplatform`` holds the platform's tables (the revisions ship in
``eventplatform.migrations``). Each app has a branch labelled with its name,
in the app's own ``migrations`` folder. The first revision of an app depends
on :data:`PLATFORM_BASE_REVISION`. So an upgrade to ``heads`` creates the
platform's tables before any app's tables, and each app evolves its tables
without touching another owner's revisions.

Each command runs in one transaction that holds the database's migration
lock: a PostgreSQL advisory lock, or on SQLite the write lock that
``BEGIN IMMEDIATE`` takes. Group members that all upgrade at start-up
therefore apply each revision once. Both databases have transactional DDL,
so a failing revision leaves the schema as it was.

The Alembic configuration is built here, not read from an ``alembic.ini``,
because where the revisions live depends on which apps are installed.

The bundled apps are not installed apps: a database gets their tables when
they are named (``--app activity``), and from then on
:func:`~eventplatform.projections.app_databases.bundled_apps_in` finds them
there, so the commands that work on that database load them unasked.
"""

from __future__ import annotations

import os
import tempfile
from argparse import Namespace
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.script import Script, ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, MetaData, Table, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.schema import SchemaItem

from eventplatform.projections import schema
from eventplatform.projections.app_databases import VERSION_TABLE as VERSION_TABLE
from eventplatform.projections.apps import App
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.errors import MigrationError
from eventplatform.projections.model import MIGRATION_INDEXES

PLATFORM_BRANCH = "eventplatform"
PLATFORM_BASE_REVISION = "eventplatform_0001"
PLATFORM_HEAD_REVISION = "eventplatform_0004"
MIGRATIONS_PACKAGE = "eventplatform.migrations"

# The key of the PostgreSQL advisory lock: the ASCII bytes of "epmigrat".
MIGRATION_LOCK_KEY = 0x65706D6967726174

# What the callers of Alembic hand to env.py through Config.attributes.
ATTRIBUTE_APPS = "apps"
ATTRIBUTE_CONNECTION = "connection"
ATTRIBUTE_ON_VERSION_APPLY = "on_version_apply"
ATTRIBUTE_ONLY_TABLES = "only_tables"

Target = Engine | str
IncludeObject = Callable[[SchemaItem, str | None, str, bool, SchemaItem | None], bool]


@dataclass(frozen=True)
class Revision:
    """One revision of the schema history."""

    id: str
    branches: tuple[str, ...]
    description: str
    down_revisions: tuple[str, ...]
    depends_on: tuple[str, ...]


@dataclass(frozen=True)
class MigrationResult:
    """What a command did: the revisions it ran, in order, and the heads it left."""

    revisions: tuple[Revision, ...]
    heads: tuple[str, ...]


def upgrade(target: Target, apps: Sequence[App] = (), revision: str = "heads") -> MigrationResult:
    """Bring the schema up to ``revision`` (every branch's head by default).

    Running it again changes nothing. ``target`` is an engine made by
    :func:`~eventplatform.projections.database.create_store_engine` or a URL.
    """
    return _migrate(target, apps, lambda config: command.upgrade(config, revision))


def downgrade(target: Target, apps: Sequence[App], revision: str) -> MigrationResult:
    """Revert the schema to ``revision``; this drops tables and their rows.

    Reverting a revision first reverts the revisions that depend on it, so
    ``eventplatform@base`` reverts every app's branch and then the platform's.
    """
    return _migrate(target, apps, lambda config: command.downgrade(config, revision))


def current(target: Target) -> list[str]:
    """The revisions the database is at, sorted.

    A head that another head depends on is implied by it and not listed: with
    the platform at its first revision and one app applied, only the app's
    head shows.
    """
    with _translated_errors(), _engine(target) as engine, engine.connect() as connection:
        return sorted(_heads(connection))


def history(apps: Sequence[App] = ()) -> list[Revision]:
    """Every revision of the platform and of ``apps``, oldest first."""
    with _translated_errors():
        script = _script_directory(alembic_config(apps), apps)
        return [_revision_of(entry) for entry in reversed(list(script.walk_revisions()))]


def schema_differences(target: Target, apps: Sequence[App] = ()) -> list[str]:
    """How the database differs from the declared tables (empty when they agree).

    A difference after an upgrade means a table declaration changed without
    a revision. Tables the declarations do not know (other apps', shadow
    tables of a rebuild) are not differences.
    """
    metadata = target_metadata(apps)
    options = {
        "version_table": VERSION_TABLE,
        "compare_type": True,
        "include_object": include_object_for(None, metadata),
        "target_metadata": metadata,
    }
    with _translated_errors(), _engine(target) as engine, engine.connect() as connection:
        context = MigrationContext.configure(connection, opts=options)
        differences = compare_metadata(context, metadata)
    return [_describe(difference) for difference in differences]


def new_revision(
    target: Target | None,
    apps: Sequence[App],
    *,
    app_name: str,
    message: str,
    autogenerate: bool = True,
    revision_id: str | None = None,
) -> Path:
    """Write the next revision of app ``app_name`` into its migrations folder; its path.

    With ``autogenerate`` the revision holds what the database (which must be
    at every head) lacks of the app's tables; other owners' tables are left
    out. An app's first revision gets its branch label and its dependency on
    the platform's base revision, and creates every table the app declares:
    it is generated against an empty scratch database (SQLite, in a temporary
    folder, at the platform's head), so it needs no database of its own
    (``target`` may be ``None``) and comes out the same whatever ``target``
    holds.
    """
    app = _app_named(app_name, apps)
    folder = _migrations_folder(app)
    if folder is None:
        raise MigrationError(f"app {app.name} declares no migrations folder to write into")
    with _translated_errors():
        first = not _scripts_in(ScriptDirectory.from_config(alembic_config(apps)), folder)
    if first:
        with tempfile.TemporaryDirectory(prefix="eventplatform-revision-") as scratch:
            url = f"sqlite:///{Path(scratch) / 'empty.db'}"
            upgrade(url)
            return _write_revision(url, [app], app, folder, message, autogenerate, revision_id)
    if target is None:
        raise MigrationError(
            f"app {app.name}: its next revision is autogenerated against a database: give one"
        )
    return _write_revision(target, apps, app, folder, message, autogenerate, revision_id)


def _write_revision(
    target: Target,
    apps: Sequence[App],
    app: App,
    folder: Path,
    message: str,
    autogenerate: bool,
    revision_id: str | None,
) -> Path:
    with _translated_errors(), locked_connection(target) as connection:
        config = alembic_config(apps, connection=connection)
        config.attributes[ATTRIBUTE_ONLY_TABLES] = frozenset(_tables_of(app))
        first = not _scripts_in(ScriptDirectory.from_config(config), folder)
        try:
            written = command.revision(
                config,
                message=message,
                autogenerate=autogenerate,
                head="base" if first else f"{app.name}@head",
                branch_label=(app.name,) if first else None,
                depends_on=PLATFORM_BASE_REVISION if first else None,
                version_path=str(folder),
                rev_id=revision_id,
            )
        except CommandError as exc:
            if "not up to date" not in str(exc):
                raise
            raise MigrationError(
                f"app {app.name}: the database is not at every head of the loaded revisions, "
                "and a revision is autogenerated against one that is: run platform db upgrade "
                "first, loading the same apps"
            ) from exc
    if not isinstance(written, Script):
        raise MigrationError(f"app {app.name}: Alembic wrote no single revision ({written!r})")
    return Path(written.path)


def alembic_config(
    apps: Sequence[App],
    *,
    connection: Connection | None = None,
    on_version_apply: Callable[..., None] | None = None,
) -> Config:
    """The Alembic configuration for the platform's revisions and those of ``apps``.

    Paths are joined by newlines, so folders whose names hold spaces or
    colons work, and ``%`` is escaped from the configuration's interpolation.
    Alembic's progress messages are off: callers report the result.
    """
    locations = [_environment_folder() / "versions"]
    locations.extend(folder for app in apps if (folder := _migrations_folder(app)) is not None)
    config = Config(cmd_opts=Namespace(quiet=True))
    config.set_main_option("script_location", _escaped(_environment_folder()))
    config.set_main_option("path_separator", "newline")
    config.set_main_option(
        "version_locations", "\n".join(_escaped(path) for path in dict.fromkeys(locations))
    )
    config.attributes[ATTRIBUTE_APPS] = list(apps)
    if connection is not None:
        config.attributes[ATTRIBUTE_CONNECTION] = connection
    if on_version_apply is not None:
        config.attributes[ATTRIBUTE_ON_VERSION_APPLY] = on_version_apply
    return config


def target_metadata(apps: Iterable[App]) -> MetaData:
    """One ``MetaData`` with the platform's tables and every table of the apps' metadata.

    Autogenerate compares the database with it. Two owners declaring one
    table name is an error: each table belongs to exactly one branch.
    """
    combined = MetaData()
    owners: dict[str, tuple[str, Table]] = {}
    for owner, table in _declared_tables(apps):
        known = owners.get(table.key)
        if known is not None and known[1] is not table:
            raise MigrationError(f"table {table.key} is declared by both {known[0]} and {owner}")
        if known is None:
            owners[table.key] = (owner, table)
            table.to_metadata(combined)
    return combined


def include_object_for(
    only_tables: Collection[str] | None, metadata: MetaData | None = None
) -> IncludeObject:
    """Autogenerate's filter: skip tables no declaration knows, and keep to ``only_tables``.

    A database shared by several owners holds tables the current process
    does not declare; autogenerate must not write revisions that drop them.
    Indexes a table of ``metadata`` lists in its ``info[MIGRATION_INDEXES]``
    are made by a migration in SQL of one database (a full-text index) and
    are not differences either.
    """
    made_by_migrations = {
        index
        for table in (metadata.tables.values() if metadata is not None else ())
        for index in table.info.get(MIGRATION_INDEXES, ())
    }

    def include(
        item: SchemaItem, name: str | None, kind: str, reflected: bool, compare_to: Any
    ) -> bool:
        if kind == "index":
            return not (reflected and compare_to is None and name in made_by_migrations)
        if kind != "table":
            return True
        if only_tables is not None and name not in only_tables:
            return False
        return not (reflected and compare_to is None)

    return include


@contextmanager
def locked_connection(target: Target) -> Iterator[Connection]:
    """A connection in a transaction that holds the migration lock; commits on success."""
    with _engine(target) as engine, engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            lock = text("SELECT pg_advisory_xact_lock(:key)")
            connection.execute(lock, {"key": MIGRATION_LOCK_KEY})
        yield connection


def _migrate(target: Target, apps: Sequence[App], run: Callable[[Config], None]) -> MigrationResult:
    ran: list[str] = []

    # Alembic calls this after each revision, passing every argument by keyword.
    def record(
        *,
        ctx: MigrationContext,
        step: MigrationInfo,
        heads: Collection[Any],
        run_args: Mapping[str, Any],
    ) -> None:
        ran.extend(step.up_revision_ids)

    with _translated_errors(), locked_connection(target) as connection:
        config = alembic_config(apps, connection=connection, on_version_apply=record)
        script = _script_directory(config, apps)
        _check_heads_known(script, _heads(connection))
        run(config)
        heads = _heads(connection)
        revisions = tuple(_revision_of(script.get_revision(revision_id)) for revision_id in ran)
    return MigrationResult(revisions, heads)


@contextmanager
def _engine(target: Target) -> Iterator[Engine]:
    """The engine of ``target``; one made here from a URL is disposed of afterwards."""
    if isinstance(target, Engine):
        yield target
        return
    engine = create_store_engine(target)
    try:
        yield engine
    finally:
        engine.dispose()


@contextmanager
def _translated_errors() -> Iterator[None]:
    """Alembic's and SQLAlchemy's errors, as the one exception callers of this module catch."""
    try:
        yield
    except (CommandError, RevisionError) as exc:
        raise MigrationError(str(exc)) from exc
    except DBAPIError as exc:
        statement = f" (while running: {exc.statement.strip()})" if exc.statement else ""
        raise MigrationError(f"database error: {exc.orig}{statement}") from exc
    except SQLAlchemyError as exc:
        raise MigrationError(str(exc)) from exc


def _heads(connection: Connection) -> tuple[str, ...]:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return tuple(sorted(context.get_current_heads()))


def _script_directory(config: Config, apps: Sequence[App]) -> ScriptDirectory:
    """The revisions of ``config``, after checking that each app's branch is well formed."""
    script = ScriptDirectory.from_config(config)
    platform = _scripts_in(script, _environment_folder() / "versions")
    platform_ids = {entry.revision for entry in platform}
    for app in apps:
        folder = _migrations_folder(app)
        if folder is not None:
            _check_app_branch(app.name, _scripts_in(script, folder), platform_ids)
    return script


def _check_app_branch(name: str, scripts: list[Script], platform_ids: set[str]) -> None:
    """An app's revisions form one branch labelled ``name`` that depends on the platform."""
    if not scripts:
        raise MigrationError(
            f"app {name}: its migrations folder holds no revisions; write the first, which "
            f"needs no database, with: platform db revision {name} -m 'tables' "
            "(with the --app that loads it)"
        )
    own_ids = {entry.revision for entry in scripts}
    firsts = [entry for entry in scripts if not set(_as_tuple(entry.down_revision)) & own_ids]
    hint = (
        f"an app's first revision declares down_revision = None, "
        f"branch_labels = ({name!r},) and depends_on = {PLATFORM_BASE_REVISION!r}"
    )
    if len(firsts) != 1:
        found = ", ".join(sorted(entry.revision for entry in firsts))
        raise MigrationError(f"app {name}: expected one first revision, found {found}; {hint}")
    first = firsts[0]
    if first.down_revision is not None or name not in first.branch_labels:
        raise MigrationError(f"app {name}: {first.revision} does not start a branch; {hint}")
    if not set(_as_tuple(first.dependencies)) & platform_ids:
        raise MigrationError(
            f"app {name}: {first.revision} does not depend on the platform; {hint}"
        )


def _check_heads_known(script: ScriptDirectory, heads: Iterable[str]) -> None:
    known = {entry.revision for entry in script.walk_revisions()}
    unknown = sorted(head for head in heads if head not in known)
    if unknown:
        raise MigrationError(
            f"the database is at revision(s) {', '.join(unknown)}, which no loaded migrations "
            "define: load the app that owns them (an entry point, $EVENTPLATFORM_APPS or --app)"
        )


def _scripts_in(script: ScriptDirectory, folder: Path) -> list[Script]:
    resolved = folder.resolve()
    return [entry for entry in script.walk_revisions() if _folder_of(entry) == resolved]


def _folder_of(entry: Script) -> Path:
    return Path(entry.path).parent.resolve()


def _revision_of(entry: Script | None) -> Revision:
    assert entry is not None, "Alembic ran a revision its script directory does not know"
    return Revision(
        id=entry.revision,
        branches=tuple(sorted(entry.branch_labels)),
        description=entry.doc,
        down_revisions=_as_tuple(entry.down_revision),
        depends_on=_as_tuple(entry.dependencies),
    )


def _as_tuple(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _declared_tables(apps: Iterable[App]) -> Iterator[tuple[str, Table]]:
    yield from ((PLATFORM_BRANCH, table) for table in schema.metadata.sorted_tables)
    for app in apps:
        for table in _app_metadata_tables(app):
            yield app.name, table


def _app_metadata_tables(app: App) -> list[Table]:
    """Every table of every ``MetaData`` that holds one of the app's projection tables."""
    metadatas = {
        id(table.metadata): table.metadata
        for projection in app.projections
        for table in projection.tables
    }
    return [table for metadata in metadatas.values() for table in metadata.sorted_tables]


def _tables_of(app: App) -> list[str]:
    return [table.name for table in _app_metadata_tables(app)]


def _app_named(name: str, apps: Sequence[App]) -> App:
    for app in apps:
        if app.name == name:
            return app
    known = ", ".join(sorted(app.name for app in apps)) or "none"
    raise MigrationError(f"no app named {name!r} is loaded; loaded apps: {known}")


def _migrations_folder(app: App) -> Path | None:
    if app.migrations is None:
        return None
    folder = Path(app.migrations).absolute()
    if not folder.is_dir():
        raise MigrationError(f"app {app.name}: migrations folder {folder} does not exist")
    return folder


def _environment_folder() -> Path:
    folder = files(MIGRATIONS_PACKAGE)
    if not isinstance(folder, Path):
        raise MigrationError(f"{MIGRATIONS_PACKAGE} must be installed as files, not zipped")
    return folder


def _escaped(path: Path) -> str:
    return os.fspath(path).replace("%", "%%")


def _describe(difference: Any) -> str:
    """One line for one of Alembic's difference tuples (or a list of column changes)."""
    if isinstance(difference, list):
        return "; ".join(_describe(item) for item in difference)
    kind, *details = difference
    if kind in {"add_table", "remove_table"}:
        return f"{kind} {details[0].name}"
    if kind in {"add_column", "remove_column"}:
        return f"{kind} {details[1]}.{details[2].name}"
    if kind in {"add_index", "remove_index", "add_constraint", "remove_constraint"}:
        return f"{kind} {details[0].name} on {details[0].table.name}"
    if kind.startswith("modify_"):
        return f"{kind} {details[1]}.{details[2]}: {details[-2]!r} -> {details[-1]!r}"
    return f"{kind} {details!r}"
