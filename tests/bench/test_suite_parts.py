"""The benchmark suite's own logic: the constant-rate schedule, the latency account, plan
overrides, the generated report section and the check of a finished run's report.

The suite itself runs in CI as ``make bench-quick`` against real servers; these tests
hold its arithmetic to what its report claims."""

from __future__ import annotations

import multiprocessing
import subprocess
import threading
import time
from pathlib import Path

import pytest

from bench.clients import Latencies, Schedule
from bench.peers import PRIME, STOP, System
from bench.suite import with_overrides
from bench.suite_report import BEGIN, END, validate, write_report
from bench.suite_steps import QUICK, Children


def test_a_late_sender_gets_every_due_record_stamped_with_its_intended_time() -> None:
    schedule = Schedule(rate=1_000, seconds=1.0, value_bytes=100)
    time.sleep(0.05)  # the sender stalls for 50 intervals
    due = schedule.due()
    assert len(due) >= 50, "records that fell due during the stall were skipped"
    stamps = [int.from_bytes(value[:8], "big") for value in due]
    assert stamps == [schedule.started_ns + i * schedule.interval_ns for i in range(len(due))]
    assert all(len(value) == 100 for value in due)


def test_the_schedule_sends_its_total_and_no_more() -> None:
    schedule = Schedule(rate=10_000, seconds=0.05, value_bytes=16)
    sent = 0
    while not schedule.finished:
        sent += len(schedule.due())
    assert sent == schedule.total == 500


def test_latency_counts_from_the_intended_time_after_the_warm_up() -> None:
    primed = threading.Event()
    latencies = Latencies(primed)
    assert latencies.record(PRIME) and primed.is_set()
    first = time.time_ns() - 5_000_000_000
    assert latencies.record(first.to_bytes(8, "big") + b"x")
    assert latencies.values_us == [], "the first second after the first record is a warm-up"
    late = time.time_ns() - 2_000_000_000
    latencies.warm_until_ns = late
    assert latencies.record(late.to_bytes(8, "big") + b"x")
    assert latencies.values_us and latencies.values_us[0] >= 2_000_000
    assert not latencies.record(STOP)


def test_plan_overrides_take_the_fields_types_and_refuse_unknown_fields() -> None:
    plan = with_overrides(QUICK, ["latency_seconds=7.5", "processes=1,2", "repetitions=2"])
    assert (plan.latency_seconds, plan.processes, plan.repetitions) == (7.5, (1, 2), 2)
    with pytest.raises(SystemExit, match="field of the plan"):
        with_overrides(QUICK, ["latency=3"])
    with pytest.raises(SystemExit, match="invalid literal"):
        with_overrides(QUICK, ["repetitions=many"])


def test_the_generated_section_is_replaced_and_the_rest_kept(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    report.write_text("# Benchmarks\n\n## Storage\n\nhand-written\n")
    write_report("first run\n", report)
    write_report("second run\n", report)
    text = report.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert "second run" in text and "first run" not in text
    assert text.index(END) < text.index("## Storage") and "hand-written" in text


def complete_results(names: tuple[str, ...]) -> dict[str, object]:
    return {
        "systems": [{"name": "eventplatform"}, {"name": "redis"}],
        "throughput": [
            {"system": name, "role": role, "value_bytes": size, "processes": 1,
             "records": 10, "seconds": 1.0}
            for name in names
            for role in ("produce", "consume")
            for size in (1000, 100)
        ],
        "latency": [
            {"system": name, "p50_ms": 1.0, "p99_ms": 2.0, "p999_ms": 3.0}
            for name in names
        ],
        "limits": {"disk_write_mb_s": 1.0, "disk_read_mb_s": 1.0, "loopback_mb_s": 1.0},
    }  # fmt: skip


MARKDOWN = "\n".join(
    ["### Throughput, best process count", "### End-to-end latency", "### Limits", "### Goals"]
)


def test_a_report_missing_a_system_measurement_or_section_is_refused() -> None:
    results = complete_results(("eventplatform", "redis"))
    results["systems"] = [{"name": "eventplatform"}, {"name": "redis"}]
    markdown = MARKDOWN
    assert validate(results, markdown) == []
    results["throughput"] = [s for s in results["throughput"] if s["system"] != "redis"]
    results["limits"]["loopback_mb_s"] = 0
    problems = validate(results, markdown.replace("### Goals", ""))
    assert any("redis" in problem for problem in problems)
    assert any("loopback" in problem for problem in problems)
    assert any("Goals" in problem for problem in problems)


def test_a_run_of_some_systems_is_whole_when_every_system_asked_for_ran() -> None:
    results = complete_results(("redis",))
    results["systems"] = [{"name": "redis"}]
    assert any("too few systems" in problem for problem in validate(results, MARKDOWN))
    results["only"] = ["redis"]
    assert validate(results, MARKDOWN) == []
    results["only"] = ["redis", "nats"]
    assert any("nats" in problem for problem in validate(results, MARKDOWN))


def test_a_failed_step_leaves_no_client_process_behind() -> None:
    context = multiprocessing.get_context("spawn")
    client = context.Process(target=time.sleep, args=(120,))
    started = time.monotonic()
    with pytest.raises(SystemExit), Children() as children:
        children.start(client)
        raise SystemExit("the step failed")
    assert not client.is_alive()
    assert time.monotonic() - started < 30, "the failed step waited for its client"


def test_a_server_that_exited_is_reported_with_the_end_of_its_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = System(name="s", label="A server", durability="", client="")
    server.logs = [log]
    server.processes = [subprocess.Popen(["sleep", "60"])]
    assert server.exited() == []
    with log.open("w") as output:
        server.processes.append(
            subprocess.Popen(["sh", "-c", "echo fatal: out of luck; exit 3"], stdout=output)
        )
        server.processes[-1].wait(30)
    found = server.exited()
    server.stop()
    assert "exited with 3" in found[0] and "fatal: out of luck" in found[1]
