"""Schema migrations: the platform's branch, the apps' branches, the ``platform db`` commands.

Every database test runs on SQLite and on PostgreSQL (the ``database_url``
fixture). The shared test app (``projection_test_app``) brings its own
branch, as a user's app would.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import projection_test_app
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from sqlalchemy import BigInteger, Column, MetaData, String, inspect, text

from eventplatform.db_cli import db
from eventplatform.projections import migrate, schema
from eventplatform.projections.apps import (
    APPS_ENV,
    App,
    AppError,
    bundled_apps,
    find_projection,
    installed_apps,
    load_app,
)
from eventplatform.projections.database import create_store_engine, reading
from eventplatform.projections.errors import MigrationError
from eventplatform.projections.merge import Sum
from eventplatform.projections.model import Projection, merge_column, projection_table
from eventplatform.projections.premerge import pack_ranks, row_hash, scope_of

SUPPORT = Path(__file__).resolve().parents[1] / "support"
TEST_APP = projection_test_app.app
PLATFORM_TABLES = set(schema.metadata.tables)
TEST_APP_TABLES = {"pt_totals", "pt_label_totals"}
TEST_APP_REVISION = "projection_tests_0001"
ALL_HEADS = (migrate.PLATFORM_HEAD_REVISION, TEST_APP_REVISION)
PLATFORM_LATER = tuple(r.id for r in migrate.history() if r.id != migrate.PLATFORM_BASE_REVISION)
"""The platform's revisions after its base, oldest first (the head last)."""


SUBPROCESS_TIMEOUT_S = 120


@pytest.fixture(autouse=True)
def no_apps_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(APPS_ENV, raising=False)


def table_names(url: str) -> set[str]:
    engine = create_store_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def write_revision(
    folder: Path,
    revision: str,
    *,
    branch_labels: tuple[str, ...] | None,
    depends_on: str | None,
    upgrade_body: str,
    down_revision: str | None = None,
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    source = f'''\
        """Test revision {revision}"""
        import sqlalchemy as sa
        from alembic import op

        revision = {revision!r}
        down_revision = {down_revision!r}
        branch_labels = {branch_labels!r}
        depends_on = {depends_on!r}


        def upgrade():
            {upgrade_body}


        def downgrade():
            pass
        '''
    (folder / f"{revision}.py").write_text(textwrap.dedent(source))


def things_app(folder: Path, *extra_columns: Column[int]) -> App:
    """An app with one table, ``gen_things``, and the migrations folder ``folder``."""
    metadata = MetaData()
    things = projection_table(
        "gen_things",
        metadata,
        Column("thing", String(50), primary_key=True),
        merge_column("amount", BigInteger, Sum()),
        *extra_columns,
    )
    projection = Projection("generated.things", tables=[things])
    return App("generated", projections=[projection], migrations=folder)


# Upgrading


def test_upgrade_creates_the_platform_tables_then_the_app_tables(database_url: str) -> None:
    result = migrate.upgrade(database_url, [TEST_APP])

    assert [revision.id for revision in result.revisions] == [
        migrate.PLATFORM_BASE_REVISION,
        TEST_APP_REVISION,
        *PLATFORM_LATER,
    ]
    assert result.revisions[0].branches == (migrate.PLATFORM_BRANCH,)
    assert result.revisions[1].branches == ("projection_tests",)
    assert table_names(database_url) == PLATFORM_TABLES | TEST_APP_TABLES | {migrate.VERSION_TABLE}


def test_upgrade_without_apps_creates_only_the_platform_tables(database_url: str) -> None:
    result = migrate.upgrade(database_url)

    assert result.heads == (migrate.PLATFORM_HEAD_REVISION,)
    assert table_names(database_url) == PLATFORM_TABLES | {migrate.VERSION_TABLE}


def test_upgrade_again_changes_nothing_and_keeps_rows(database_url: str) -> None:
    first = migrate.upgrade(database_url, [TEST_APP])
    engine = create_store_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO pt_label_totals (label, total, ticks, ep_contributions) "
                    "VALUES ('a', 5, 1, 1)"
                )
            )
        again = migrate.upgrade(engine, [TEST_APP])
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT label, total FROM pt_label_totals")).all()
    finally:
        engine.dispose()

    assert again.revisions == ()
    assert again.heads == first.heads
    assert [tuple(row) for row in rows] == [("a", 5)]


def test_current_reports_the_heads(database_url: str) -> None:
    assert migrate.current(database_url) == []

    migrate.upgrade(database_url)
    assert migrate.current(database_url) == [migrate.PLATFORM_HEAD_REVISION]

    migrate.upgrade(database_url, [TEST_APP])
    # The app's branch depends on the platform's first revision, not on its
    # head, so each branch shows its own head.
    assert migrate.current(database_url) == list(ALL_HEADS)


def test_revisions_create_exactly_the_declared_tables(database_url: str) -> None:
    assert "add_table pt_totals" in migrate.schema_differences(database_url, [TEST_APP])

    migrate.upgrade(database_url, [TEST_APP])

    assert migrate.schema_differences(database_url, [TEST_APP]) == []


def test_a_declaration_changed_without_a_revision_is_reported(
    database_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "things"
    folder.mkdir()
    app = things_app(folder)
    migrate.upgrade(database_url)
    migrate.new_revision(database_url, [app], app_name="generated", message="things")
    migrate.upgrade(database_url, [app])
    changed = things_app(folder, merge_column("extra", BigInteger, Sum()))

    assert migrate.schema_differences(database_url, [changed]) == ["add_column gen_things.extra"]


def test_sqlite_database_ends_in_wal_mode(sqlite_url: str) -> None:
    migrate.upgrade(sqlite_url, [TEST_APP])

    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as connection:
        [(mode,)] = connection.execute("PRAGMA journal_mode").fetchall()
    assert mode == "wal"


def test_concurrent_upgrades_apply_each_revision_once(database_url: str) -> None:
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda _: migrate.upgrade(database_url, [TEST_APP]), range(3)))

    applied = sorted(revision.id for result in results for revision in result.revisions)
    assert applied == sorted([migrate.PLATFORM_BASE_REVISION, *PLATFORM_LATER, TEST_APP_REVISION])
    assert {result.heads for result in results} == {ALL_HEADS}


def test_connections_opening_a_new_sqlite_database_at_once_all_get_wal(tmp_path: Path) -> None:
    threads = 6
    for attempt in range(8):
        engines = [create_store_engine(f"sqlite:///{tmp_path / f'new-{attempt}.db'}")]
        engines += [create_store_engine(engines[0].url) for _ in range(threads - 1)]
        barrier = threading.Barrier(threads)

        def journal_mode(engine: sa.Engine, barrier: threading.Barrier = barrier) -> str:
            barrier.wait(10)
            with engine.connect() as connection:
                return str(connection.exec_driver_sql("PRAGMA journal_mode").scalar())

        with ThreadPoolExecutor(max_workers=threads) as pool:
            modes = list(pool.map(journal_mode, engines))
        for engine in engines:
            engine.dispose()
        assert modes == ["wal"] * threads


def test_a_sqlite_reader_neither_waits_for_a_writer_nor_blocks_it(tmp_path: Path) -> None:
    path = tmp_path / "readers.db"
    engine = create_store_engine(f"sqlite:///{path}")
    impatient = sqlite3.connect(path, timeout=0.2, isolation_level=None)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("CREATE TABLE counter (n INTEGER)")
            connection.exec_driver_sql("INSERT INTO counter VALUES (1)")
        with reading(engine) as reader, reader.begin():
            assert reader.exec_driver_sql("SELECT n FROM counter").scalar() == 1
            impatient.execute("BEGIN IMMEDIATE")  # the reader holds no lock that stops a writer
            impatient.execute("UPDATE counter SET n = 2")
            with reading(engine) as second:  # nor does a writer stop a reader
                assert second.exec_driver_sql("SELECT n FROM counter").scalar() == 1
            impatient.execute("COMMIT")
            assert reader.exec_driver_sql("SELECT n FROM counter").scalar() == 1  # its snapshot
        with reading(engine) as reader:
            assert reader.exec_driver_sql("SELECT n FROM counter").scalar() == 2
        with engine.begin(), pytest.raises(sqlite3.OperationalError, match="locked"):
            impatient.execute("BEGIN IMMEDIATE")  # a store transaction holds the write lock
    finally:
        impatient.close()
        engine.dispose()


def test_a_failing_revision_leaves_the_schema_as_it_was(database_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    write_revision(
        folder,
        "broken_0001",
        branch_labels=("broken",),
        depends_on=migrate.PLATFORM_BASE_REVISION,
        upgrade_body=(
            'op.create_table("half_done", sa.Column("id", sa.Integer, primary_key=True)); '
            'op.execute("SELECT * FROM no_such_table")'
        ),
    )
    migrate.upgrade(database_url)

    with pytest.raises(MigrationError, match="no_such_table"):
        migrate.upgrade(database_url, [App("broken", migrations=folder)])

    assert "half_done" not in table_names(database_url)
    assert migrate.current(database_url) == [migrate.PLATFORM_HEAD_REVISION]


def test_migrations_folders_may_hold_spaces_colons_and_percent_signs(
    database_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "app: migrations 100%"
    shutil.copytree(projection_test_app.MIGRATIONS, folder)
    app = App("projection_tests", projections=TEST_APP.projections, migrations=folder)

    result = migrate.upgrade(database_url, [app])

    assert result.heads == ALL_HEADS
    assert table_names(database_url) >= TEST_APP_TABLES


# Downgrading


def test_downgrading_the_platform_to_base_removes_every_table(database_url: str) -> None:
    migrate.upgrade(database_url, [TEST_APP])

    result = migrate.downgrade(database_url, [TEST_APP], "eventplatform@base")

    assert [revision.id for revision in result.revisions] == [
        *reversed(PLATFORM_LATER),
        TEST_APP_REVISION,
        migrate.PLATFORM_BASE_REVISION,
    ]
    assert table_names(database_url) == {migrate.VERSION_TABLE}
    assert migrate.current(database_url) == []


def test_downgrading_an_app_branch_keeps_the_platform_tables(database_url: str) -> None:
    migrate.upgrade(database_url, [TEST_APP])

    migrate.downgrade(database_url, [TEST_APP], "projection_tests@base")

    assert table_names(database_url) == PLATFORM_TABLES | {migrate.VERSION_TABLE}
    assert migrate.current(database_url) == [migrate.PLATFORM_HEAD_REVISION]


def test_the_bundled_apps_match_their_revisions_and_downgrade_cleanly(database_url: str) -> None:
    bundled = bundled_apps()
    assert sorted(app.name for app in bundled) == ["activity", "logs", "metrics"]
    migrate.upgrade(database_url, bundled)
    # views, triggers and the full-text indexes included: nothing the declarations lack
    assert migrate.schema_differences(database_url, bundled) == []

    for app in bundled:
        migrate.downgrade(database_url, bundled, f"{app.name}@base")
    leftover = table_names(database_url) - PLATFORM_TABLES - {migrate.VERSION_TABLE}
    assert leftover == set()
    migrate.upgrade(database_url, bundled)
    assert migrate.schema_differences(database_url, bundled) == []


# Writing an app's revisions


def test_new_revision_autogenerates_an_app_branch(database_url: str, tmp_path: Path) -> None:
    folder = tmp_path / "things"
    folder.mkdir()
    app = things_app(folder)
    migrate.upgrade(database_url)

    first_path = migrate.new_revision(
        database_url, [app], app_name="generated", message="things", revision_id="gen_0001"
    )
    migrate.upgrade(database_url, [app])
    grown = things_app(folder, merge_column("extra", BigInteger, Sum()))
    migrate.new_revision(
        database_url, [grown], app_name="generated", message="extra", revision_id="gen_0002"
    )
    result = migrate.upgrade(database_url, [grown])

    assert first_path.parent == folder
    assert "branch_labels: str | Sequence[str] | None = ('generated',)" in first_path.read_text()
    assert [revision.id for revision in result.revisions] == ["gen_0002"]
    assert result.revisions[0].down_revisions == ("gen_0001",)
    assert migrate.schema_differences(database_url, [grown]) == []
    # Platform tables and other owners' tables stay out of the app's revisions.
    assert "ep_checkpoints" not in first_path.read_text()


def test_history_lists_the_platform_then_the_app() -> None:
    revisions = migrate.history([TEST_APP])

    assert [revision.id for revision in revisions] == [
        migrate.PLATFORM_BASE_REVISION,
        TEST_APP_REVISION,
        *PLATFORM_LATER,
    ]
    assert revisions[1].depends_on == (migrate.PLATFORM_BASE_REVISION,)


# Errors


def test_an_unknown_revision_is_a_migration_error(database_url: str) -> None:
    with pytest.raises(MigrationError, match="no_such_revision"):
        migrate.upgrade(database_url, [TEST_APP], "no_such_revision")


def test_a_database_ahead_of_the_loaded_apps_names_the_missing_revision(
    database_url: str,
) -> None:
    migrate.upgrade(database_url, [TEST_APP])

    with pytest.raises(MigrationError, match=f"{TEST_APP_REVISION}.*load the app"):
        migrate.upgrade(database_url)


def test_an_unreachable_database_is_a_migration_error() -> None:
    with pytest.raises(MigrationError, match="database error"):
        migrate.current("postgresql+psycopg://postgres@127.0.0.1:1/nothing?connect_timeout=5")


@pytest.mark.parametrize(
    ("branch_labels", "depends_on", "complaint"),
    [
        (None, migrate.PLATFORM_BASE_REVISION, "does not start a branch"),
        (("other_name",), migrate.PLATFORM_BASE_REVISION, "does not start a branch"),
        (("lonely",), None, "does not depend on the platform"),
    ],
)
def test_an_app_branch_must_be_labelled_and_depend_on_the_platform(
    tmp_path: Path,
    branch_labels: tuple[str, ...] | None,
    depends_on: str | None,
    complaint: str,
) -> None:
    folder = tmp_path / "lonely"
    write_revision(
        folder,
        "lonely_0001",
        branch_labels=branch_labels,
        depends_on=depends_on,
        upgrade_body="pass",
    )

    with pytest.raises(MigrationError, match=complaint):
        migrate.history([App("lonely", migrations=folder)])


def test_an_app_without_revisions_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MigrationError, match="holds no revisions"):
        migrate.history([App("empty", migrations=tmp_path)])


def test_two_owners_of_one_table_are_refused() -> None:
    metadata = MetaData()
    clash = projection_table(
        "ep_checkpoints", metadata, Column("projection", String(10), primary_key=True)
    )
    app = App("clash", projections=[Projection("clash.p", tables=[clash])])

    with pytest.raises(MigrationError, match="declared by both eventplatform and clash"):
        migrate.target_metadata([app])


# Finding apps


def test_a_reference_names_a_module_or_a_module_attribute() -> None:
    assert load_app("projection_test_app") is TEST_APP
    assert load_app("projection_test_app:app") is TEST_APP


@pytest.mark.parametrize(
    ("reference", "complaint"),
    [
        ("no_such_module_for_apps", "cannot import no_such_module_for_apps"),
        ("projection_test_app:nothing_here", "has no attribute 'nothing_here'"),
        ("projection_test_app:totals_projection", "Projection, not an App"),
        (":app", "expected 'package.module"),
    ],
)
def test_a_bad_reference_says_what_is_wrong(reference: str, complaint: str) -> None:
    with pytest.raises(AppError, match=complaint):
        load_app(reference)


def test_apps_come_from_the_environment_and_from_extra_references(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(APPS_ENV, " projection_test_app , ")

    apps = installed_apps(["projection_test_app:app"])

    assert [app for app in apps if app.name == "projection_tests"] == [TEST_APP]


def test_apps_come_from_entry_points(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    distribution = tmp_path / "pt_entry_app-1.0.dist-info"
    distribution.mkdir()
    (distribution / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pt-entry-app\nVersion: 1.0\n"
    )
    (distribution / "entry_points.txt").write_text(
        "[eventplatform.apps]\nprojection_tests = projection_test_app:app\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    assert TEST_APP in installed_apps()


def test_two_different_apps_with_one_name_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(projection_test_app, "twin", App("projection_tests"), raising=False)

    with pytest.raises(AppError, match="two different apps are named 'projection_tests'"):
        installed_apps(["projection_test_app", "projection_test_app:twin"])


def test_find_projection_lists_the_known_names_when_it_misses() -> None:
    assert find_projection("projection_tests.totals", [TEST_APP]) is (
        projection_test_app.totals_projection
    )
    with pytest.raises(AppError, match=r"'nope'.*known projections: projection_tests\.totals"):
        find_projection("nope", [TEST_APP])


# The command line


def test_db_upgrade_prints_the_applied_revisions_and_the_heads(database_url: str) -> None:
    run_db = CliRunner()
    arguments = ["upgrade", "--database", database_url, "--app", "projection_test_app"]

    first = run_db.invoke(db, arguments)
    again = run_db.invoke(db, arguments)
    current = run_db.invoke(db, ["current", "--database", database_url])
    check = run_db.invoke(db, ["check", "--database", database_url, "--app", "projection_test_app"])

    assert first.exit_code == 0, first.output
    assert f"applied {migrate.PLATFORM_BASE_REVISION} (eventplatform)" in first.output
    assert f"applied {TEST_APP_REVISION} (projection_tests)" in first.output
    assert first.output.rstrip().endswith(f"heads: {', '.join(ALL_HEADS)}")
    assert "nothing to do" in again.output
    assert current.stdout == "".join(f"{head}\n" for head in ALL_HEADS)
    assert check.exit_code == 0, check.output


def test_db_errors_are_one_line_and_exit_1(sqlite_url: str) -> None:
    run_db = CliRunner()
    bad_app = run_db.invoke(db, ["upgrade", "--database", sqlite_url, "--app", "no_such_mod_x"])
    bad_revision = run_db.invoke(db, ["upgrade", "--database", sqlite_url, "--revision", "zzz"])

    assert bad_app.exit_code == 1
    assert "Error: app reference 'no_such_mod_x'" in bad_app.output
    assert bad_revision.exit_code == 1
    assert "Error:" in bad_revision.output and "zzz" in bad_revision.output


def test_db_check_fails_before_the_upgrade(sqlite_url: str) -> None:
    check = CliRunner().invoke(db, ["check", "--database", sqlite_url])

    assert check.exit_code == 1
    assert "add_table ep_checkpoints" in check.output


def test_db_upgrade_as_a_command(database_url: str, tmp_path: Path) -> None:
    from eventplatform.cli import main

    assert "db" in main.commands, "register the group: main.add_command(db) in platform/cli.py"
    script = Path(sys.executable).with_name("platform")
    environment = {**os.environ, "PYTHONPATH": str(SUPPORT)}
    environment.pop(APPS_ENV, None)
    command = [str(script), "db", "upgrade", "--database", database_url]

    completed = subprocess.run(
        [*command, "--app", "projection_test_app"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )

    assert completed.returncode == 0, completed.stderr
    assert f"heads: {', '.join(ALL_HEADS)}" in completed.stdout
    assert table_names(database_url) >= TEST_APP_TABLES | PLATFORM_TABLES


# The platform's own revisions


OLD_INDEX_COLUMNS = ("projection", "table_name", "row_key", "topic", "partition", "offset")


def test_the_index_revision_converts_entries_to_hashes_and_ranks(database_url: str) -> None:
    migrate.upgrade(database_url, revision=migrate.PLATFORM_BASE_REVISION)
    engine = create_store_engine(database_url)
    old = sa.table(
        "ep_event_index",
        *(sa.column(name) for name in ("projection", "table_name", "row_key", "topic")),
        *(sa.column(name) for name in ("partition", "offset", "event_id")),
    )
    registry = sa.table(
        "ep_projections",
        *(sa.column(name) for name in ("name", "group_id", "status", "updated_at")),
        sa.column("topics", sa.JSON()),
        sa.column("tables", sa.JSON()),
    )
    entries = [
        ("shop.totals", "totals", '["a"]', "orders", 2, 17),
        ("shop.totals", "totals", '["b",1]', "refunds", 0, 3),
        ("unregistered", "rows", '["x"]', "zeta", 1, 9),
    ]
    try:
        with engine.begin() as connection:
            connection.execute(
                sa.insert(registry),
                [
                    {
                        "name": "shop.totals",
                        "group_id": "g",
                        "status": "stopped",
                        "updated_at": datetime.now(UTC),
                        "topics": ["orders", "refunds"],
                        "tables": ["totals"],
                    }
                ],
            )
            connection.execute(
                sa.insert(old),
                [
                    dict(zip(OLD_INDEX_COLUMNS, entry, strict=True))
                    | {"event_id": str(uuid.uuid4())}
                    for entry in entries
                ],
            )
        migrate.upgrade(database_url)
        with engine.connect() as connection:
            converted = set(connection.execute(sa.select(schema.event_index)).all())
    finally:
        engine.dispose()

    def rank(topic_index: int, partition: int, offset: int) -> int:
        return topic_index << 56 | partition << 40 | offset

    assert converted == {
        (scope_of("shop.totals", "totals"), row_hash(("a",)), -1, pack_ranks([rank(0, 2, 17)])),
        (scope_of("shop.totals", "totals"), row_hash(("b", 1)), -1, pack_ranks([rank(1, 0, 3)])),
        (scope_of("unregistered", "rows"), row_hash(("x",)), -1, pack_ranks([rank(0, 1, 9)])),
    }
    assert migrate.schema_differences(database_url) == []


def test_the_platform_head_is_the_last_platform_revision() -> None:
    platform = [r for r in migrate.history() if migrate.PLATFORM_BRANCH in r.branches]
    assert platform[-1].id == migrate.PLATFORM_HEAD_REVISION
