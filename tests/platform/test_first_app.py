"""A first app in minutes, as a new user makes it (docs/apps.md): from an empty folder,
through the real ``platform`` command in subprocesses, with no ``PYTHONPATH``.

``platform apps new bank`` writes the app; ``platform db upgrade --app bank`` creates
the platform's tables and the app's in one go on a fresh SQLite database (and none of
the bundled apps'); ``platform projections run`` folds the events that a script appends
with the SDK; ``platform query`` shows the folded values. The projection then gains a column: its
migration adds it, and the next run rebuilds the table under the new definition before
it runs on. Then the same upgrade and run
against a fresh PostgreSQL database. Each command finds ``bank`` in the current folder.

The app's own modules are imported only in the subprocesses: this process has another
``bank`` on its path (``docs/examples/bank``).
"""

from __future__ import annotations

import csv
import io
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import inspect

from eventplatform.cli import main
from eventplatform.projections.database import create_store_engine
from eventplatform.testing import BrokerProcess, fresh_postgres_database, running_broker

pytestmark = pytest.mark.alone  # tests/conftest.py: Spark, clusters, timed kills or a browser

ROOT = Path(__file__).resolve().parents[2]
PLATFORM = Path(sys.executable).with_name("platform")
BROKER_OVERRIDES = ("group.initial.rebalance.delay.ms=0",)
COMMAND_TIMEOUT_S = 120
APPLY_TIMEOUT_S = 60.0
REBUILD_TIMEOUT_S = 180.0
"""How long a run that first rebuilds with Spark may take to show the folded rows: Spark's
start alone has taken more than a minute on a loaded machine."""
STOP_TIMEOUT_S = 30.0
CLEARED_ENVIRONMENT = (
    "PYTHONPATH",
    "EVENTPLATFORM_APPS",
    "EVENTPLATFORM_DATABASE_URL",
    "EVENTPLATFORM_BOOTSTRAP",
    "EVENTPLATFORM_CLIENT_CONFIG",
)
APPEND = """\
import sys

from eventplatform.events import EventProducer

from bank.events import Recorded

with EventProducer(sys.argv[1]) as producer:
    producer.append(
        [
            Recorded(subject="alice", amount=30),
            Recorded(subject="bob", amount=12),
            Recorded(subject="alice", amount=-5),
        ]
    )
"""
FOLDED = [["alice", "25", "2"], ["bob", "12", "1"]]
"""subject, total, events: what the three appended events fold to."""
LARGEST = [["alice", "30"], ["bob", "12"]]
"""subject, largest: the column the changed projection adds, over the whole history."""


def largest(folder: Path) -> list[list[str]]:
    """subject, largest, once the rebuild swapped the table with the column filled."""
    query = "SELECT subject, largest FROM bank_totals WHERE largest IS NOT NULL ORDER BY 1"
    output = run(folder, "query", query, "--format", "csv").stdout
    return [row[:2] for row in csv.reader(io.StringIO(output))][1:]


def changed(package: Path) -> None:
    """The user's change to the projection: a ``largest`` column, the largest amount."""
    source = package / "projections.py"
    text = source.read_text()
    text = text.replace(
        '    merge_column("events", BigInteger, Count()),\n',
        '    merge_column("events", BigInteger, Count()),\n'
        '    merge_column("largest", BigInteger, Max()),\n',
    )
    text = text.replace(
        "        total=event.amount,\n",
        "        total=event.amount,\n        largest=event.amount,\n",
    )
    assert text.count("largest") == 2, text
    source.write_text(text)


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in CLEARED_ENVIRONMENT}


def run(folder: Path, *arguments: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    """``platform ARGUMENTS`` in ``folder``, as a user types it; must exit with ``code``."""
    completed = subprocess.run(
        [str(PLATFORM), *arguments],
        cwd=folder,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert completed.returncode == code, (completed.stdout, completed.stderr)
    return completed


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An empty folder, where the user starts."""
    empty = tmp_path / "work"
    empty.mkdir()
    return empty


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of this test's own: the app's topic, ``bank``, is the docs' bank's too."""
    with running_broker(tmp_path / "broker", BROKER_OVERRIDES) as process:
        yield process


def table_names(url: str) -> set[str]:
    engine = create_store_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def totals(folder: Path, query_options: Sequence[str]) -> list[list[str]]:
    """The app's named query, as CSV rows: subject, total, events."""
    command = ["query", "bank.totals", "--app", "bank", "--format", "csv", *query_options]
    output = run(folder, *command).stdout
    return [row[:3] for row in csv.reader(io.StringIO(output))][1:]


def folded(
    folder: Path,
    broker: BrokerProcess,
    database: Sequence[str],
    query: Sequence[str] = (),
    *,
    rebuilt: bool = False,
) -> list[list[str]]:
    """Run the projection until the query shows the appended events folded; its rows.
    ``rebuilt``: the run rebuilds the tables first, so it applies no event itself."""
    command = [str(PLATFORM), "projections", "run", "bank.totals", "--app", "bank"]
    command += ["--bootstrap", broker.bootstrap, *database]
    runner = subprocess.Popen(
        command, cwd=folder, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    rows: list[list[str]] = []
    try:
        deadline = time.monotonic() + (REBUILD_TIMEOUT_S if rebuilt else APPLY_TIMEOUT_S)
        while time.monotonic() < deadline and runner.poll() is None:
            rows = totals(folder, [*database, *query])
            if rows == FOLDED and (not rebuilt or largest(folder) == LARGEST):
                break
            time.sleep(0.2)
    finally:
        runner.send_signal(signal.SIGINT)
        stdout, stderr = runner.communicate(timeout=STOP_TIMEOUT_S)
    assert runner.returncode == 0, (stdout, stderr)
    if rebuilt:
        assert b"its definition changed since its tables were built; rebuilding" in stdout
        assert b"replayed: bank.totals (rebuild)" in stdout, (stdout, stderr)
        assert b"Traceback" not in stderr, stderr
    else:
        assert b"bank.totals: stopped after 3 events in " in stdout, (stdout, stderr)
    return rows


def test_a_first_app_from_an_empty_folder_to_sqlite_and_postgresql(
    folder: Path, broker: BrokerProcess
) -> None:
    created = run(folder, "apps", "new", "bank")
    assert "platform db upgrade --app bank" in created.stdout
    package = folder / "bank"
    assert [path.name for path in (package / "migrations").glob("*.py")] == [
        "bank_0001_tables_of_the_bank_app.py"
    ]

    # The first upgrade of an empty database: the platform's tables and the app's.
    upgraded = run(folder, "db", "upgrade", "--app", "bank").stdout
    assert "applied eventplatform_0001 (eventplatform)" in upgraded
    assert "applied bank_0001 (bank): Tables of the bank app" in upgraded
    assert upgraded.rstrip().endswith("heads: bank_0001, eventplatform_0004")
    tables = table_names(f"sqlite:///{folder / '.eventplatform' / 'projections.db'}")
    assert "bank_totals" in tables and "ep_checkpoints" in tables
    assert not [name for name in tables if name.startswith(("activity_", "metrics_", "logs_"))]

    (folder / "append.py").write_text(APPEND)
    subprocess.run(
        [sys.executable, "append.py", broker.bootstrap],
        cwd=folder,
        env=environment(),
        check=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert folded(folder, broker, []) == FOLDED
    table = run(folder, "query", "SELECT subject, total, events FROM bank_totals ORDER BY 1")
    cells = [line.replace("|", " ").split() for line in table.stdout.splitlines()]
    assert [row for row in cells if row[:1] in (["alice"], ["bob"])] == FOLDED

    # The next revision, on the database upgraded that way: nothing changed, so empty.
    revision = run(folder, "db", "revision", "--app", "bank", "-m", "nothing new yet").stdout
    written = Path(revision.strip())
    assert written.parent == package / "migrations"
    assert "op.create_table" not in written.read_text()
    assert "(bank): nothing new yet" in run(folder, "db", "upgrade", "--app", "bank").stdout
    run(folder, "db", "check", "--app", "bank")

    # The app's own test passes.
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "bank"],
        cwd=folder,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "1 passed" in tested.stdout

    # The projection changes: a column more. Its migration adds the column; the next run
    # rebuilds the table from the log under the new definition for the user, then runs on.
    changed(package)
    revision = run(folder, "db", "revision", "--app", "bank", "-m", "the largest amount").stdout
    assert "op.add_column" in Path(revision.strip()).read_text()
    run(folder, "db", "upgrade", "--app", "bank")
    assert folded(folder, broker, [], rebuilt=True) == FOLDED
    assert largest(folder) == LARGEST

    # The same on a fresh PostgreSQL database, the SQLite runner stopped.
    with fresh_postgres_database(f"ep_first_app_{os.getpid()}") as url:
        database = ["--database", url]
        upgraded = run(folder, "db", "upgrade", "--app", "bank", *database).stdout
        assert "applied eventplatform_0001 (eventplatform)" in upgraded
        assert "applied bank_0001 (bank)" in upgraded
        # a superuser is who the test server lets in; analysts query as a reader role
        assert folded(folder, broker, database, ["--allow-superuser"]) == FOLDED


def test_pip_install_makes_the_new_app_an_installed_app(folder: Path, tmp_path: Path) -> None:
    run(folder, "apps", "new", "ledger")
    site = tmp_path / "site"
    install = ["install", "--quiet", "--no-deps", "--no-build-isolation", "--target", str(site)]
    subprocess.run(
        [sys.executable, "-m", "pip", *install, str(folder / "ledger")],
        env=environment(),
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    # No --app, from a folder without the package: its entry point finds it.
    upgraded = subprocess.run(
        [str(PLATFORM), "db", "upgrade", "--database", "sqlite:///ledger.db"],
        cwd=elsewhere,
        env={**environment(), "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )

    assert upgraded.returncode == 0, upgraded.stderr
    assert "applied ledger_0001 (ledger): Tables of the ledger app" in upgraded.stdout


# Refusals: one line each, nothing written


def refused(directory: Path, name: str) -> str:
    result = CliRunner().invoke(main, ["apps", "new", name, "--directory", str(directory)])
    assert result.exit_code == 1, result.output
    [line] = result.output.splitlines()
    assert line.startswith("Error: ")
    return line


@pytest.mark.parametrize(
    ("name", "complaint"),
    [
        ("my-app", "is not a valid Python identifier"),
        ("1st", "is not a valid Python identifier"),
        ("class", "is not a valid Python identifier"),
        ("café", "is not a valid Python identifier"),
        ("_hidden", "must start with a letter"),
        ("new", "is a command of platform apps"),
        ("activity", "is the name of a bundled app"),
        ("json", "a module named 'json' is importable already"),
    ],
)
def test_a_name_that_cannot_be_an_app_is_refused(folder: Path, name: str, complaint: str) -> None:
    assert complaint in refused(folder, name)
    assert list(folder.iterdir()) == []


def test_an_existing_folder_is_never_overwritten(folder: Path) -> None:
    (folder / "ledger").mkdir()
    (folder / "ledger" / "notes.txt").write_text("mine")

    assert "exists already" in refused(folder, "ledger")
    assert [path.name for path in (folder / "ledger").iterdir()] == ["notes.txt"]
    assert sorted(path.name for path in folder.iterdir()) == ["ledger"]


def test_new_stays_the_groups_own_beside_an_app_named_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"named_new_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "import click\n"
        "from eventplatform.projections import App\n\n"
        f'app = App("new", commands="{module}:commands")\n\n\n'
        "@click.command()\n"
        "def commands() -> None:\n"
        '    """An app that calls itself new."""\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    listing = CliRunner().invoke(main, ["apps", "--app", module, "--help"])
    help_of_new = CliRunner().invoke(main, ["apps", "--app", module, "new", "--help"])
    activity = CliRunner().invoke(main, ["apps", "--app", module, "activity", "--help"])

    assert listing.exit_code == 0 and listing.output.count("  new ") == 1, listing.output
    assert "Write a new app" in help_of_new.output
    assert activity.exit_code == 0 and "Website activity tracking." in activity.output
    sys.modules.pop(module, None)


def test_psycopg_comes_with_the_platform() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[\[<>=;]", requirement)[0] for requirement in project["dependencies"]]
    assert "psycopg" in names
    assert "psycopg[binary]" in " ".join(project["dependencies"])
