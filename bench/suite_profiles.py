"""The suite's profiles: a step of one of our systems again under py-spy, on the brokers
and on the client processes, folded into the functions where the time goes, and a
one-line verdict on whether the broker or the client was the limit."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.peers import System, cpu_seconds
from bench.suite_steps import Plan, run_clients, run_latency

PROFILE_RATE_HZ = 250
PROFILE_TOP = 8
IDLE_FRAMES = ("EpollIOManager.get_events (", "select (", "epoll (")
"""Frames where a process waits for I/O: counted apart from its own time."""
SATURATED = 0.8
"""Broker CPU seconds per wall second from which a step counts as broker-bound."""


class Profiler:
    """py-spy recording processes by pid, folded into own-time shares per function."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.recorders: dict[str, list[tuple[Path, subprocess.Popen[bytes]]]] = {}

    def record(self, group: str, pids: Sequence[int]) -> None:
        py_spy = Path(sys.executable).with_name("py-spy")
        for pid in pids:
            output = self.scratch / f"profile-{group}-{pid}.txt"
            recorder = subprocess.Popen(
                [str(py_spy), "record", "--pid", str(pid), "--rate", str(PROFILE_RATE_HZ),
                 "--format", "raw", "--output", str(output), "--nonblocking"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            self.recorders.setdefault(group, []).append((output, recorder))

    def finish(self) -> dict[str, Any]:
        """Stop every recorder; per group, its sample count and hottest functions."""
        folded = {}
        for group, recorders in self.recorders.items():
            own: Counter[str] = Counter()
            for output, recorder in recorders:
                recorder.send_signal(signal.SIGINT)
                try:
                    recorder.wait(60)
                except subprocess.TimeoutExpired:
                    recorder.kill()
                    recorder.wait(10)
                if output.exists():
                    for line in output.read_text().splitlines():
                        stack, _, count = line.rpartition(" ")
                        if stack and count.isdigit():
                            own[short_frame(stack.split(";")[-1])] += int(count)
            waiting = sum(count for name, count in own.items() if name.startswith(IDLE_FRAMES))
            for name in [name for name in own if name.startswith(IDLE_FRAMES)]:
                del own[name]
            total = sum(own.values())
            folded[group] = {
                "samples": total,
                "waiting_share": waiting / max(1, waiting + total),
                "top": [
                    {"function": name, "share": count / total}
                    for name, count in own.most_common(PROFILE_TOP)
                ],
            }
        return folded


def profile_step(
    system: System, role: str, value_bytes: int, records: int, processes: int, scratch: Path
) -> dict[str, Any]:
    """One throughput step of ``system`` again, with py-spy on the server and the clients."""
    streams = [f"profile-{role}-{value_bytes}-{i}" for i in range(processes)]
    system.create(streams)
    if role == "consume":
        run_clients(system, "produce", streams, value_bytes, records // processes)
    profiler = Profiler(scratch)
    profiler.record("server", system.pids())
    sample = run_clients(system, role, streams, value_bytes, records // processes, profiler)
    folded = profiler.finish()
    system.delete(streams)
    return {
        "system": system.name,
        "role": role,
        "value_bytes": value_bytes,
        "processes": processes,
        "records_per_second": sample["records"] / sample["seconds"],
        "server_busy": sample["server_cpu_seconds"] / sample["seconds"],
        **folded,
    }


def profile_latency(system: System, plan: Plan, scratch: Path) -> dict[str, Any]:
    """One latency run of ``system`` again, with py-spy on the server and the clients."""
    stream = "profile-latency"
    system.create([stream])
    profiler = Profiler(scratch)
    profiler.record("server", system.pids())
    pids = system.pids()
    cpu_before, began = cpu_seconds(pids), time.monotonic()
    sample = run_latency(system, plan, stream, profiler)
    busy = (cpu_seconds(pids) - cpu_before) / (time.monotonic() - began)
    folded = profiler.finish()
    system.delete([stream])
    return {
        "system": system.name,
        "role": "latency",
        "value_bytes": 1000,
        "processes": 1,
        "p99_ms": sample["p99_ms"],
        "server_busy": busy,
        **folded,
    }


def verdict(profile: dict[str, Any]) -> str:
    """The bottleneck a profile points at, in one sentence."""
    busy = profile["server_busy"]
    server = profile["server"]["top"][:1]
    clients = profile.get("clients", {}).get("top", [])[:1]
    hottest = f"`{server[0]['function']}`" if server else "nothing in particular"
    if profile["role"] == "latency":
        return (
            f"At this rate the broker side is busy {busy:.2f} of a core; a record's time "
            f"there goes first to {hottest}."
        )
    if busy >= SATURATED:
        return (
            f"Bottleneck: the broker side, busy {busy:.2f} of a core (its event loop runs on "
            f"one); its hottest function is {hottest}."
        )
    elsewhere = f"`{clients[0]['function']}`" if clients else "the client"
    return (
        f"Bottleneck: not the broker, busy only {busy:.2f} of a core; the client processes "
        f"spend most of their samples in {elsewhere}."
    )


def short_frame(frame: str) -> str:
    """``function (path/to/module.py:line)`` as ``function (module.py)``."""
    name, _, location = frame.partition(" (")
    path = location.rstrip(")").rsplit(":", 1)[0]
    parts = Path(path).parts
    shown = "/".join(parts[-2:]) if parts else path
    return f"{name} ({shown})"
