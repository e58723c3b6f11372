"""Fresh databases for tests and benchmarks: SQLite files, or PostgreSQL on the local server
(trust auth).

PostgreSQL is reached through psycopg, a dependency of the platform; it is imported when a
PostgreSQL database is asked for, so the rest of :mod:`eventplatform.testing` does not pay
for it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POSTGRES_ADMIN_URL = os.environ.get(
    "EVENTPLATFORM_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)


def _server_url(database: str) -> str:
    base, _, _ = POSTGRES_ADMIN_URL.rpartition("/")
    return f"{base}/{database}"


@contextmanager
def fresh_postgres_database(name: str) -> Iterator[str]:
    """Create database ``name``, yield its SQLAlchemy URL, then drop it."""
    import psycopg

    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=10) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _server_url(name).replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def fresh_database(kind: str, directory: Path) -> Iterator[str]:
    """A fresh, empty database of ``kind`` ("sqlite": a new file in ``directory``)."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / f'projections-{uuid.uuid4().hex[:8]}.db'}"
        return
    with fresh_postgres_database(f"ep_{uuid.uuid4().hex[:12]}") as url:
        yield url
