"""Analysts' queries: SQL over the projection database, read-only, and apps' named queries.

:func:`run_query` opens its own connection that cannot write: on SQLite the
file is opened read-only (``mode=ro``) with ``PRAGMA query_only``, and
SQLite's authorizer lets a statement only read (no ``ATTACH``, so no
``VACUUM INTO`` either, no ``load_extension``, no pragma that sets
anything); on PostgreSQL the session's transactions default to read-only.
Either way the statement runs inside a transaction that is rolled back,
never committed, so even a statement that got past those guards leaves
nothing behind.

A named query is SQL an app ships (:class:`~eventplatform.projections.apps.NamedQuery`),
run by its full name, ``<app>.<query>``. Its ``:since`` parameter is bound to
a moment: now minus a duration such as ``15m``, ``1h``, ``7d``.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, Date, DateTime, Engine, bindparam, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.types import TypeEngine

from eventplatform.projections.apps import App, NamedQuery, bundled_hint
from eventplatform.projections.errors import ProjectionError

SINCE_PARAMETER = "since"
SINCE_DAY_PARAMETER = "since_day"
DURATION_PATTERN = re.compile(r"^\s*(\d+)\s*(s|m|h|d|w)\s*$")
DURATION_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
READ_ONLY_MARKERS = (
    "readonly",
    "read-only",
    "query_only",
    "attempt to write",
    "not authorized",
    "authorization denied",
)
SQLITE_WRITE_ACTIONS = frozenset(
    {
        sqlite3.SQLITE_INSERT,
        sqlite3.SQLITE_UPDATE,
        sqlite3.SQLITE_DELETE,
        sqlite3.SQLITE_ALTER_TABLE,
        sqlite3.SQLITE_REINDEX,
        sqlite3.SQLITE_ANALYZE,
        sqlite3.SQLITE_CREATE_INDEX,
        sqlite3.SQLITE_CREATE_TABLE,
        sqlite3.SQLITE_CREATE_TEMP_INDEX,
        sqlite3.SQLITE_CREATE_TEMP_TABLE,
        sqlite3.SQLITE_CREATE_TEMP_TRIGGER,
        sqlite3.SQLITE_CREATE_TEMP_VIEW,
        sqlite3.SQLITE_CREATE_TRIGGER,
        sqlite3.SQLITE_CREATE_VIEW,
        sqlite3.SQLITE_CREATE_VTABLE,
        sqlite3.SQLITE_DROP_INDEX,
        sqlite3.SQLITE_DROP_TABLE,
        sqlite3.SQLITE_DROP_TEMP_INDEX,
        sqlite3.SQLITE_DROP_TEMP_TABLE,
        sqlite3.SQLITE_DROP_TEMP_TRIGGER,
        sqlite3.SQLITE_DROP_TEMP_VIEW,
        sqlite3.SQLITE_DROP_TRIGGER,
        sqlite3.SQLITE_DROP_VIEW,
        sqlite3.SQLITE_DROP_VTABLE,
        sqlite3.SQLITE_ATTACH,
        sqlite3.SQLITE_DETACH,
        sqlite3.SQLITE_SAVEPOINT,
    }
)
"""What SQLite's authorizer refuses a query outright: every write, and attaching a file
(which ``VACUUM INTO`` does first). The schema's own table is read through an update
check by some table-valued pragmas: that one is let through (writing it stays refused
by the read-only file and ``writable_schema`` by the pragma check)."""
SQLITE_REFUSED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer"})
"""Functions that reach outside the database (an extension's code, a tokenizer pointer)."""
SQLITE_INFO_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo"}
    | {"foreign_key_list", "database_list", "collation_list", "function_list"}
    | {"pragma_list", "compile_options"}
)
"""Pragmas that describe the schema or the build, whatever their argument."""
SQLITE_READ_PRAGMAS = frozenset(
    {"user_version", "schema_version", "application_id", "encoding", "page_count"}
    | {"page_size", "freelist_count", "journal_mode", "read_uncommitted", "query_only"}
    | {"foreign_keys", "data_version", "busy_timeout"}
)
"""Pragmas a query may read (with no argument: given one, each of these sets something)."""
SQLITE_TRANSACTION_STATEMENTS = frozenset({"BEGIN", "COMMIT", "ROLLBACK"})
POSTGRES_READ_ONLY_OPTIONS = "-c default_transaction_read_only=on"
READER_ROLE = "eventplatform_reader"
"""The read-only role the migrations create on PostgreSQL (revision 0003)."""


class QueryError(ProjectionError):
    """A query could not run: bad SQL, a write refused, no database, an unknown name."""


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]


def parse_duration(value: str) -> timedelta:
    """``30s``, ``15m``, ``1h``, ``7d`` or ``2w`` as a timedelta."""
    match = DURATION_PATTERN.match(value)
    if match is None:
        raise QueryError(f"duration {value!r}: give a number and a unit, one of s, m, h, d, w")
    return timedelta(**{DURATION_UNITS[match[2]]: int(match[1])})


def named_queries(apps: Sequence[App]) -> dict[str, NamedQuery]:
    """Every app's named queries by full name, ``<app>.<query>``."""
    return {f"{app.name}.{query.name}": query for app in apps for query in app.queries}


def find_named_query(apps: Sequence[App], name: str) -> NamedQuery:
    queries = named_queries(apps)
    if name not in queries:
        known = ", ".join(sorted(queries)) or "none"
        raise QueryError(
            f"no named query {name!r}; the installed apps have: {known}{bundled_hint(name)}"
        )
    return queries[name]


def named_parameters(
    query: NamedQuery, *, since: str | None, given: Mapping[str, str], now: datetime | None = None
) -> dict[str, Any]:
    """The bind parameters of ``query``: its defaults, then ``given``, and ``since``."""
    parameters: dict[str, Any] = {**query.parameters, **given}
    unknown = set(given) - set(query.parameters)
    if unknown:
        raise QueryError(
            f"{query.name} takes no parameter {sorted(unknown)[0]!r}"
            + (f"; it takes {', '.join(sorted(query.parameters))}" if query.parameters else "")
        )
    for name, value in given.items():
        default = query.parameters[name]
        if isinstance(default, int | float) and not isinstance(default, bool):
            try:
                parameters[name] = type(default)(value)
            except ValueError:
                raise QueryError(f"{query.name}: {name} must be a number, not {value!r}") from None
    window = since or query.since_default
    if since is not None and query.since_default is None:
        raise QueryError(f"{query.name} does not take --since")
    if window is not None:
        start = (now or datetime.now(UTC)) - parse_duration(window)
        parameters[SINCE_PARAMETER] = start
        parameters[SINCE_DAY_PARAMETER] = start.astimezone(UTC).date()
    return parameters


def run_named_query(
    url: str, query: NamedQuery, parameters: Mapping[str, Any], *, allow_superuser: bool = False
) -> QueryResult:
    """Run named ``query`` on ``url``, in the SQL for that database."""
    sql = query.sql_for(make_url(url).get_backend_name())
    return run_query(url, sql, parameters, allow_superuser=allow_superuser)


def run_query(
    url: str,
    sql: str,
    parameters: Mapping[str, Any] | None = None,
    *,
    allow_superuser: bool = False,
) -> QueryResult:
    """Run ``sql`` on a read-only connection to ``url``; nothing it does is committed.

    On PostgreSQL a superuser's connection is refused unless ``allow_superuser``:
    a superuser can leave a read-only transaction, and read and write the
    server's files (``COPY ... TO PROGRAM``, ``pg_read_file``).
    """
    engine = read_only_engine(url)
    statement = text(sql)
    used = {name: value for name, value in (parameters or {}).items() if _binds(sql, name)}
    typed: dict[str, TypeEngine[Any]] = {
        SINCE_PARAMETER: DateTime(timezone=True),
        SINCE_DAY_PARAMETER: Date(),
    }
    for name, type_ in typed.items():
        if name in used:
            statement = statement.bindparams(bindparam(name, type_=type_))
    try:
        with engine.connect() as connection, connection.begin() as transaction:
            try:
                if not allow_superuser:
                    _refuse_superuser(connection)
                result = connection.execute(statement, used)
                columns = list(result.keys()) if result.returns_rows else []
                rows = [tuple(row) for row in result] if result.returns_rows else []
            finally:
                transaction.rollback()
    except DBAPIError as exc:
        raise _query_error(exc) from exc
    except SQLAlchemyError as exc:
        raise QueryError(f"the query failed: {exc}") from exc
    finally:
        engine.dispose()
    return QueryResult(columns, rows)


def _refuse_superuser(connection: Connection) -> None:
    """Raise if ``connection`` is a PostgreSQL superuser's."""
    if connection.dialect.name != "postgresql":
        return
    role, superuser = connection.exec_driver_sql(
        "SELECT current_user, current_setting('is_superuser')"
    ).one()
    if superuser == "on":
        raise QueryError(
            f"refused: {role} is a PostgreSQL superuser, who can undo the read-only guard and "
            f"reach the server's files; connect as a login role granted {READER_ROLE} "
            "(docs/analysts.md), or pass --allow-superuser"
        )


def _binds(sql: str, name: str) -> bool:
    """Whether ``sql`` has the bind parameter ``:name`` (not ``::casts`` or longer names)."""
    return re.search(rf"(?<![:\w]):{re.escape(name)}(?!\w)", sql) is not None


def read_only_engine(url: str) -> Engine:
    """An engine whose connections cannot write to the projection database."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_read_only(parsed.database)
    if parsed.drivername in {"postgresql", "postgres"}:
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "postgresql":
        return create_engine(parsed, connect_args={"options": POSTGRES_READ_ONLY_OPTIONS})
    raise QueryError(f"{parsed.get_backend_name()}: only SQLite and PostgreSQL are supported")


def _sqlite_read_only(database: str | None) -> Engine:
    if not database or database == ":memory:":
        raise QueryError("give the SQLite database's file, not an in-memory database")
    path = Path(database).resolve()
    if not path.is_file():
        raise QueryError(
            f"no database at {path}: run `platform db upgrade` (or `platform demo`) first"
        )
    uri = f"file:{quote(str(path))}?mode=ro"
    engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True))

    @event.listens_for(engine, "connect")
    def _query_only(connection: Any, _record: Any) -> None:
        connection.execute("PRAGMA query_only = ON")
        connection.set_authorizer(_sqlite_authorizer)

    return engine


def _sqlite_authorizer(
    action: int, first: str | None, second: str | None, _database: str | None, _view: str | None
) -> int:
    """SQLite's authorizer for a query: no write, no ``ATTACH`` (nor ``VACUUM INTO``), no
    function that reaches outside the database, no pragma that sets anything, and of
    transactions only ``BEGIN``, ``COMMIT`` and ``ROLLBACK``."""
    allowed = True
    if action == sqlite3.SQLITE_UPDATE:
        allowed = first == "sqlite_master"
    elif action in SQLITE_WRITE_ACTIONS:
        allowed = False
    elif action == sqlite3.SQLITE_FUNCTION:
        allowed = (second or "").lower() not in SQLITE_REFUSED_FUNCTIONS
    elif action == sqlite3.SQLITE_PRAGMA:
        name = (first or "").lower()
        allowed = name in SQLITE_INFO_PRAGMAS or (name in SQLITE_READ_PRAGMAS and second is None)
    elif action == sqlite3.SQLITE_TRANSACTION:
        allowed = (first or "").upper() in SQLITE_TRANSACTION_STATEMENTS
    return sqlite3.SQLITE_OK if allowed else sqlite3.SQLITE_DENY


def _query_error(exc: DBAPIError) -> QueryError:
    message = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
    if any(marker in message.lower() for marker in READ_ONLY_MARKERS):
        return QueryError(f"refused: platform query connects read-only and only reads ({message})")
    return QueryError(f"the query failed: {message}")
