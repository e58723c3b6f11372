"""The read-your-writes wait against a database given by URL, without a broker."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import update

from eventplatform.events import Position
from eventplatform.projections import migrate, schema
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.errors import ApplyTimeoutError
from eventplatform.projections.operations import wait_until_applied
from eventplatform.projections.runner import COMMITS, CommitSignal


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


# The in-process commit signal ----------------------------------------------

SIGNAL_TIMEOUT_S = 30.0
"""Far longer than any poll: a wait that ends before it was woken by the signal."""


def test_a_commit_signal_wakes_a_waiter_at_once() -> None:
    signal = CommitSignal()
    seen = signal.count
    woken = threading.Event()

    def wait() -> None:
        signal.wait_after(seen, SIGNAL_TIMEOUT_S)
        woken.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    signal.committed()
    assert woken.wait(SIGNAL_TIMEOUT_S / 3)
    waiter.join()


def test_a_commit_before_the_wait_is_not_missed() -> None:
    signal = CommitSignal()
    seen = signal.count
    signal.committed()  # between the waiter's read of the checkpoints and its wait
    started = time.monotonic()
    signal.wait_after(seen, SIGNAL_TIMEOUT_S)
    assert time.monotonic() - started < SIGNAL_TIMEOUT_S / 3


def test_a_wait_on_a_database_ends_when_a_commit_in_this_process_is_signalled(
    tmp_path: Path,
) -> None:
    path = tmp_path / "projections.db"
    url = f"sqlite:///{path}"
    database_with_checkpoint(path, next_offset=2)
    done = threading.Event()

    def wait() -> None:
        wait_until_applied(url, "p", [Position("t", 0, 3)], timeout_s=SIGNAL_TIMEOUT_S)
        done.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    engine = create_store_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(
                update(schema.checkpoints)
                .where(schema.checkpoints.c.topic == "t")
                .values(next_offset=4)
            )
    finally:
        engine.dispose()
    COMMITS.committed()
    assert done.wait(SIGNAL_TIMEOUT_S / 3)
    waiter.join()
