"""The bank of ``docs/entities.md`` (``docs/examples/bank``) as its readers run it: through
``platform apps bank``, against the real broker of this folder, then its table made by
``platform db upgrade`` and read with ``platform query bank.balances``."""

from __future__ import annotations

import csv
import io
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from eventplatform.cli import main
from eventplatform.projections.apps import load_app
from eventplatform.runtime import running_projections, wait_caught_up
from eventplatform.testing import BrokerProcess

APPLY_TIMEOUT_S = 60.0


def invoke(*arguments: str, code: int = 0) -> str:
    result = CliRunner().invoke(main, list(arguments))
    assert result.exit_code == code, (result.output, result.exception)
    return result.output


def fold(url: str, bootstrap: str) -> None:
    app = load_app("bank")
    [projection] = app.projections
    with running_projections([projection.name], [app], url, bootstrap):
        wait_caught_up([projection.name], url, bootstrap, list(projection.topics), APPLY_TIMEOUT_S)


def test_the_bank_of_the_docs_opens_deposits_refuses_an_overdraft_and_shows_its_table(
    broker: BrokerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTPLATFORM_APPS", "bank")
    bootstrap = ("--bootstrap", broker.bootstrap)
    account = f"acct-{uuid.uuid4().hex[:8]}"
    assert f"{account}: opened" in invoke("apps", "bank", "open", *bootstrap, "--account", account)
    again = invoke("apps", "bank", "open", *bootstrap, "--account", account, code=1)
    assert "is open already" in again
    deposited = invoke(
        "apps", "bank", "deposit", *bootstrap, "--account", account, "--amount", "30"
    )
    assert f"{account}: balance 30" in deposited
    overdraft = invoke(
        "apps", "bank", "withdraw", *bootstrap, "--account", account, "--amount", "31", code=1
    )
    assert "holds 30, not 31" in overdraft
    invoke("apps", "bank", "withdraw", *bootstrap, "--account", account, "--amount", "20")
    shown = invoke("apps", "bank", "balance", *bootstrap, "--account", account)
    assert f"{account}: balance 10 (version 3)" in shown

    url = f"sqlite:///{tmp_path / 'bank.db'}"
    assert "bank_0001" in invoke("db", "upgrade", "--database", url)
    fold(url, broker.bootstrap)
    output = invoke(
        "query", "bank.balances", "--database", url, "--param", f"account={account}",
        "--format", "csv",
    )  # fmt: skip
    assert list(csv.reader(io.StringIO(output)))[1:] == [[account, "10", "3"]]


def test_db_upgrade_creates_the_apps_event_topics_kept_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVENTPLATFORM_APPS", "bank")
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        url = f"sqlite:///{tmp_path / 'bank.db'}"
        first = invoke("db", "upgrade", "--database", url, "--bootstrap", broker.bootstrap)
        assert "event topic bank: created" in first
        again = invoke("db", "upgrade", "--database", url, "--bootstrap", broker.bootstrap)
        assert "event topic bank: exists" in again
        described = invoke("topics", "describe", "bank", "--bootstrap", broker.bootstrap)
        for line in ("retention.ms", "retention.bytes"):
            [row] = [row for row in described.splitlines() if row.split()[:1] == [line]]
            assert row.split()[1] == "-1", row
        assert any(
            "eventplatform.entity.versions.enable" in r and "true" in r
            for r in described.splitlines()
        )
    finally:
        broker.stop()
