"""Shared pieces of the benchmarks: bounded loops, timing, spreads, machine facts, tables.

Every benchmark script under ``bench/`` reports medians with min-max spreads,
checks a :class:`Deadline` besides its count in every loop, and records the
machine it ran on, because the machines these run on are usually shared.
"""

from __future__ import annotations

import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
MEGABYTE = 1_000_000
GIGABYTE = 1_000_000_000
LSCPU_LINES = 15


class Deadline:
    """A monotonic-clock limit that every benchmark loop checks besides its count."""

    def __init__(self, seconds: float) -> None:
        self.expires = time.monotonic() + seconds

    def passed(self) -> bool:
        return time.monotonic() >= self.expires


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
    """The command line as typed from the repository root, for the report."""
    interpreter = Path(sys.executable)
    if interpreter.is_relative_to(Path.cwd()):
        interpreter = interpreter.relative_to(Path.cwd())
    script = Path(script_file).resolve()
    if script.is_relative_to(Path.cwd()):
        script = script.relative_to(Path.cwd())
    return shlex.join([str(interpreter), str(script), *argv])


def describe_machine(data_directory: Path) -> dict[str, str]:
    return {
        "nproc": command_output(["nproc"]),
        "lscpu": command_output(["lscpu"], LSCPU_LINES),
        "free -h": command_output(["free", "-h"]),
        f"df -h {data_directory}": command_output(["df", "-h", str(data_directory)]),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": platform.release(),
    }


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
