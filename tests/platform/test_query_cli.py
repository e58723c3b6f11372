"""``platform query``: SQL and named queries over the projections, read-only, in every format.

The activity app's tables are created by its migrations and filled by hand
with a few rows, so every expected answer is computed here by hand.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result
from sqlalchemy import func, select

from eventplatform.apps.activity_tracking import app
from eventplatform.apps.activity_tracking.projections import page_visitors, referrers
from eventplatform.cli import main
from eventplatform.projections import migrate
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.query import QueryError, named_parameters, parse_duration
from eventplatform.testing import fresh_database


def now() -> datetime:
    """This minute: the rows are stamped when each test's database is filled, since a
    time taken at import lies far behind once a long suite reaches these tests."""
    return datetime.now(UTC).replace(second=0, microsecond=0)


def minute(ago: int) -> datetime:
    return now() - timedelta(minutes=ago)


VISITS = [  # (minutes ago, path, visitor, views)
    (5, "/", "ann", 2),
    (5, "/pricing", "ann", 1),
    (20, "/", "bob", 1),
    (40, "/docs", "cid", 4),
    (90, "/", "dan", 7),  # outside a one-hour window
]


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(str(request.param), tmp_path) as url:
        migrate.upgrade(url, [app])
        engine = create_store_engine(url)
        today = now().date()
        with engine.begin() as connection:
            connection.execute(
                page_visitors.insert(),
                [
                    {
                        "granularity": "minute",
                        "bucket": minute(ago),
                        "path": path,
                        "visitor": visitor,
                        "views": views,
                    }
                    for ago, path, visitor, views in VISITS
                ],
            )
            connection.execute(
                referrers.insert(),
                [
                    {"day": today, "referrer_host": "news.example", "sessions": 3},
                    {"day": today, "referrer_host": "(direct)", "sessions": 5},
                    {"day": today - timedelta(days=30), "referrer_host": "old", "sessions": 9},
                ],
            )
        engine.dispose()
        yield url


def platform_query(database: str, *arguments: str) -> Result:
    # The fixtures connect as the server's superuser; the refusal has a test of its own.
    command = ["query", *arguments, "--database", database, "--allow-superuser"]
    return CliRunner().invoke(main, command)


def page_rows(database: str) -> int:
    engine = create_store_engine(database)
    try:
        with engine.connect() as connection:
            return int(connection.execute(select(func.count()).select_from(page_visitors)).scalar())
    finally:
        engine.dispose()


SQL = (
    "SELECT path, SUM(views) AS views FROM activity_page_visitors "
    "GROUP BY path ORDER BY views DESC, path"
)
EXPECTED = [("/", 10), ("/docs", 4), ("/pricing", 1)]


def test_sql_prints_an_aligned_table(database: str) -> None:
    result = platform_query(database, SQL)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split(" | ") == ["path    ", "views"]
    assert set(lines[1]) <= {"-", "+"}
    assert [line.split(" | ") for line in lines[2:5]] == [
        ["/       ", "   10"],
        ["/docs   ", "    4"],
        ["/pricing", "    1"],
    ]
    assert lines[5] == "(3 rows)"


def test_csv_json_and_parquet_hold_the_same_rows(database: str, tmp_path: Path) -> None:
    as_csv = platform_query(database, SQL, "--format", "csv")
    as_json = platform_query(database, SQL, "--format", "json")
    parquet = tmp_path / "out.parquet"
    written = platform_query(database, SQL, "--format", "parquet", "--output", str(parquet))

    assert as_csv.exit_code == as_json.exit_code == written.exit_code == 0, as_csv.output
    assert list(csv.reader(io.StringIO(as_csv.output))) == [
        ["path", "views"],
        *([path, str(views)] for path, views in EXPECTED),
    ]
    assert json.loads(as_json.output) == [{"path": p, "views": v} for p, v in EXPECTED]
    table = pq.read_table(parquet)
    assert table.column_names == ["path", "views"]
    assert [(row["path"], int(row["views"])) for row in table.to_pylist()] == EXPECTED


def test_numbers_keep_every_digit_in_the_table_and_in_json(database: str) -> None:
    """Regression: the table rounded floats to 6 significant digits (10251412.345 showed as
    1.02514e+07), and JSON turned PostgreSQL's numeric into floats."""
    numeric = "CAST('12345678901234.123456789' AS NUMERIC(30, 9))"
    if database.startswith("sqlite"):
        numeric = "'12345678901234.123456789'"  # SQLite has no exact type; text shows the check
    sql = f"SELECT 10251412.345 AS amount, {numeric} AS exact"
    table = platform_query(database, sql)
    assert table.exit_code == 0, table.output
    assert "10251412.345" in table.output.splitlines()[2]
    as_json = platform_query(database, sql, "--format", "json")
    assert as_json.exit_code == 0, as_json.output
    if database.startswith("postgresql"):
        assert '"exact": 12345678901234.123456789' in as_json.output
        assert '"amount": 10251412.345' in as_json.output
    else:
        assert json.loads(as_json.output) == [
            {"amount": 10251412.345, "exact": "12345678901234.123456789"}
        ]


def test_an_output_file_gets_the_table(database: str, tmp_path: Path) -> None:
    output = tmp_path / "top.csv"
    result = platform_query(database, SQL, "--format", "csv", "--output", str(output))
    assert result.exit_code == 0 and result.output == ""
    assert output.read_text().splitlines()[1] == "/,10"


@pytest.mark.parametrize(
    "statement",
    [
        "DELETE FROM activity_page_visitors",
        "INSERT INTO activity_page_visitors (granularity, bucket, path, visitor, views) "
        "VALUES ('minute', '2026-01-01 00:00:00', '/x', 'eve', 1)",
        "DROP TABLE activity_referrers",
        "CREATE TABLE intruder (id INTEGER)",
    ],
)
def test_writes_are_refused_and_change_nothing(database: str, statement: str) -> None:
    before = page_rows(database)
    result = platform_query(database, statement)
    assert result.exit_code != 0
    assert "refused: platform query connects read-only" in result.output
    assert page_rows(database) == before
    assert platform_query(database, "SELECT COUNT(*) AS n FROM activity_referrers").exit_code == 0


@pytest.mark.parametrize(
    ("statement", "made"),
    [
        ("ATTACH DATABASE '{dir}/attached.db' AS other", "attached.db"),
        ("VACUUM INTO '{dir}/copy.db'", "copy.db"),
        ("SELECT load_extension('{dir}/extension')", None),
        ("PRAGMA writable_schema = 1", None),
        ("PRAGMA user_version = 7", None),
        ("SAVEPOINT inside", None),
    ],
)
def test_sqlite_queries_cannot_reach_outside_the_database(
    tmp_path: Path, statement: str, made: str | None
) -> None:
    with fresh_database("sqlite", tmp_path) as url:
        migrate.upgrade(url, [app])
        outside = tmp_path / "outside"
        outside.mkdir()
        result = platform_query(url, statement.format(dir=outside))
        assert result.exit_code != 0, result.output
        assert "refused: platform query connects read-only and only reads" in result.output
        assert "not authorized" in result.output or "authorization denied" in result.output
        assert list(outside.iterdir()) == []
        assert made is None or not (outside / made).exists()


def test_sqlite_queries_still_read_describe_and_recurse(tmp_path: Path) -> None:
    reads = [
        "SELECT name FROM pragma_table_info('activity_referrers') ORDER BY cid LIMIT 1",
        "PRAGMA table_info(activity_referrers)",
        "PRAGMA user_version",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3) "
        "SELECT COUNT(*), sqlite_version() IS NOT NULL FROM n",
    ]
    with fresh_database("sqlite", tmp_path) as url:
        migrate.upgrade(url, [app])
        for sql in reads:
            result = platform_query(url, sql, "--format", "csv")
            assert result.exit_code == 0, (sql, result.output)
            assert len(result.output.splitlines()) >= 2, (sql, result.output)


def test_a_postgresql_superuser_is_refused_unless_allowed(tmp_path: Path) -> None:
    marker = tmp_path / "ran-a-program"
    counting = "SELECT COUNT(*) AS n FROM activity_referrers"
    with fresh_database("postgresql", tmp_path) as url:
        migrate.upgrade(url, [app])
        for sql in (counting, f"COPY (SELECT 1) TO PROGRAM 'touch {marker}'"):
            refused = CliRunner().invoke(main, ["query", sql, "--database", url])
            assert refused.exit_code != 0
            assert "is a PostgreSQL superuser" in refused.output
            assert "eventplatform_reader" in refused.output
            assert "--allow-superuser" in refused.output
        assert not marker.exists()
        allowed = CliRunner().invoke(
            main, ["query", counting, "--database", url, "--allow-superuser"]
        )
        assert allowed.exit_code == 0, allowed.output


def test_a_write_that_switches_read_only_off_is_still_not_committed(tmp_path: Path) -> None:
    with fresh_database("postgresql", tmp_path) as url:
        migrate.upgrade(url, [app])
        engine = create_store_engine(url)
        with engine.begin() as connection:
            connection.execute(referrers.insert().values(day=date(2026, 1, 1), referrer_host="x"))
        engine.dispose()
        attack = "SET TRANSACTION READ WRITE; DELETE FROM activity_referrers"
        result = platform_query(url, attack)
        # Refused outright or run and rolled back: the row is still there.
        counting = "SELECT COUNT(*) AS n FROM activity_referrers"
        count = platform_query(url, counting, "--format", "csv")
        assert count.output.splitlines()[1] == "1", result.output


def test_named_query_with_a_window(database: str) -> None:
    result = platform_query(database, "activity.top-pages", "--since", "1h", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [
        {"path": "/docs", "views": 4, "visitors": 1},
        {"path": "/", "views": 3, "visitors": 2},
        {"path": "/pricing", "views": 1, "visitors": 1},
    ]
    wider = platform_query(database, "activity.top-pages", "--since", "2h", "--param", "limit=1")
    assert wider.exit_code == 0, wider.output
    assert wider.output.splitlines()[2].split(" | ") == ["/   ", "   10", "       3"]


def test_named_query_on_days(database: str) -> None:
    result = platform_query(database, "activity.top-referrers", "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "referrer_host,sessions",
        "(direct),5",
        "news.example,3",
    ]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["activity.no-such-query"], "no named query 'activity.no-such-query'"),
        (["activity.top-pages", "--since", "an hour"], "give a number and a unit"),
        (["activity.top-pages", "--param", "limit=ten"], "limit must be a number"),
        (["activity.top-pages", "--param", "color=red"], "takes no parameter 'color'"),
        (["activity.signup-funnel", "--param", "x"], "is not NAME=VALUE"),
        (["SELECT * FROM no_such_table"], "the query failed"),
        (["SELECT 1 AS one", "--since", "1h"], "--since is for named queries"),
        (["SELECT 1 AS one", "--format", "parquet"], "--format parquet needs --output"),
    ],
)
def test_bad_input_fails_with_one_clear_line(
    database: str, arguments: list[str], message: str
) -> None:
    result = platform_query(database, *arguments)
    assert result.exit_code != 0
    assert message in result.output


def test_a_missing_sqlite_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.db"
    result = platform_query(f"sqlite:///{missing}", "SELECT 1 AS one")
    assert result.exit_code != 0
    assert f"no database at {missing}" in result.output
    assert not missing.exists()


def test_list_shows_every_named_query_with_its_description(database: str) -> None:
    # The database has the activity app's tables: the bundled app comes with them, unasked.
    result = CliRunner().invoke(main, ["query", "--list", "--database", database])
    assert result.exit_code == 0, result.output
    for named in app.queries:
        assert f"activity.{named.name}" in result.output
        assert named.description in result.output


def test_a_bundled_apps_queries_need_its_tables_or_its_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'platform-only.db'}"
    migrate.upgrade(url)

    listed = CliRunner().invoke(main, ["query", "--list", "--database", url])
    named = CliRunner().invoke(main, ["query", "--list", "--database", url, "--app", "activity"])
    missing = CliRunner().invoke(main, ["query", "activity.top-pages", "--database", url])

    assert listed.exit_code == 0 and "activity." not in listed.output, listed.output
    assert "activity.top-pages" in named.output
    assert missing.exit_code == 1
    assert "activity is a bundled app: name it with --app activity" in missing.output


def test_durations_and_the_day_of_the_window() -> None:
    assert parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("2w") == timedelta(weeks=2)
    with pytest.raises(QueryError):
        parse_duration("1y")
    top = next(q for q in app.queries if q.name == "top-referrers")
    now = datetime(2026, 11, 24, 1, 0, tzinfo=UTC)
    bound = named_parameters(top, since="2h", given={}, now=now)
    assert bound == {
        "limit": 10,
        "since": datetime(2026, 11, 23, 23, 0, tzinfo=UTC),
        "since_day": date(2026, 11, 23),
    }


def test_relative_sqlite_urls_become_absolute_for_other_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventplatform.projections.database import absolute_database_url

    monkeypatch.chdir(tmp_path)
    assert absolute_database_url("sqlite:///.eventplatform/p.db") == (
        f"sqlite:///{tmp_path / '.eventplatform' / 'p.db'}"
    )
    for unchanged in ("sqlite:////abs/p.db", "sqlite://", "postgresql://u@h/db"):
        assert absolute_database_url(unchanged) == unchanged
