"""Engines for the projection stores: SQLite (embedded default) and PostgreSQL.

SQLite runs in WAL mode with ``synchronous=NORMAL``, a 64 MiB page cache, a
checkpoint every 10,000 WAL pages (about 40 MB: batches write many pages,
and a page checkpointed once per many commits is copied back once) and a
busy timeout, and
every transaction starts with ``BEGIN IMMEDIATE``: a runner's transaction
reads and then writes, and a deferred transaction that tries to upgrade its
read lock while another connection writes fails at once with "database is
locked" instead of waiting.

PostgreSQL goes through psycopg 3 (``postgresql+psycopg://``); a plain
``postgresql://`` URL is taken to mean that driver.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

DATABASE_URL_ENV = "EVENTPLATFORM_DATABASE_URL"
DATABASE_URL_DEFAULT = "sqlite:///.eventplatform/projections.db"
READ_ONLY_OPTION = "ep_read_only"
"""A connection execution option: its transactions only read (see :func:`reading`)."""
POSTGRES_CONNECT_TIMEOUT_S = 10
"""How long opening a PostgreSQL connection may take (libpq's ``connect_timeout``, whole
seconds) unless the URL sets its own: an unreachable server fails a command in that
time, rather than in the operating system's TCP timeout of minutes."""
SQLITE_BUSY_TIMEOUT_S = 30.0
SQLITE_CACHE_KIB = 65_536
SQLITE_WAL_CHECKPOINT_PAGES = 10_000
SQLITE_WAL_RETRY_S = 0.01


def database_url(explicit: str | None = None) -> str:
    """The URL to use: the explicit one, else ``$EVENTPLATFORM_DATABASE_URL``, else SQLite."""
    return explicit or os.environ.get(DATABASE_URL_ENV) or DATABASE_URL_DEFAULT


def absolute_database_url(url: str) -> str:
    """``url`` with a relative SQLite path made absolute (against this working directory).

    For a URL handed to other processes (Spark's executors), which need not
    share this one's working directory.
    """
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return url
    if database.startswith("file:") or Path(database).is_absolute():
        return url
    return parsed.set(database=str(Path(database).resolve())).render_as_string(hide_password=False)


def reading(engine: Engine) -> Connection:
    """A connection for reads only.

    On SQLite its transactions begin deferred: in WAL mode a reader takes no
    lock, so it neither waits for writers nor makes them wait. (A store
    engine's other transactions begin immediate, taking the write lock.)
    """
    return engine.connect().execution_options(**{READ_ONLY_OPTION: True})


def create_store_engine(url: str, **options: Any) -> Engine:
    """An engine configured for projection work on SQLite or PostgreSQL."""
    parsed = make_url(url)
    if parsed.drivername in {"postgresql", "postgres"}:
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, **options)
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        connect_args = {"connect_timeout": POSTGRES_CONNECT_TIMEOUT_S}
        options["connect_args"] = {**connect_args, **options.get("connect_args", {})}
    return create_engine(parsed, pool_pre_ping=True, **options)


def _sqlite_engine(url: Any, **options: Any) -> Engine:
    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "isolation_level": None},
        **options,
    )

    @event.listens_for(engine, "connect")
    def _configure(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        _enable_wal(cursor)
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
        cursor.execute(f"PRAGMA wal_autocheckpoint={SQLITE_WAL_CHECKPOINT_PAGES}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        read_only = connection.get_execution_options().get(READ_ONLY_OPTION)
        statement = "BEGIN" if read_only else "BEGIN IMMEDIATE"
        try:  # on sqlite3's own connection: a runner begins a transaction per batch
            connection.connection.driver_connection.execute(statement)
        except sqlite3.Error as exc:
            raise DBAPIError.instance(statement, None, exc, sqlite3.Error) from exc

    return engine


def _enable_wal(cursor: Any) -> None:
    """Switch a new database to WAL mode, waiting out connections that open it at once.

    The switch needs the file to itself, and SQLite reports "database is
    locked" at once, without its busy handler, while another connection holds
    it; so retry up to the busy timeout. A database in WAL mode stays so.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                return
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(SQLITE_WAL_RETRY_S)


def is_postgresql(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"
