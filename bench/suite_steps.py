"""The benchmark suite's steps: its plans, the machine's limits (fio, iperf3), and the
throughput and latency steps, each run by client processes of its own (see :mod:`suite`)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.clients import latency_consumer_process, latency_producer_process, throughput_worker
from bench.harness import MEGABYTE, Deadline, progress
from bench.peers import (
    START_TIMEOUT_S,
    STEP_TIMEOUT_S,
    System,
    cpu_seconds,
    free_port,
    resident_bytes,
)

if TYPE_CHECKING:
    from bench.suite_profiles import Profiler


@dataclass(frozen=True)
class Plan:
    name: str
    repetitions: int
    processes: tuple[int, ...]
    records_1kb: int
    records_100b: int
    latency_rate: int
    latency_seconds: float
    latency_repetitions: int
    fio_size_mb: int
    iperf_seconds: int
    profile_records: int


FULL = Plan(
    name="full",
    repetitions=3,
    processes=(1, 2, 4),
    records_1kb=200_000,
    records_100b=400_000,
    latency_rate=2_000,
    latency_seconds=15.0,
    latency_repetitions=2,
    fio_size_mb=2_048,
    iperf_seconds=5,
    profile_records=200_000,
)
QUICK = Plan(
    name="quick",
    repetitions=1,
    processes=(1,),
    records_1kb=20_000,
    records_100b=40_000,
    latency_rate=1_000,
    latency_seconds=4.0,
    latency_repetitions=1,
    fio_size_mb=128,
    iperf_seconds=1,
    profile_records=20_000,
)


def measure_disk(scratch: Path, size_mb: int) -> dict[str, float]:
    """Sequential O_DIRECT write, then read, of one file in 1 MiB blocks: MB/s each."""
    rates = {}
    for mode in ("write", "read"):
        completed = subprocess.run(
            [
                "fio", "--name=seq", f"--rw={mode}", "--bs=1M", f"--size={size_mb}M",
                "--direct=1", "--ioengine=psync", f"--directory={scratch}",
                "--output-format=json", "--end_fsync=1",
            ],
            capture_output=True, text=True, check=True, timeout=STEP_TIMEOUT_S,
        )  # fmt: skip
        job = json.loads(completed.stdout)["jobs"][0][mode]
        rates[mode] = job["bw_bytes"] / MEGABYTE
    for leftover in scratch.glob("seq.*"):
        leftover.unlink()
    return {"disk_write_mb_s": rates["write"], "disk_read_mb_s": rates["read"]}


def measure_loopback(seconds: int) -> dict[str, float]:
    port = free_port()
    server = subprocess.Popen(
        ["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL
    )
    try:
        deadline = Deadline(START_TIMEOUT_S)
        while True:
            completed = subprocess.run(
                ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"],
                capture_output=True, text=True, timeout=seconds + 60,
            )  # fmt: skip
            report = json.loads(completed.stdout or "{}")
            if "end" in report and "sum_received" in report["end"]:
                break
            if deadline.passed():
                raise SystemExit(f"iperf3 failed: {report.get('error', completed.stderr)}")
            time.sleep(0.1)
        bits = report["end"]["sum_received"]["bits_per_second"]
    finally:
        server.kill()
        server.wait()
    return {"loopback_mb_s": bits / 8 / MEGABYTE}


class Children:
    """The client processes of one step. On a normal exit each gets a minute to end; when
    the step fails, they are killed at once, so that none outlives it (a spawned child
    left running would hold the whole run open at exit, and keep talking to a server
    that is being stopped)."""

    def __init__(self) -> None:
        self.processes: list[multiprocessing.process.BaseProcess] = []

    def start(self, process: multiprocessing.process.BaseProcess) -> None:
        process.start()
        self.processes.append(process)

    def __enter__(self) -> Children:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        for process in self.processes:
            if kind is None:
                process.join(60)
            if process.is_alive():
                process.kill()
                process.join(10)


def run_clients(
    system: System,
    role: str,
    streams: Sequence[str],
    value_bytes: int,
    count: int,
    profiler: Profiler | None = None,
) -> dict[str, Any]:
    """``len(streams)`` client processes of ``role``, released together by a barrier.

    The step runs from the earliest start (a producer's release from the barrier, a
    consumer's first record, so that connecting is left out for every system alike)
    to the last process's end.
    """
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(streams) + 1)
    results = context.Queue()
    processes = [
        context.Process(
            target=throughput_worker,
            args=(system.name, role, system.endpoint, stream, value_bytes, count, barrier, results),
        )
        for stream in streams
    ]
    with Children() as children:
        for process in processes:
            children.start(process)
        pids = system.pids()
        # A worker that fails while starting breaks the barrier; its error is on the queue.
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(START_TIMEOUT_S)
        if profiler is not None:  # from the release on: the clients' start-up is not the step
            profiler.record("clients", [process.pid for process in processes if process.pid])
        cpu_before = cpu_seconds(pids)
        spans, errors = [], []
        for _ in streams:
            _stream, span, error = results.get(timeout=STEP_TIMEOUT_S + START_TIMEOUT_S)
            if error:
                errors.append(error)
            else:
                spans.append(span)
        cpu_used = cpu_seconds(pids) - cpu_before
        rss = resident_bytes(pids)
    if errors:
        raise SystemExit(f"{system.label} {role} failed: {errors[0]}")
    records = count * len(streams)
    return {
        "system": system.name,
        "role": role,
        "value_bytes": value_bytes,
        "processes": len(streams),
        "records": records,
        "seconds": max(end for _, end in spans) - min(start for start, _ in spans),
        "server_cpu_seconds": cpu_used,
        "server_rss_bytes": rss,
    }


def measure_throughput(systems: Sequence[System], plan: Plan) -> list[dict[str, Any]]:
    samples = []
    for value_bytes, total in ((1000, plan.records_1kb), (100, plan.records_100b)):
        for processes in plan.processes:
            for repetition in range(plan.repetitions):
                for system in systems:
                    streams = [
                        f"t{value_bytes}-p{processes}-r{repetition}-{i}" for i in range(processes)
                    ]
                    system.create(streams)
                    for role in ("produce", "consume"):
                        sample = run_clients(system, role, streams, value_bytes, total // processes)
                        sample["repetition"] = repetition
                        samples.append(sample)
                        rate = sample["records"] / sample["seconds"]
                        progress(
                            f"{system.label}: {role} {value_bytes} B x {processes} processes, "
                            f"repetition {repetition + 1}: {rate:,.0f} records/s"
                        )
                    system.delete(streams)
    return samples


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run_latency(
    system: System, plan: Plan, stream: str, profiler: Profiler | None = None
) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    ready, primed = context.Event(), context.Event()
    results = context.Queue()
    consumer = context.Process(
        target=latency_consumer_process,
        args=(system.name, system.endpoint, stream, plan.latency_seconds, ready, primed, results),
    )
    producer = context.Process(
        target=latency_producer_process,
        args=(
            system.name,
            system.endpoint,
            stream,
            plan.latency_rate,
            plan.latency_seconds,
            1000,
            primed,
            results,
        ),
    )
    outcome = {}
    with Children() as children:
        children.start(consumer)
        if not ready.wait(START_TIMEOUT_S):
            raise SystemExit(f"{system.label}: the latency consumer did not start")
        children.start(producer)
        if profiler is not None:  # once both are connected: their start-up is not the run
            primed.wait(START_TIMEOUT_S)
            profiler.record("clients", [p.pid for p in (consumer, producer) if p.pid])
        for _ in range(2):
            role, value, error = results.get(timeout=plan.latency_seconds + STEP_TIMEOUT_S)
            if error:
                raise SystemExit(f"{system.label}: latency {role} failed: {error}")
            outcome[role] = value
    latencies_us = outcome["consumer"]
    expected = int(plan.latency_rate * (plan.latency_seconds - 1.0))
    if len(latencies_us) < 0.9 * expected:
        raise SystemExit(
            f"{system.label}: only {len(latencies_us)} of about {expected} records arrived"
        )
    return {
        "system": system.name,
        "sent": outcome["producer"],
        "count": len(latencies_us),
        "p50_ms": percentile(latencies_us, 0.50) / 1000,
        "p99_ms": percentile(latencies_us, 0.99) / 1000,
        "p999_ms": percentile(latencies_us, 0.999) / 1000,
        "max_ms": max(latencies_us) / 1000,
    }


def measure_latency(systems: Sequence[System], plan: Plan) -> list[dict[str, Any]]:
    samples = []
    for repetition in range(plan.latency_repetitions):
        for system in systems:
            stream = f"latency-r{repetition}"
            system.create([stream])
            sample = run_latency(system, plan, stream)
            sample["repetition"] = repetition
            samples.append(sample)
            system.delete([stream])
            progress(
                f"{system.label}: latency at {plan.latency_rate}/s, p50 {sample['p50_ms']:.2f} ms, "
                f"p99 {sample['p99_ms']:.2f} ms, p99.9 {sample['p999_ms']:.2f} ms"
            )
    return samples


def measure_idle_cpu(systems: Sequence[System], seconds: float) -> dict[str, float]:
    """Each server's CPU share while nothing is sent to any, in percent of one core."""
    before = {system.name: cpu_seconds(system.pids()) for system in systems}
    time.sleep(seconds)
    return {
        system.name: 100 * (cpu_seconds(system.pids()) - before[system.name]) / seconds
        for system in systems
    }
