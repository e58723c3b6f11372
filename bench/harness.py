"""Shared pieces of the benchmarks: bounded loops, timing, spreads, machine facts, tables,
and the page-view workload of ``projections.py`` and ``replay.py``.

Every benchmark script under ``bench/`` reports medians with min-max spreads,
checks a :class:`Deadline` besides its count in every loop, and records the
machine it ran on, because the machines these run on are usually shared.

The workload lives here, in a module Spark's Python workers can import by
name, ``bench.harness`` (the repository root on ``PYTHONPATH``).

Each script runs from the repository root as a module of the ``bench`` package
(``python -m bench.suite``), and imports its siblings as ``bench.<module>``.
"""

from __future__ import annotations

import json
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, Column, DateTime, Integer, MetaData, String

from eventplatform.events import Envelope, Event
from eventplatform.projections.merge import Count, First, Latest, Max, Min, Sum
from eventplatform.projections.model import Projection, Row, merge_column, projection_table

try:
    from eventplatform.testing import BrokerProcess as BrokerProcess
except ImportError:  # revisions before eventplatform.testing kept it in tests/support
    sys.path.insert(0, str(Path.cwd() / "tests" / "support"))
    from broker_process import (  # type: ignore[import-not-found,no-redef]
        BrokerProcess as BrokerProcess,
    )

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
MEGABYTE = 1_000_000
GIGABYTE = 1_000_000_000
LSCPU_LINES = 15
USERS = 10_000
URLS = 2_000
DURATION_MS_MAX = 120_000
SEED = 20261121
KEY_LENGTH = 200


class Deadline:
    """A monotonic-clock limit that every benchmark loop checks besides its count."""

    def __init__(self, seconds: float) -> None:
        self.expires = time.monotonic() + seconds

    def passed(self) -> bool:
        return time.monotonic() >= self.expires

    def remaining(self) -> float:
        return max(0.0, self.expires - time.monotonic())


class Stopwatch:
    """Wall-clock and CPU time (user + system, this process) since creation."""

    def __init__(self) -> None:
        self.wall_started = time.perf_counter()
        self.cpu_started = time.process_time()

    def elapsed(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall_started, time.process_time() - self.cpu_started


@dataclass(frozen=True)
class Sample:
    """One timed loop: ``size_bytes`` moved in ``seconds``; ``truncated`` if the deadline cut it.

    ``cpu_seconds`` is this process's user + system time over the loop. On a
    shared machine it leaves out the time other jobs held the CPU (though not
    slow page faults, which are charged to this process).
    """

    size_bytes: int
    records: int
    seconds: float
    cpu_seconds: float
    truncated: bool = False

    @property
    def megabytes_per_second(self) -> float:
        return self.size_bytes / MEGABYTE / self.seconds

    @property
    def megabytes_per_cpu_second(self) -> float:
        return self.size_bytes / MEGABYTE / max(self.cpu_seconds, 1e-9)

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds


@dataclass(frozen=True)
class Spread:
    median: float
    minimum: float
    maximum: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def describe_bytes(size_bytes: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f} {unit}".replace(".0 ", " ")
    return f"{size_bytes} B"


def command_output(arguments: list[str], lines_max: int | None = None) -> str:
    try:
        completed = subprocess.run(
            arguments, capture_output=True, text=True, check=False, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({shlex.join(arguments)} failed: {exc})"
    lines = completed.stdout.rstrip().splitlines()
    return "\n".join(lines[:lines_max] if lines_max else lines)


def invocation(script_file: str, argv: Sequence[str]) -> str:
    """The command line as typed from the repository root, for the report:
    ``python -m bench.<script>`` with the script's arguments."""
    interpreter = Path(sys.executable)
    if interpreter.is_relative_to(Path.cwd()):
        interpreter = interpreter.relative_to(Path.cwd())
    module = f"{Path(__file__).resolve().parent.name}.{Path(script_file).stem}"
    return shlex.join([str(interpreter), "-m", module, *argv])


def describe_machine(data_directory: Path) -> dict[str, str]:
    return {
        "nproc": command_output(["nproc"]),
        "lscpu": command_output(["lscpu"], LSCPU_LINES),
        "free -h": command_output(["free", "-h"]),
        f"df -h {data_directory}": command_output(["df", "-h", str(data_directory)]),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": platform.release(),
    }


def write_results(path: Path | None, command: str, runs: Sequence[Any]) -> None:
    """The runs (dataclasses), the command and the machine as JSON at ``path`` (if given)."""
    if path is None:
        return
    report = {
        "command": command,
        "machine": describe_machine(Path(tempfile.gettempdir())),
        "runs": [asdict(run) for run in runs],
    }
    path.write_text(json.dumps(report, indent=2))


def check_free_space(directory: Path, free_bytes_min: int) -> None:
    free_bytes = shutil.disk_usage(directory).free
    if free_bytes < free_bytes_min:
        raise SystemExit(
            f"refusing to run: {directory} has {free_bytes / GIGABYTE:.1f} GB free, "
            f"this benchmark wants at least {free_bytes_min / GIGABYTE:.0f} GB "
            "(use --quick, another --data-dir, or --free-gb-min)"
        )


def format_spread(spread: Spread, digits: int = 0) -> str:
    return (
        f"{spread.median:,.{digits}f} ({spread.minimum:,.{digits}f}-{spread.maximum:,.{digits}f})"
    )


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines.insert(1, "|" + "|".join(" --- " for _ in rows[0]) + "|")
    return "\n".join(lines)


# ---------------------------------------------------------------- the page-view workload


class PageViewed(Event, type="benchviews.page_viewed", version=1, key="user_id"):
    """A user viewed a page for ``duration_ms``."""

    user_id: str
    url: str
    duration_ms: int


metadata = MetaData()

page_stats = projection_table(
    "bench_page_stats",
    metadata,
    Column("url", String(KEY_LENGTH), primary_key=True),
    merge_column("views", BigInteger, Count()),
    merge_column("total_duration_ms", BigInteger, Sum()),
    merge_column("longest_ms", Integer, Max()),
    merge_column("first_seen", DateTime(timezone=True), Min()),
    merge_column("last_seen", DateTime(timezone=True), Max()),
    merge_column("last_user", String(KEY_LENGTH), Latest()),
)

user_stats = projection_table(
    "bench_user_stats",
    metadata,
    Column("user_id", String(KEY_LENGTH), primary_key=True),
    merge_column("views", BigInteger, Count()),
    merge_column("total_duration_ms", BigInteger, Sum()),
    merge_column("first_url", String(KEY_LENGTH), First()),
    merge_column("last_url", String(KEY_LENGTH), Latest()),
    merge_column("last_seen", DateTime(timezone=True), Max()),
)


def page_view_projection(group_id: str) -> Projection:
    """The projection, with its own consumer group (a fresh one per repetition)."""
    pages, users = page_stats, user_stats

    def page_view_rows(envelope: Envelope[PageViewed]) -> Iterator[Row]:
        view, seen = envelope.event, envelope.occurred_at
        yield Row(
            pages,
            url=view.url,
            total_duration_ms=view.duration_ms,
            longest_ms=view.duration_ms,
            first_seen=seen,
            last_seen=seen,
            last_user=view.user_id,
        )
        yield Row(
            users,
            user_id=view.user_id,
            total_duration_ms=view.duration_ms,
            first_url=view.url,
            last_url=view.url,
            last_seen=seen,
        )

    projection = Projection("bench.page_views", tables=[pages, users], group_id=group_id)
    projection.on(PageViewed)(page_view_rows)
    return projection


def page_views(count: int) -> list[PageViewed]:
    """``count`` views: uniform users, URLs of Zipf-like popularity, fixed seed."""
    return [view for chunk in page_view_chunks(count, max(count, 1)) for view in chunk]


def page_view_chunks(count: int, size: int) -> Iterator[list[PageViewed]]:
    """``count`` views in lists of at most ``size``, drawn one list at a time.

    The first list is ``page_views(size)``; later lists continue the same
    random sequence, so no more than ``size`` views are held at once.
    """
    generator = random.Random(SEED)
    urls = [f"/articles/{index:05d}" for index in range(URLS)]
    weights = [1 / (rank + 1) for rank in range(URLS)]
    for start in range(0, count, size):
        chosen = generator.choices(urls, weights, k=min(size, count - start))
        yield [
            PageViewed(
                user_id=f"user-{generator.randrange(USERS):05d}",
                url=url,
                duration_ms=generator.randrange(DURATION_MS_MAX),
            )
            for url in chosen
        ]
