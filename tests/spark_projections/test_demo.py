"""``platform demo`` runs end to end (shortened) and leaves a database ``platform query`` reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventplatform.apps.activity_tracking import app as activity
from eventplatform.apps.log_aggregation import app as logs
from eventplatform.apps.metrics import app as metrics
from eventplatform.cli import main
from eventplatform.demo import DEMO_DIRECTORY_DEFAULT, DEMO_MARKER, DemoSettings, prepare_directory

APPS = (activity, metrics, logs)


def test_the_demo_runs_to_the_end_and_its_replay_check_passes(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(main, ["demo", "--hours", "0.5", "--sessions-per-hour", "300"])
    assert result.exit_code == 0, result.output

    output = result.output
    assert "replay check passed: the rebuilt tables equal the live ones" in output
    assert "retracted" in output and "bot sessions" in output
    assert "a hundred times too large" in output and "log lines that held a password" in output
    assert "day rows from" in output
    for app in APPS:
        for named in app.queries:
            assert f"$ platform query {app.name}.{named.name}" in output
    assert "platform serve --data-dir .eventplatform/demo/data" in output
    assert "platform console --database sqlite:///.eventplatform/demo/projections.db" in output
    assert (tmp_path / ".eventplatform" / "demo" / "data").is_dir()
    database = ["--database", "sqlite:///.eventplatform/demo/projections.db"]

    # What it leaves behind is there to explore, read-only.
    for table in ("activity_sessions", "metrics_rollups", "metrics_daily_rollups", "logs_recent"):
        counted = runner.invoke(
            main, ["query", f"SELECT COUNT(*) AS n FROM {table}", "--format", "csv", *database]
        )
        assert counted.exit_code == 0, counted.output
        assert int(counted.output.splitlines()[1]) > 0, table
    leaked = runner.invoke(
        main,
        ["query", "logs.search", "--param", "q=hunter2-s3cr3t", "--format", "csv", *database],
    )
    assert leaked.exit_code == 0 and leaked.output.splitlines()[1:] == [], leaked.output
    cpu = runner.invoke(
        main,
        [
            "query",
            "SELECT MAX(maximum) FROM metrics_rollups WHERE series LIKE 'cpu%'",
            "--format",
            "csv",
            *database,
        ],
    )
    assert float(cpu.output.splitlines()[1]) <= 100.0  # the faulty agent's x100 is gone

    # A second run starts over instead of adding to the first one's log.
    again = runner.invoke(main, ["demo", "--hours", "0.5", "--sessions-per-hour", "300"])
    assert again.exit_code == 0, again.output
    assert again.output.count("replay check passed") == 1


def test_the_demo_refuses_a_folder_holding_data_it_did_not_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the demo deleted .eventplatform/data and projections.db, the default
    paths of platform serve and --database, without asking."""
    monkeypatch.chdir(tmp_path)
    served = tmp_path / ".eventplatform" / "data" / "orders-0"
    served.mkdir(parents=True)
    (served / "00000000000000000000.log").write_bytes(b"an app's records")
    (tmp_path / ".eventplatform" / "projections.db").write_bytes(b"an app's tables")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")

    refused = CliRunner().invoke(main, ["demo", "--directory", "mine"])

    assert refused.exit_code == 1, refused.output
    assert "holds data the demo did not make (notes.txt)" in refused.output
    assert "--reset" in refused.output
    assert (mine / "notes.txt").read_text() == "keep me"
    settings = DemoSettings(DEMO_DIRECTORY_DEFAULT, 1.0, 1.0, None)
    prepare_directory(settings)  # the default is the demo's own folder, beside the app's data
    assert (served / "00000000000000000000.log").read_bytes() == b"an app's records"
    assert (tmp_path / ".eventplatform" / "projections.db").read_bytes() == b"an app's tables"
    (tmp_path / DEMO_DIRECTORY_DEFAULT / "data").mkdir()
    prepare_directory(settings)  # a demo's own folder is replaced
    assert sorted(p.name for p in (tmp_path / DEMO_DIRECTORY_DEFAULT).iterdir()) == [DEMO_MARKER]
    prepare_directory(DemoSettings(mine, 1.0, 1.0, None, reset=True))
    assert sorted(p.name for p in mine.iterdir()) == [DEMO_MARKER]
