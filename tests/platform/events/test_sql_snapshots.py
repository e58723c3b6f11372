"""Snapshots in SQLite and PostgreSQL: kept and read back whole, replaced only by later
versions (from several processes at once), ignored when they no longer read, and shared
by the repositories of two processes against the shared broker."""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from bank.events import TOPIC, Deposited, Opened, Withdrawn
from bank.model import BANK, Account, Deposit, Open, account_of
from sqlalchemy import create_engine, text

from eventplatform.events import EntityStore, Repository
from eventplatform.events.snapshots import CommandMark, Snapshot
from eventplatform.events.sql_snapshots import SqlSnapshots
from eventplatform.testing import BrokerProcess, fresh_database

PUTS_EACH = 40


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def store(database_url: str) -> Iterator[SqlSnapshots[Account]]:
    opened = SqlSnapshots(database_url, Account)
    yield opened
    opened.close()


def snapshot(version: int, balance: int, key: str = "acct-1") -> Snapshot[Account]:
    mark = CommandMark(uuid.UUID(int=version), offset=100 + version, version=version, count=1)
    return Snapshot(TOPIC, key, version, 100 + version, Account(True, balance), (mark,), "1")


def test_a_snapshot_is_read_back_whole(store: SqlSnapshots[Account]) -> None:
    assert store.get(TOPIC, "acct-1") is None
    kept = snapshot(10, 55)
    store.put(kept)
    assert store.get(TOPIC, "acct-1") == kept
    assert store.get("other", "acct-1") is None and store.get(TOPIC, "acct-2") is None


def test_only_a_later_version_replaces_a_snapshot(store: SqlSnapshots[Account]) -> None:
    store.put(snapshot(10, 55))
    store.put(snapshot(5, 1))
    store.put(snapshot(10, 2))
    assert store.get(TOPIC, "acct-1") == snapshot(10, 55)
    store.put(snapshot(20, 210))
    assert store.get(TOPIC, "acct-1") == snapshot(20, 210)
    store.clear(TOPIC)
    assert store.get(TOPIC, "acct-1") is None


def test_a_row_that_no_longer_reads_is_no_snapshot(store: SqlSnapshots[Account]) -> None:
    store.put(snapshot(10, 55))
    with store.engine.begin() as connection:
        connection.execute(
            text('UPDATE eventplatform_snapshots SET state = \'{"balance": "a lot"}\'')
        )
    assert store.get(TOPIC, "acct-1") is None


def test_a_database_out_of_reach_is_a_store_without_snapshots(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store is a cache: a database it cannot reach fails no command."""
    url = f"sqlite:///{tmp_path / 'missing' / 'snapshots.db'}"
    store = SqlSnapshots(create_engine(url), Account, create=False)
    store.put(snapshot(10, 55))
    assert store.get(TOPIC, "acct-1") is None
    assert "not kept" in caplog.text and "not read" in caplog.text
    store.close()


def _put_many(url: str, start: int) -> None:
    store = SqlSnapshots(url, Account, create=False)
    try:
        for version in range(start, start + 2 * PUTS_EACH, 2):
            store.put(snapshot(version, version))
    finally:
        store.close()


def test_processes_putting_at_once_keep_the_latest(database_url: str) -> None:
    SqlSnapshots(database_url, Account).close()  # the table, before the processes race
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_put_many, args=(database_url, s)) for s in (1, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    store = SqlSnapshots(database_url, Account)
    try:
        latest = store.get(TOPIC, "acct-1")
        assert latest is not None and latest.version == 2 * PUTS_EACH
    finally:
        store.close()


def test_two_repositories_share_snapshots_through_the_database(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'snapshots.db'}"
    account = f"acct-{uuid.uuid4()}"
    with (
        EntityStore(broker.bootstrap, [Opened, Deposited, Withdrawn]) as one,
        EntityStore(broker.bootstrap, [Opened, Deposited, Withdrawn]) as two,
    ):
        first = Repository(
            one, TOPIC, BANK, account_of, snapshots=SqlSnapshots(url, Account), snapshot_every=5
        )
        first.handle(Open(account))
        for amount in range(1, 12):
            first.handle(Deposit(account, amount))
        second = Repository(
            two, TOPIC, BANK, account_of, snapshots=SqlSnapshots(url, Account), snapshot_every=5
        )
        state, history = second.load(account)
        assert state == Account(opened=True, balance=66)
        assert (history.first_version, history.version) == (10, 12), "from the snapshot on"
        assert Repository(one, TOPIC, BANK, account_of).load(account)[0] == state
