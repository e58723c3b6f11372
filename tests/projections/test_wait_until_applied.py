"""The read-your-writes wait against a database given by URL, without a broker."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from eventplatform.events import Position
from eventplatform.projections import migrate, schema
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.errors import ApplyTimeoutError
from eventplatform.projections.operations import wait_until_applied


def database_with_checkpoint(path: Path, next_offset: int) -> None:
    engine = create_store_engine(f"sqlite:///{path}")
    try:
        migrate.upgrade(engine)
        with engine.begin() as connection:
            connection.execute(
                schema.checkpoints.insert().values(
                    projection="p",
                    topic="t",
                    partition=0,
                    next_offset=next_offset,
                    updated_at=datetime.now(UTC),
                )
            )
    finally:
        engine.dispose()


def test_a_sqlite_database_replaced_at_its_url_is_the_one_waited_on(tmp_path: Path) -> None:
    path = tmp_path / "projections.db"
    url = f"sqlite:///{path}"
    database_with_checkpoint(path, next_offset=5)
    wait_until_applied(url, "p", [Position("t", 0, 3)], timeout_s=5)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    database_with_checkpoint(path, next_offset=2)  # the new database has not got there

    with pytest.raises(ApplyTimeoutError):
        wait_until_applied(url, "p", [Position("t", 0, 3)], timeout_s=0.2)
