"""Setting up an app's tables: its first revision, finding it in the current directory,
and the bundled apps' tables only when asked for.

A new app's first revision needs no database (it is written from the declared tables
against an empty scratch one), and ``platform db upgrade --app NAME`` then creates the
platform's tables and the app's in one go on an empty database. ``--app`` finds a package
in the current directory without ``PYTHONPATH``. The bundled apps (activity, metrics,
logs) are not installed apps: ``--app activity`` creates their tables, and a database
that has them keeps them.
"""

from __future__ import annotations

import sys
import textwrap
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import BigInteger, Column, MetaData, String, inspect

from eventplatform.cli import main
from eventplatform.demo import demo_apps
from eventplatform.projections import migrate
from eventplatform.projections.app_databases import revision_ids
from eventplatform.projections.apps import (
    APPS_ENV,
    App,
    AppError,
    available_apps,
    bundled_apps,
    find_projection,
    installed_apps,
    load_app,
)
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.errors import MigrationError
from eventplatform.projections.merge import Sum
from eventplatform.projections.model import Projection, merge_column, projection_table

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ("activity", "logs", "metrics")
BUNDLED_TABLE_PREFIXES = ("activity_", "metrics_", "logs_")


@pytest.fixture(autouse=True)
def no_apps_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(APPS_ENV, raising=False)


def table_names(url: str) -> set[str]:
    engine = create_store_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def things_app(folder: Path) -> App:
    """An app with one table, ``setup_things``, and the migrations folder ``folder``."""
    metadata = MetaData()
    things = projection_table(
        "setup_things",
        metadata,
        Column("thing", String(50), primary_key=True),
        merge_column("amount", BigInteger, Sum()),
    )
    return App(
        "setup", projections=[Projection("setup.things", tables=[things])], migrations=folder
    )


def invoke(*arguments: str, code: int = 0) -> str:
    result = CliRunner().invoke(main, list(arguments))
    assert result.exit_code == code, (result.output, result.exception)
    return result.output


# An app's first revision


def test_the_first_revision_is_written_on_an_empty_database_and_leaves_it_empty(
    database_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    app = things_app(folder)

    path = migrate.new_revision(
        database_url, [app], app_name="setup", message="things", revision_id="setup_0001"
    )

    assert path.parent == folder
    source = path.read_text()
    assert "op.create_table('setup_things'" in source
    assert "branch_labels: str | Sequence[str] | None = ('setup',)" in source
    assert f"depends_on: str | Sequence[str] | None = {migrate.PLATFORM_BASE_REVISION!r}" in source
    assert "ep_checkpoints" not in source
    assert table_names(database_url) == set()  # written without touching the database
    # then one upgrade of the empty database makes the platform's tables and the app's
    result = migrate.upgrade(database_url, [app])
    assert result.heads == (migrate.PLATFORM_HEAD_REVISION, "setup_0001")
    assert "setup_things" in table_names(database_url)
    assert migrate.schema_differences(database_url, [app]) == []


def test_the_first_revision_needs_no_database(tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()

    path = migrate.new_revision(None, [things_app(folder)], app_name="setup", message="things")

    assert path.parent == folder and "op.create_table('setup_things'" in path.read_text()


def test_a_later_revision_against_a_database_behind_says_to_upgrade_first(
    sqlite_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    app = things_app(folder)
    migrate.new_revision(None, [app], app_name="setup", message="things")

    with pytest.raises(MigrationError, match="run platform db upgrade first"):
        migrate.new_revision(sqlite_url, [app], app_name="setup", message="more")


def test_an_app_without_revisions_says_how_to_write_the_first(tmp_path: Path) -> None:
    with pytest.raises(MigrationError, match=r"holds no revisions.*platform db revision empty"):
        migrate.history([App("empty", migrations=tmp_path)])


# An app in the current directory


@pytest.fixture
def package_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A package in the current directory (not on ``sys.path``), as a user's new app is:
    its App has one table and an empty migrations folder. Its name, unique to this test."""
    name = f"here_{uuid.uuid4().hex[:8]}"
    package = tmp_path / name
    (package / "migrations").mkdir(parents=True)
    source = f'''\
        from pathlib import Path

        from sqlalchemy import BigInteger, Column, MetaData, String

        from eventplatform.projections import App, Projection, Sum, merge_column
        from eventplatform.projections import projection_table

        metadata = MetaData()
        totals = projection_table(
            "{name}_totals",
            metadata,
            Column("thing", String(50), primary_key=True),
            merge_column("amount", BigInteger, Sum()),
        )
        app = App(
            "{name}",
            projections=[Projection("{name}.totals", tables=[totals])],
            migrations=Path(__file__).resolve().parent / "migrations",
        )
        '''
    (package / "__init__.py").write_text(textwrap.dedent(source))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the current directory goes on it
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


def test_app_references_are_found_in_the_current_directory(package_here: str) -> None:
    assert load_app(package_here).name == package_here
    assert load_app(f"{package_here}:app") is load_app(package_here)


def test_db_revision_then_upgrade_from_an_empty_database_with_the_app_here(
    package_here: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    option = ("--app", package_here, "--database", url)

    written = invoke("db", "revision", *option, "-m", "tables")  # the app named by --app
    upgraded = invoke("db", "upgrade", *option)

    assert Path(written.strip()).parent == tmp_path / package_here / "migrations"
    assert f"({package_here}): tables" in upgraded
    assert f"{package_here}_totals" in table_names(url)
    again = invoke("db", "revision", *option, "-m", "nothing yet", "--empty")
    assert Path(again.strip()).is_file()


def test_db_revision_without_a_name_needs_exactly_one_app() -> None:
    output = invoke("db", "revision", "-m", "x", code=2)
    assert "name the app: platform db revision APP_NAME" in output


# The bundled apps only when asked for


def test_the_bundled_apps_are_not_installed_apps() -> None:
    assert not {app.name for app in installed_apps()} & set(BUNDLED)
    assert sorted(app.name for app in bundled_apps()) == list(BUNDLED)
    assert {app.name for app in available_apps()} >= set(BUNDLED)
    assert "activity" in {app.name for app in installed_apps(["activity"])}


def test_the_bundled_apps_tables_come_only_when_asked_for_and_then_stay(
    database_url: str,
) -> None:
    database = ("--database", database_url)

    plain = invoke("db", "upgrade", *database)
    assert "activity" not in plain
    assert not [t for t in table_names(database_url) if t.startswith(BUNDLED_TABLE_PREFIXES)]
    assert "activity." not in invoke("projections", "list", *database)

    asked = invoke("db", "upgrade", *database, "--app", "activity")
    assert "(activity)" in asked
    tables = table_names(database_url)
    assert "activity_sessions" in tables
    assert not [t for t in tables if t.startswith(("metrics_", "logs_"))]

    # The database has the activity app now: the commands on it load the app unasked.
    again = invoke("db", "upgrade", *database)
    assert "nothing to do" in again and "activity_0001" in again
    invoke("db", "check", *database)
    assert "activity.sessions\t" in invoke("projections", "list", *database)


def test_a_bundled_apps_revision_ids_are_read_as_alembic_reads_them() -> None:
    platform = {revision.id for revision in migrate.history()}
    for app in bundled_apps():
        expected = {revision.id for revision in migrate.history([app])} - platform
        assert revision_ids(app) == expected


def test_a_bundled_projection_not_asked_for_says_how_to_ask() -> None:
    with pytest.raises(AppError, match="activity is a bundled app: name it with --app activity"):
        find_projection("activity.sessions", [])


def test_the_bundled_apps_commands_need_no_app_option() -> None:
    listing = invoke("apps", "--help")
    for name in (*BUNDLED, "new"):
        assert f"  {name} " in listing
    assert "Website activity tracking." in invoke("apps", "activity", "--help")


def test_the_demo_asks_for_the_bundled_apps() -> None:
    assert [part.app.name for part in demo_apps()] == ["activity", "metrics", "logs"]


def test_the_bundled_apps_are_entry_points_of_their_own_group() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    groups = project["project"]["entry-points"]
    assert "eventplatform.apps" not in groups
    assert sorted(groups["eventplatform.bundled_apps"]) == list(BUNDLED)


# The revisions' descriptions


def test_no_revision_description_holds_a_stray_quote() -> None:
    for revision in migrate.history(bundled_apps()):
        assert '"' not in revision.description, revision
