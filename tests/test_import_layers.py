"""The import contracts of ``make lint`` hold, and an import against them fails it.

The check runs ``lint-imports`` on a copy of the packages it covers, laid out by
import name, once as they are and once with one wrong import added: storage, the
lowest layer of the log, importing the broker, the highest; the log importing the
command line; the projection fold importing a SQL store.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
TIMEOUT_S = 120


COPIED = {
    "log": ROOT / "log",
    "tools": ROOT / "platform" / "tools",
    "events": ROOT / "platform" / "events",
    "projections": ROOT / "projections",
    "spark_projections": ROOT / "spark_projections",
}
"""The packages the contracts cover, by their name under ``eventplatform``."""


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The packages the contracts cover under ``tmp_path``, with the contracts of
    pyproject.toml. ``eventplatform`` stays a namespace package, as in the repository,
    and on PYTHONPATH the copy comes before the editable install's mapping."""
    package = tmp_path / "eventplatform"
    for name, source in COPIED.items():
        shutil.copytree(source, package / name, ignore=shutil.ignore_patterns("__pycache__"))
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (tmp_path / ".importlinter").write_text(_ini(contracts))
    return tmp_path


def _ini(contracts: dict[str, object]) -> str:
    """The contracts of pyproject.toml in lint-imports' INI form."""
    lines = ["[importlinter]"]
    for key, value in contracts.items():
        if key != "contracts":
            lines.append(f"{key} = {_ini_value(value)}")
    for number, contract in enumerate(contracts["contracts"]):  # type: ignore[arg-type]
        lines.append(f"[importlinter:contract:{number}]")
        lines += [f"{key} = {_ini_value(value)}" for key, value in contract.items()]
    return "\n".join(lines) + "\n"


def _ini_value(value: object) -> str:
    if isinstance(value, list):
        return "\n    " + "\n    ".join(str(item) for item in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _located(directory: Path) -> str:
    """Where ``eventplatform.log`` imports from with the copy on PYTHONPATH."""
    return subprocess.run(
        [sys.executable, "-c", "import eventplatform.log as m; print(m.__file__)"],
        env={**os.environ, "PYTHONPATH": str(directory)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=True,
    ).stdout.replace(str(directory), "<copy>")


def lint(directory: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(directory)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(directory / ".importlinter")],
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_the_contracts_hold_and_an_upward_import_breaks_them(copy: Path) -> None:
    clean = lint(copy)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert _located(copy).startswith("<copy>/eventplatform/log/")
    assert "the log's layers KEPT" in clean.stdout
    probe = copy / "eventplatform" / "log" / "storage" / "probe.py"
    probe.write_text("from eventplatform.log.broker import broker\n")
    broken = lint(copy)
    assert broken.returncode != 0
    assert "the log's layers BROKEN" in broken.stdout
    assert "eventplatform.log.storage.probe -> eventplatform.log.broker.broker" in broken.stdout


def test_the_log_may_not_import_the_command_line(copy: Path) -> None:
    probe = copy / "eventplatform" / "log" / "cluster" / "probe.py"
    probe.write_text("import click\n")
    broken = lint(copy)
    assert broken.returncode != 0
    assert "the log is no command line BROKEN" in broken.stdout


def test_make_lint_runs_the_contracts() -> None:
    makefile = (ROOT / "Makefile").read_text()
    lint_recipe = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "lint-imports" in lint_recipe


def test_the_pure_model_may_not_import_an_adapter(copy: Path) -> None:
    clean = lint(copy)
    assert "the pure model imports no adapter KEPT" in clean.stdout, clean.stdout + clean.stderr
    fold = copy / "eventplatform" / "projections" / "fold.py"
    probe = "from eventplatform.projections.store import ProjectionStore\n"
    fold.write_text(fold.read_text() + probe)
    broken = lint(copy)
    assert broken.returncode != 0
    assert "the pure model imports no adapter BROKEN" in broken.stdout
    assert "eventplatform.projections.fold -> eventplatform.projections.store" in broken.stdout
