"""Every projection-store test runs on SQLite and on PostgreSQL.

The ``database_url`` fixture gives a fresh, empty database per test: a SQLite
file under ``tmp_path``, or a new PostgreSQL database on the local server
(dropped afterwards). Set ``EVENTPLATFORM_TEST_POSTGRES`` to point at
another server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eventplatform.testing import fresh_database


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'projections.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with fresh_database("postgresql", Path()) as url:
        yield url
