"""``platform demo`` runs end to end (shortened) and leaves a database ``platform query`` reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventplatform.apps.activity_tracking import app
from eventplatform.cli import main


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
    for named in app.queries:
        assert f"$ platform query activity.{named.name}" in output
    assert "platform serve --data-dir .eventplatform/data" in output
    assert (tmp_path / ".eventplatform" / "data").is_dir()

    # What it leaves behind is there to explore, read-only.
    sessions = runner.invoke(
        main, ["query", "SELECT COUNT(*) AS n FROM activity_sessions", "--format", "csv"]
    )
    assert sessions.exit_code == 0, sessions.output
    assert int(sessions.output.splitlines()[1]) > 0

    # A second run starts over instead of adding to the first one's log.
    again = runner.invoke(main, ["demo", "--hours", "0.5", "--sessions-per-hour", "300"])
    assert again.exit_code == 0, again.output
    assert again.output.count("replay check passed") == 1
