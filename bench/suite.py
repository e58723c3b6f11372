"""The benchmark suite: our broker beside Redis Streams, NATS JetStream and RabbitMQ Streams,
and against this machine's disk and loopback limits, in one run on one machine.

``make bench`` runs the whole suite (at most 30 minutes) and rewrites the generated
section of ``docs/benchmarks.md`` and ``docs/benchmarks.json``; ``make bench-quick``
is a smoke run of under 3 minutes that writes its report under ``build/bench-quick/``.

Sections, in the order they run:

1. **Limits**: sequential write and read of the data disk (fio, O_DIRECT, 1 MiB
   blocks) and loopback TCP throughput (iperf3, one stream).
2. **Throughput**: for 1 KB and 100 B records, with 1, 2 and 4 producer processes
   (then as many consumer processes), each system receives the same total count of
   records, split evenly over one stream per process; then the same number of
   consumer processes reads them back. The systems run in turn (A B C D E, A B C D
   E, ...) for each repetition. Medians with min-max spreads.
3. **Latency**: one producer process sends 1 KB records at a constant rate well below
   every system's saturation, stamping each with its intended send time; one consumer
   process takes receive time minus that stamp (no coordinated omission).
4. **Scaling** of our broker: partitions, idle partitions' memory, retained data and
   restart after SIGKILL (``bench/scaling.py``).
5. **Profiles**: for each throughput figure, and the p99 latency, where one of our two
   systems trails the best peer, that workload runs again for it under py-spy (on the
   brokers and on the clients), and the report names the functions where the time goes
   and whether the broker or the client was the limit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.harness import describe_machine, invocation, progress
from bench.peers import System, all_systems, rabbit_stream_available
from bench.suite_profiles import profile_latency, profile_step
from bench.suite_report import render, summarize, trailing, trailing_latency, validate, write_report
from bench.suite_steps import (
    FULL,
    QUICK,
    Plan,
    measure_disk,
    measure_idle_cpu,
    measure_latency,
    measure_loopback,
    measure_throughput,
)

REPOSITORY = Path(__file__).resolve().parent.parent


def git_commit() -> str:
    completed = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPOSITORY
    )
    return completed.stdout.strip() or "unknown"


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the smoke plan (under 3 minutes)")
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the scratch folder")
    parser.add_argument(
        "--markdown", type=Path, default=None, help="report file whose generated section to rewrite"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the raw results here")
    parser.add_argument("--skip-scaling", action="store_true", help="leave out the scaling section")
    parser.add_argument("--only", nargs="*", default=None, help="run only these systems (by name)")
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        help="measure nothing: render the report again from an earlier run's --json file",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override one field of the plan, such as latency_seconds=30 or processes=1,2",
    )
    return parser.parse_args(argv)


def with_overrides(plan: Plan, settings: Sequence[str]) -> Plan:
    """``plan`` with ``FIELD=VALUE`` settings applied, each parsed as its field's type."""
    changes: dict[str, Any] = {}
    for setting in settings:
        name, _, text = setting.partition("=")
        current = getattr(plan, name, None)
        if current is None or not text:
            raise SystemExit(f"--set {setting!r}: expected FIELD=VALUE with a field of the plan")
        try:
            if isinstance(current, tuple):
                changes[name] = tuple(int(part) for part in text.split(","))
            else:
                changes[name] = type(current)(text)
        except ValueError as exc:
            raise SystemExit(f"--set {setting!r}: {exc}") from None
    return replace(plan, **changes)


def main(argv: Sequence[str]) -> None:
    arguments = parse_arguments(argv)
    if arguments.from_json:
        publish(json.loads(arguments.from_json.read_text()), arguments)
        return
    plan = with_overrides(QUICK if arguments.quick else FULL, arguments.set)
    # A SIGTERM unwinds like an error, so that the servers this run started are stopped.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    began = time.monotonic()
    systems = all_systems()
    skipped: list[str] = []
    if arguments.only:
        unknown = set(arguments.only) - {system.name for system in systems}
        if unknown:
            known = ", ".join(system.name for system in systems)
            raise SystemExit(f"--only: no system named {', '.join(sorted(unknown))} ({known})")
        systems = [system for system in systems if system.name in arguments.only]
    unavailable = rabbit_stream_available()
    if unavailable and any(system.name == "rabbitmq" for system in systems):
        if os.environ.get("CI") == "true":
            raise SystemExit(f"CI runs every peer: {unavailable}")
        skipped.append(unavailable)
        systems = [system for system in systems if system.name != "rabbitmq"]
    scratch = Path(tempfile.mkdtemp(prefix="bench-suite-", dir=arguments.data_dir))
    try:
        results: dict[str, Any] = {
            "command": invocation(__file__, argv),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "commit": git_commit(),
            "plan": asdict(plan),
            "machine": describe_machine(scratch),
            "skipped": skipped,
            "only": arguments.only,
        }
        measure(results, systems, plan, scratch)
        if not arguments.skip_scaling:
            from bench.scaling import SCALING_FULL, SCALING_QUICK, run_scaling
            from bench.scaling_report import scaling_markdown

            folder = scratch / "scaling"
            folder.mkdir()
            plan_of_scaling = SCALING_QUICK if arguments.quick else SCALING_FULL
            results["scaling"] = run_scaling(plan_of_scaling, folder)
            results["scaling_markdown"] = scaling_markdown(results["scaling"])
            results["summary"] = summarize(results)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["elapsed_s"] = time.monotonic() - began
    publish(results, arguments)


def measure(results: dict[str, Any], systems: Sequence[System], plan: Plan, scratch: Path) -> None:
    """Limits, then every system's throughput and latency, then the profiles of where
    ours trail. A server that exited during a failed step is reported with its log."""
    started: list[System] = []
    try:
        progress("limits: disk (fio) and loopback (iperf3)")
        results["limits"] = {
            **measure_disk(scratch, plan.fio_size_mb),
            **measure_loopback(plan.iperf_seconds),
        }
        for system in systems:
            progress(f"starting {system.label}")
            system.start(scratch)
            started.append(system)
        results["systems"] = [
            {
                "name": s.name,
                "label": s.label,
                "durability": s.durability,
                "client": s.client,
                "version": s.version(),
            }
            for s in systems
        ]
        results["idle_cpu_percent"] = measure_idle_cpu(systems, 5.0 if plan.name == "full" else 1.0)
        results["throughput"] = measure_throughput(systems, plan)
        results["latency"] = measure_latency(systems, plan)
        results["summary"] = summarize(results)
        by_name = {system.name: system for system in systems}
        results["profiles"] = []
        for name, figure in trailing(results["summary"]):
            progress(f"profiling {by_name[name].label}: {figure['role']} {figure['value_bytes']} B")
            processes = figure["systems"][name]["processes"]
            results["profiles"].append(
                profile_step(
                    by_name[name],
                    figure["role"],
                    figure["value_bytes"],
                    plan.profile_records,
                    processes,
                    scratch,
                )
            )
        for name in trailing_latency(results["summary"]):
            progress(f"profiling {by_name[name].label}: latency")
            results["profiles"].append(profile_latency(by_name[name], plan, scratch))
    except BaseException:
        for system in started:
            for line in system.exited():
                print(line, file=sys.stderr)
        raise
    finally:
        for system in started:
            system.stop()


def publish(results: dict[str, Any], arguments: argparse.Namespace) -> None:
    """Print the report, write the JSON and the report's section, then check them."""
    markdown = render(results)
    print(markdown)
    if arguments.json and arguments.json != arguments.from_json:
        arguments.json.parent.mkdir(parents=True, exist_ok=True)
        arguments.json.write_text(json.dumps(results, indent=2))
    if arguments.markdown:
        write_report(markdown, arguments.markdown)
    problems = validate(results, markdown)
    if problems:
        raise SystemExit("the run's report is incomplete:\n- " + "\n- ".join(problems))


if __name__ == "__main__":
    main(sys.argv[1:])
