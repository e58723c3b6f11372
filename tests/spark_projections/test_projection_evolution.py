"""A projection whose definition changes: its old rows are rebuilt, never silently kept.

The story: a projection counts deposits per account and a runner folds some
into it. Then its definition gains a ``balance`` column (``Sum``) and the
table gains the column by migration. A runner of the new definition must not
fold new events into rows built under the old one (the balance would stay
NULL for good): it stops, status says to rebuild, ``platform projections
rebuild`` rebuilds the table from the whole log under the new definition and
stores its fingerprint, and the runner then continues from the rebuild.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import evolving_app
import pytest
from click.testing import CliRunner
from evolving_app import Deposited, accounts_v1, accounts_v2, app_v1, app_v2
from projection_threads import apply_all
from sqlalchemy import BigInteger, Column, select, text

from eventplatform.events import EventProducer, EventRef
from eventplatform.projections import migrate, schema
from eventplatform.projections.apps import APPS_ENV
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.errors import DefinitionChangedError
from eventplatform.projections.fingerprint import fingerprint
from eventplatform.projections.operations import projection_status, run_projection
from eventplatform.projections.registry import rebuild_needed_message
from eventplatform.projections_cli import projections
from eventplatform.testing import BrokerProcess, running_broker

NAME = evolving_app.NAME
PARTITIONS = 2
ACCOUNTS = 3
BATCH_SIZE = 100
IDLE_EXIT_S = 1.0
CHANGED = rebuild_needed_message(NAME)


@pytest.fixture(autouse=True)
def no_apps_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(APPS_ENV, raising=False)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = [f"num.partitions={PARTITIONS}", "group.initial.rebalance.delay.ms=0"]
    with running_broker(tmp_path_factory.mktemp("broker"), overrides) as process:
        yield process


DEPOSITED: list[int] = []
"""Every amount deposited on the module's broker, whichever test deposited it."""


def deposit(broker: BrokerProcess, amounts: range) -> list[EventRef]:
    events = [Deposited(account=f"a{n % ACCOUNTS}", amount=n) for n in amounts]
    with EventProducer(broker.bootstrap) as producer:
        refs = producer.append(events)
    DEPOSITED.extend(amounts)
    return refs


def prepared(url: str) -> None:
    """The platform's tables and the first definition's table, as its first migration."""
    migrate.upgrade(url, [])
    engine = create_store_engine(url)
    try:
        accounts_v1.tables[0].metadata.create_all(engine)
    finally:
        engine.dispose()


def add_balance_column(url: str) -> None:
    """The user's second migration: the new column, NULL in the rows already there."""
    engine = create_store_engine(url)
    try:
        with engine.begin() as connection:
            column = Column(evolving_app.BALANCE, BigInteger)
            kind = column.type.compile(dialect=connection.dialect)
            connection.execute(
                text(f"ALTER TABLE {evolving_app.TABLE} ADD COLUMN {column.name} {kind}")
            )
    finally:
        engine.dispose()


def rows(url: str) -> dict[str, tuple[Any, ...]]:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            table = evolving_app.accounts_v2_table
            found = connection.execute(
                select(table.c.account, table.c.deposits, table.c.balance)
            ).all()
    finally:
        engine.dispose()
    return {account: (deposits, balance) for account, deposits, balance in found}


def stored_fingerprint(url: str) -> str | None:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            table = schema.projections
            query = select(table.c.fingerprint).where(table.c.name == NAME)
            return connection.execute(query).scalar_one_or_none()  # type: ignore[no-any-return]
    finally:
        engine.dispose()


def fold(amounts: list[int]) -> dict[str, tuple[int, int]]:
    """What the second definition makes of deposits of ``amounts``: count and sum."""
    folded: dict[str, tuple[int, int]] = {}
    for n in amounts:
        count, total = folded.get(f"a{n % ACCOUNTS}", (0, 0))
        folded[f"a{n % ACCOUNTS}"] = (count + 1, total + n)
    return folded


def status_of(url: str) -> str:
    (status,) = projection_status([app_v2], database_url=url, bootstrap=None, name=NAME)
    return status.status


def refused_run(url: str, broker: BrokerProcess) -> DefinitionChangedError:
    with pytest.raises(DefinitionChangedError) as raised:
        run_projection(
            NAME,
            [app_v2],
            database_url=url,
            bootstrap=broker.bootstrap,
            batch_size=BATCH_SIZE,
            idle_exit_s=IDLE_EXIT_S,
        )
    return raised.value


def test_a_runner_of_a_changed_definition_applies_nothing_and_status_says_rebuild(
    broker: BrokerProcess, database_url: str
) -> None:
    prepared(database_url)
    first = deposit(broker, range(10))
    apply_all(NAME, [app_v1], database_url, broker.bootstrap, first)
    assert stored_fingerprint(database_url) == fingerprint(accounts_v1)
    add_balance_column(database_url)
    deposit(broker, range(10, 12))
    before = rows(database_url)

    error = refused_run(database_url, broker)

    assert str(error) == f"{NAME}: {CHANGED}"
    assert rows(database_url) == before
    assert all(balance is None for _, balance in before.values())
    assert status_of(database_url) == CHANGED
    assert stored_fingerprint(database_url) == fingerprint(accounts_v1)
    shown = CliRunner().invoke(
        projections,
        [
            "status",
            NAME,
            "--bootstrap",
            broker.bootstrap,
            "--database",
            database_url,
            "--app",
            "evolving_app:app_v2",
        ],
    )
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[0] == f"{NAME}: {CHANGED}"


def test_a_rebuild_folds_the_whole_history_under_the_new_definition(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    prepared(url)
    first = deposit(broker, range(100, 110))
    apply_all(NAME, [app_v1], url, broker.bootstrap, first)
    add_balance_column(url)
    deposit(broker, range(110, 115))
    refused_run(url, broker)

    result = CliRunner().invoke(
        projections,
        [
            "rebuild",
            NAME,
            "--spark-master",
            "local[2]",
            "--bootstrap",
            broker.bootstrap,
            "--database",
            url,
            "--app",
            "evolving_app:app_v2",
        ],
    )

    assert result.exit_code == 0, result.output
    assert f"replayed: {NAME} (rebuild) into {evolving_app.TABLE}" in result.output
    new = fingerprint(accounts_v2)[:12]
    assert f"-> {new} (changed)" in result.output
    history = list(DEPOSITED)
    assert rows(url) == fold(history)
    assert stored_fingerprint(url) == fingerprint(accounts_v2)
    assert status_of(url) != CHANGED

    later = deposit(broker, range(115, 118))
    apply_all(NAME, [app_v2], url, broker.bootstrap, later)
    assert rows(url) == fold([*history, *range(115, 118)])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("no.such.projection",), "no.such.projection"),
        ((NAME, "--spark-conf", "no-equals-sign"), "is not KEY=VALUE"),
    ],
)
def test_a_bad_rebuild_request_fails_in_one_line_and_changes_nothing(
    broker: BrokerProcess, tmp_path: Path, arguments: tuple[str, ...], message: str
) -> None:
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    prepared(url)
    result = CliRunner().invoke(
        projections,
        [
            "rebuild",
            *arguments,
            "--bootstrap",
            broker.bootstrap,
            "--database",
            url,
            "--app",
            "evolving_app:app_v2",
        ],
    )
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert result.output.count("\n") == 1
    assert stored_fingerprint(url) is None


RUN_REBUILD_TIMEOUT_S = 180.0
"""How long ``projections run`` may take to rebuild and then apply (Spark starts in it)."""


def test_projections_run_rebuilds_a_changed_definition_for_you(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """The default path: a runner started on tables built under the old definition
    rebuilds them under the new one (the old ones serve until the swap), then runs."""
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    prepared(url)
    first = deposit(broker, range(200, 210))
    apply_all(NAME, [app_v1], url, broker.bootstrap, first)
    add_balance_column(url)
    support = Path(evolving_app.__file__).resolve().parent
    python_path = os.pathsep.join(filter(None, [str(support), os.environ.get("PYTHONPATH")]))
    command = [
        str(Path(sys.executable).with_name("platform")),
        "projections",
        "run",
        NAME,
        "--app",
        "evolving_app:app_v2",
        "--bootstrap",
        broker.bootstrap,
        "--database",
        url,
    ]
    environment = {
        **os.environ,
        "PYTHONPATH": python_path,
        "EVENTPLATFORM_SPARK_MASTER": "local[2]",
    }
    output = tmp_path / "run.out"
    with output.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=environment)
    try:
        deadline = time.monotonic() + RUN_REBUILD_TIMEOUT_S
        while rows(url) != fold(list(DEPOSITED)) and time.monotonic() < deadline:
            assert process.poll() is None, output.read_text()
            time.sleep(0.5)
        assert rows(url) == fold(list(DEPOSITED)), output.read_text()
        assert stored_fingerprint(url) == fingerprint(accounts_v2)
        later = deposit(broker, range(210, 213))  # and it runs on, under the new definition
        while rows(url) != fold(list(DEPOSITED)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert rows(url) == fold(list(DEPOSITED)), (later, output.read_text())
    finally:
        process.terminate()
        process.wait(RUN_REBUILD_TIMEOUT_S)
    text_out = output.read_text()
    assert "its definition changed since its tables were built; rebuilding" in text_out
    assert "Traceback" not in text_out, text_out
