"""Log tail benchmark: lines/s from a growing file to rows of the log app's projection.

Three processes run on a fresh data directory: a ``platform serve`` broker,
``platform apps logs tail`` following one file, and ``platform projections
run logs.lines`` folding into SQLite or PostgreSQL. This script writes
``--lines`` plain-text lines (``<time> <LEVEL> <message>``, as the log
simulator draws them; a tenth are errors) to the file as fast as it can,
and measures:

* **into the log**: from the first line written until the topic holds them
  all (the tail's throughput, acknowledged by the log);
* **end to end**: from the first line written until ``logs_recent`` holds
  them all (the tail, the log and the runner in a pipeline).

Each run starts with empty tables, a new topic and a new file. The writer
keeps ahead of the pipeline, so the rate is the pipeline's. At the end of
every run the script checks that the table holds each written line exactly
once.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

from bench.harness import (
    Deadline,
    Spread,
    format_spread,
    invocation,
    markdown_table,
    progress,
    write_results,
)
from eventplatform.apps.log_aggregation.events import TOPIC
from eventplatform.apps.log_aggregation.simulator import LogSimulator
from eventplatform.projections import migrate
from eventplatform.projections.apps import installed_apps
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.kafka import log_ends
from eventplatform.testing import BrokerProcess, fresh_database

LINES_DEFAULT = 200_000
REPEAT_DEFAULT = 3
RUN_TIMEOUT_S = 600.0
POLL_S = 0.05
STOP_TIMEOUT_S = 30.0
PLATFORM = Path(sys.executable).with_name("platform")


@dataclass
class Run:
    database: str
    lines: int
    write_seconds: float
    log_seconds: float
    end_to_end_seconds: float

    @property
    def log_lines_per_second(self) -> float:
        return self.lines / self.log_seconds

    @property
    def end_to_end_lines_per_second(self) -> float:
        return self.lines / self.end_to_end_seconds


def file_lines(count: int, seed: int) -> list[str]:
    """``count`` lines as services write them: time, level, message."""
    begin = datetime(2026, 11, 20, 12, tzinfo=UTC)
    drawn = LogSimulator(seed=seed).run(begin, begin + timedelta(hours=2)).lines
    chooser = random.Random(seed)
    picked = [drawn[chooser.randrange(len(drawn))] for _ in range(count)]
    return [
        f"{(begin + timedelta(milliseconds=number)).isoformat()} {line.level.upper()} "
        f"{line.message} n={number}\n"
        for number, line in enumerate(picked)
    ]


def start(arguments: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as output:
        return subprocess.Popen([str(PLATFORM), *arguments], stdout=output, stderr=output)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_TIMEOUT_S)


def table_lines(url: str) -> int:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT COUNT(*) FROM logs_recent")).scalar_one())
    finally:
        engine.dispose()


def distinct_lines(url: str) -> int:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            query = text("SELECT COUNT(DISTINCT message) FROM logs_recent")
            return int(connection.execute(query).scalar_one())
    finally:
        engine.dispose()


def in_log(bootstrap: str) -> int:
    return sum(high - low for low, high in log_ends(bootstrap, [TOPIC]).values())


def one_run(kind: str, lines: list[str], scratch: Path, number: int) -> Run:
    folder = scratch / f"run-{kind}-{number}"
    folder.mkdir()
    broker = BrokerProcess(folder / "log", overrides=["num.partitions=3"]).start()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with fresh_database(kind, folder) as url:
            migrate.upgrade(url, installed_apps(["logs"]))
            bootstrap = ["--bootstrap", broker.bootstrap]
            runner = ["projections", "run", "logs.lines", "--database", url, *bootstrap]
            runner += ["--batch-size", "5000", "--log-level", "warning"]
            processes.append(start(runner, folder / "runner.out"))
            path = folder / "service.log"
            path.touch()
            tail = ["apps", "logs", "tail", str(path), "--service", "bench", "--host", "h1"]
            tail += ["--state-dir", str(folder / "state"), *bootstrap]
            processes.append(start(tail, folder / "tail.out"))
            time.sleep(1.0)  # both connected and idle: the clock starts with the first line
            started = time.perf_counter()
            with path.open("a") as handle:
                for first in range(0, len(lines), 10_000):
                    handle.write("".join(lines[first : first + 10_000]))
                    handle.flush()
            written = time.perf_counter() - started
            deadline = Deadline(RUN_TIMEOUT_S)
            logged = None
            while not deadline.passed():
                if logged is None and in_log(broker.bootstrap) >= len(lines):
                    logged = time.perf_counter() - started
                if table_lines(url) >= len(lines):
                    break
                time.sleep(POLL_S)
            end_to_end = time.perf_counter() - started
            if logged is None:
                logged = end_to_end
            found, distinct = table_lines(url), distinct_lines(url)
            if found != len(lines) or distinct != len(lines):
                raise SystemExit(
                    f"{kind}: {len(lines)} lines written, {found} rows, {distinct} distinct"
                )
            return Run(kind, len(lines), written, logged, end_to_end)
    finally:
        for process in processes:
            stop(process)
        broker.kill()
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=LINES_DEFAULT)
    parser.add_argument("--repeat", type=int, default=REPEAT_DEFAULT)
    parser.add_argument(
        "--databases", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql"
    )
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args(argv)
    lines = file_lines(arguments.lines, seed=1)
    scratch = Path(tempfile.mkdtemp(prefix="bench-log-tail-"))
    runs: list[Run] = []
    try:
        for repetition in range(arguments.repeat):
            for kind in arguments.databases.split(","):
                run = one_run(kind, lines, scratch, repetition)
                runs.append(run)
                progress(
                    f"{repetition + 1}: {kind}: into the log {run.log_lines_per_second:,.0f} "
                    f"lines/s, end to end {run.end_to_end_lines_per_second:,.0f} lines/s"
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = [["database", "lines", "into the log, lines/s", "end to end, lines/s", "end to end, s"]]
    for kind in arguments.databases.split(","):
        group = [run for run in runs if run.database == kind]
        rows.append(
            [
                kind,
                f"{arguments.lines:,}",
                format_spread(Spread.of([r.log_lines_per_second for r in group])),
                format_spread(Spread.of([r.end_to_end_lines_per_second for r in group])),
                format_spread(Spread.of([r.end_to_end_seconds for r in group]), 1),
            ]
        )
    command = invocation(__file__, argv)
    print(f"command: {command}\n\n{markdown_table(rows)}\n")
    write_results(arguments.json, command, runs)


if __name__ == "__main__":
    main(sys.argv[1:])
