"""Correction benchmark: how fast one projection runner applies correcting events, beside
ordinary events, and how long a bulk retraction takes, on SQLite and on PostgreSQL.

The workload is sensor readings. ``Reading(sensor_id, value, at)`` events, keyed by
sensor, ``--events`` of them over ``--keys`` sensors (sensor and value drawn with a fixed
seed, so every run appends the same events), go to a topic of ``--partitions``
partitions on a ``platform serve`` broker. Three projections fold them, each into one
table keyed by sensor, each in runs of its own:

* ``invertible``: a count and the sum of the values (Count, Sum): a correction
  negates the old contribution and applies the new one;
* ``non-invertible``: a count and the highest, lowest, latest and first value (Count,
  Max, Min, Latest, First): a correction recomputes the sensor's row from the events
  its event index holds;
* ``fold``: a count and an exponentially weighted mean of the values (Count and a
  ``Fold``): a correction re-folds the sensor's events in log order. It is reported
  apart from the non-invertible table, against the same goal.

Three correction scenarios, each a list of ``Correction`` events:

* ``spread``: ``--corrections`` replacements of events drawn uniformly from all the
  events, so across all sensors. A replacement keeps the sensor and the time and
  changes the value; an event drawn again is corrected again (the correction names
  the original, and the later one decides its value);
* ``hot``: as many replacements, of events drawn from the events of ``--hot-keys``
  sensors only;
* ``bulk``: retractions of the first ``--retract`` events in log order (by default
  every event: a day of traffic retracted). Its goal is to finish within 30 s.

Each run (scenario, projection, database, repetition) starts a broker on a fresh data
directory (killed at the end), a fresh database (a new SQLite file, or a new
PostgreSQL database created and dropped on the server of ``--postgres``, migrated with
``upgrade`` and given the projection's table) and a projection with a name, so a
consumer group, of its own. It has two phases, each timed by the runner's
``on_assign`` and ``on_commit`` callbacks:

1. ordinary: the events are appended, then a ``ProjectionRunner`` (default batch
   size) applies them; the clock runs from the group's assignment to the commit that
   brings the runner's count to the number of events, and the runner stops there;
2. corrections: the scenario's corrections are appended (each to its original's
   partition, after every ordinary event), then a second runner of the same
   projection and store, in the same process, goes on from the checkpoints the first
   left; the clock runs from its assignment to the commit of the last correction.

The corrections are appended only once the ordinary events are applied because a
runner reads its partitions interleaved, a fetch of each at a time: corrections at the
end of one partition would otherwise be applied among the ordinary events of the
others, and neither phase would time one kind of event. So no batch mixes the two.

Reported per scenario, projection and database: ordinary events per second,
corrections per second, their ratio (corrections/s over events/s, run by run), the
runner process's CPU time (user + system, ``time.process_time`` over the phase) per
event and per correction, and how long the corrections phase took. Each figure is
the median over ``--repeat`` runs, with the min-max. The goals: a ratio of at least
0.5 on the invertible table and 0.2 on the non-invertible one (and on the fold
table), and a bulk retraction done within 30 s. In small runs (``--quick``) fixed
waits weigh most (the first fetch, a poll that waits for a batch to fill), so they
check that everything works more than they measure rates.

The runners run in a child process, so a phase that outlasts ``--step-timeout`` (the
ordinary phase's counted from the process's start) can be cut short: a batch is one
transaction, and a runner looks at its stop flag only between batches, so the process
is killed. Such a run reports what was committed by
then (a batch in flight counts nothing) over the time elapsed, is marked "timed out
after N of M", and the benchmark goes on.

After each run the table is compared, row by row, with the rows this script folds in
Python from the corrected history (it knows every value and every replacement):
counts, sums, extremes, latest and first values, weighted means; after a bulk
retraction of every event no row remains. No event may be parked. A mismatch stops
the benchmark (SystemExit); a timed-out run skips the check, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from bench.correction_workload import (
    SEED,
    TABLES,
    CorrectionPlan,
    Reading,
    check_table,
    corrections_of,
    expected_rows,
    make_readings,
    metadata,
    reading_projection,
    replacements,
    sensor_names,
)
from bench.harness import (
    BrokerProcess,
    Deadline,
    Spread,
    describe_machine,
    format_spread,
    invocation,
    markdown_table,
    progress,
)
from bench.projections import fresh_database
from eventplatform.events import Event, EventProducer, EventRef
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.migrate import upgrade
from eventplatform.projections.runner import ProjectionRunner, RunnerStats
from eventplatform.projections.store import ProjectionStore

EVENTS_DEFAULT = 100_000
KEYS_DEFAULT = 100
CORRECTIONS_DEFAULT = 10_000
HOT_KEYS_DEFAULT = 5
RETRACT_DEFAULT = 100_000
REPEAT_DEFAULT = 3
PARTITIONS_DEFAULT = 4
STEP_TIMEOUT_S = 300.0
QUICK = {
    "events": 5_000,
    "keys": 50,
    "corrections": 500,
    "retract": 5_000,
    "repeat": 1,
    "step_timeout": 60.0,
}
PROJECTIONS = ("invertible", "non-invertible", "fold")
SCENARIOS = ("spread", "hot", "bulk")
DATABASES = ("sqlite", "postgresql")
POSTGRES_ADMIN_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
GOAL_RATIO = {"invertible": 0.5, "non-invertible": 0.2, "fold": 0.2}
GOAL_BULK_S = 30.0
APPEND_CHUNK = 5_000
POLL_S = 1.0
STOP_TIMEOUT_S = 30.0


# ---------------------------------------------------------------- the workload
@dataclass(frozen=True)
class Workload:
    readings: list[Reading]
    corrections: dict[str, CorrectionPlan]


def correction_plan(
    scenario: str, readings: Sequence[Reading], plan: Plan, generator: random.Random
) -> CorrectionPlan:
    if scenario == "bulk":
        return [(index, None) for index in range(plan.retract)]
    if scenario == "spread":
        return replacements(
            readings, generator.choices(range(len(readings)), k=plan.corrections), generator
        )
    hot = set(generator.sample(sensor_names(plan.keys), plan.hot_keys))
    candidates = [index for index, reading in enumerate(readings) if reading.sensor_id in hot]
    return replacements(readings, generator.choices(candidates, k=plan.corrections), generator)


def make_workload(plan: Plan) -> Workload:
    readings = make_readings(plan.events, plan.keys)
    corrections = {
        scenario: correction_plan(scenario, readings, plan, random.Random(SEED + number))
        for number, scenario in enumerate(SCENARIOS, start=1)
        if scenario in plan.scenarios
    }
    return Workload(readings, corrections)


# ---------------------------------------------------------------- the runner's process


def runner_process(
    url: str,
    bootstrap: str,
    kind: str,
    name: str,
    targets: tuple[int, int],
    connection: Connection,
) -> None:
    """Run a runner until it has committed ``targets[0]`` records, then, told "go", a second
    runner of the same projection and store until it has committed ``targets[1]``.

    Each assignment and commit is sent to the parent with this process's clocks.
    """
    engine = create_store_engine(url)
    try:
        store = ProjectionStore(engine, reading_projection(kind, name))
        for phase, target in enumerate(targets):
            if phase:
                try:
                    if connection.recv() != "go":
                        return
                except EOFError:
                    return
            run_until(store, bootstrap, target, connection)
    finally:
        engine.dispose()


def run_until(store: ProjectionStore, bootstrap: str, target: int, connection: Connection) -> None:
    stop = threading.Event()
    assigned = threading.Event()

    def on_assign(_partitions: list[tuple[str, int]]) -> None:
        if not assigned.is_set():
            assigned.set()
            connection.send(("assigned", time.perf_counter(), time.process_time()))

    def on_commit(stats: RunnerStats) -> None:
        connection.send(
            ("commit", time.perf_counter(), time.process_time(), stats.events, stats.parked)
        )
        if stats.events >= target:
            stop.set()

    runner = ProjectionRunner(store, bootstrap, on_assign=on_assign, on_commit=on_commit)
    runner.run(stop)


@dataclass(frozen=True)
class Phase:
    """One phase of a run: ``applied`` of ``target`` records committed in ``seconds``."""

    target: int
    applied: int
    seconds: float
    cpu_seconds: float
    parked: int
    timed_out: bool

    @property
    def rate(self) -> float:
        return self.applied / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us(self) -> float:
        return self.cpu_seconds / self.applied * 1e6 if self.applied else math.nan

    def status(self) -> str:
        return f"timed out after {self.applied:,} of {self.target:,}" if self.timed_out else ""


def watch_phase(
    connection: Connection, process: BaseProcess, target: int, timeout_s: float
) -> Phase:
    """The phase as the runner's messages tell it, until ``target`` or the deadline."""
    deadline = Deadline(timeout_s)
    waiting_since = time.perf_counter()
    started: tuple[float, float] | None = None
    applied = parked = 0
    cpu_last: float | None = None
    while not deadline.passed():
        if not connection.poll(min(deadline.remaining(), POLL_S)):
            if not process.is_alive():
                break
            continue
        try:
            message = connection.recv()
        except EOFError:
            break
        if message[0] == "assigned":
            started = started or (message[1], message[2])
            continue
        _, wall, cpu, applied, parked = message
        cpu_last = cpu
        if applied >= target and started is not None:
            return Phase(target, applied, wall - started[0], cpu - started[1], parked, False)
    if not process.is_alive():
        raise SystemExit(
            f"the runner process exited (code {process.exitcode}) "
            f"with {applied:,} of {target:,} records applied"
        )
    wall_started = started[0] if started is not None else waiting_since
    cpu_seconds = cpu_last - started[1] if started is not None and cpu_last is not None else 0.0
    return Phase(target, applied, time.perf_counter() - wall_started, cpu_seconds, parked, True)


# ---------------------------------------------------------------- databases


# ---------------------------------------------------------------- a run


@dataclass(frozen=True)
class Plan:
    events: int
    keys: int
    corrections: int
    hot_keys: int
    retract: int
    repeat: int
    partitions: int
    databases: tuple[str, ...]
    projections: tuple[str, ...]
    scenarios: tuple[str, ...]
    step_timeout_s: float


@dataclass(frozen=True)
class Sample:
    """One run: its two phases (no corrections phase if the ordinary one timed out)."""

    scenario: str
    projection: str
    database: str
    ordinary: Phase
    corrections: Phase | None
    check: str

    @property
    def timed_out(self) -> bool:
        return self.corrections is None or self.ordinary.timed_out or self.corrections.timed_out

    @property
    def ratio(self) -> float | None:
        if self.corrections is None or self.ordinary.rate == 0:
            return None
        return self.corrections.rate / self.ordinary.rate

    def status(self) -> str:
        if self.corrections is None:
            return f"ordinary phase {self.ordinary.status()}"
        return self.corrections.status() or self.ordinary.status() or self.check


def append_events(
    producer: EventProducer, events: Sequence[Event], timeout_s: float
) -> list[EventRef]:
    deadline = Deadline(timeout_s)
    refs: list[EventRef] = []
    for start in range(0, len(events), APPEND_CHUNK):
        if deadline.passed():
            raise SystemExit(f"appending ran out of time after {start:,} of {len(events):,}")
        refs += producer.append(events[start : start + APPEND_CHUNK])
    return refs


def run_once(
    plan: Plan,
    workload: Workload,
    scenario: str,
    kind: str,
    database: str,
    admin_url: str,
    scratch: Path,
) -> Sample:
    """One run on a fresh database and broker; checks the table unless a phase timed out."""
    readings, correction_list = workload.readings, workload.corrections[scenario]
    label = f"{scenario} {kind} {database}"
    with fresh_database(database, admin_url, scratch) as url:
        engine = create_store_engine(url)
        try:
            upgrade(engine)
            metadata.create_all(engine, tables=[TABLES[kind]])
            ordinary, corrections = run_phases(plan, url, kind, readings, correction_list, scratch)
            if corrections is None or ordinary.timed_out or corrections.timed_out:
                check = "check skipped (timed out)"
            else:
                if ordinary.parked or corrections.parked:
                    raise SystemExit(
                        f"{label}: {ordinary.parked + corrections.parked} records parked"
                    )
                check_table(engine, kind, expected_rows(kind, readings, correction_list), label)
                check = "checked"
        finally:
            engine.dispose()
    return Sample(scenario, kind, database, ordinary, corrections, check)


def run_phases(
    plan: Plan,
    url: str,
    kind: str,
    readings: Sequence[Reading],
    correction_list: CorrectionPlan,
    scratch: Path,
) -> tuple[Phase, Phase | None]:
    """Append the events, time the runner over them; append the corrections, time them."""
    run_id = uuid.uuid4().hex[:10]
    log_directory = scratch / f"log-{run_id}"
    overrides = [f"num.partitions={plan.partitions}", "group.initial.rebalance.delay.ms=0"]
    broker = BrokerProcess(log_directory, overrides=overrides).start()
    context = multiprocessing.get_context("spawn")
    process: BaseProcess | None = None
    corrections: Phase | None = None
    try:
        with EventProducer(broker.bootstrap) as producer:
            refs = append_events(producer, readings, plan.step_timeout_s)
            ours, theirs = context.Pipe()
            targets = (len(readings), len(correction_list))
            process = context.Process(
                target=runner_process,
                args=(url, broker.bootstrap, kind, f"bench.corrections.{run_id}", targets, theirs),
                name=f"bench-corrections-{run_id}",
                daemon=True,
            )
            process.start()
            theirs.close()
            ordinary = watch_phase(ours, process, targets[0], plan.step_timeout_s)
            if not ordinary.timed_out:
                appended = corrections_of(readings, refs, correction_list)
                append_events(producer, appended, plan.step_timeout_s)
                ours.send("go")
                corrections = watch_phase(ours, process, targets[1], plan.step_timeout_s)
        if corrections is not None and not corrections.timed_out:
            process.join(STOP_TIMEOUT_S)  # the second runner stops after its last commit
    finally:
        if process is not None and process.is_alive():
            process.kill()  # a timed-out runner is inside a batch: cut it short
            process.join(STOP_TIMEOUT_S)
        broker.kill()
        shutil.rmtree(log_directory, ignore_errors=True)
    return ordinary, corrections


def measure(plan: Plan, workload: Workload, admin_url: str, scratch: Path) -> list[Sample]:
    samples = []
    for scenario in plan.scenarios:
        for kind in plan.projections:
            for database in plan.databases:
                for repetition in range(plan.repeat):
                    sample = run_once(plan, workload, scenario, kind, database, admin_url, scratch)
                    samples.append(sample)
                    corrections = sample.corrections
                    progress(
                        f"{scenario} {kind} {database} repetition {repetition + 1}: "
                        f"{sample.ordinary.rate:,.0f} events/s, "
                        + (
                            f"{corrections.rate:,.1f} corrections/s in {corrections.seconds:,.1f} s"
                            if corrections is not None
                            else "no corrections phase"
                        )
                        + f" ({sample.status()})"
                    )
    return samples


# ---------------------------------------------------------------- report


def rate_spread(values: Sequence[float]) -> str:
    spread = Spread.of(values)
    return format_spread(spread, 1 if spread.median < 100 else 0)


def goal_of(scenario: str, kind: str) -> str:
    if scenario == "bulk":
        return f"<= {GOAL_BULK_S:.0f} s"
    goal = f"ratio >= {GOAL_RATIO[kind]}"
    return f"{goal} (as non-invertible)" if kind == "fold" else goal


def goal_met(scenario: str, kind: str, group: Sequence[Sample]) -> str:
    timed_out = any(sample.timed_out for sample in group)
    if scenario == "bulk":
        seconds = [s.corrections.seconds for s in group if s.corrections is not None]
        met = not timed_out and statistics.median(seconds) <= GOAL_BULK_S
    else:
        ratios = [s.ratio for s in group if s.ratio is not None]
        met = bool(ratios) and statistics.median(ratios) >= GOAL_RATIO[kind]
    return ("yes" if met else "no") + (" (timed out)" if timed_out else "")


def median_text(values: Sequence[float], digits: int = 0) -> str:
    present = [value for value in values if not math.isnan(value)]
    return f"{statistics.median(present):,.{digits}f}" if present else "-"


def runs_text(group: Sequence[Sample]) -> str:
    statuses = [sample.status() for sample in group]
    counted = dict.fromkeys(statuses)
    return "; ".join(
        status if statuses.count(status) == 1 else f"{status} (x{statuses.count(status)})"
        for status in counted
    )


def report(samples: Sequence[Sample]) -> str:
    rows = [
        [
            "scenario",
            "projection",
            "database",
            "events/s (ordinary)",
            "corrections/s",
            "ratio",
            "CPU µs/event",
            "CPU µs/correction",
            "corrections phase s",
            "goal",
            "met?",
            "runs",
        ]
    ]
    groups = dict.fromkeys((s.scenario, s.projection, s.database) for s in samples)
    for scenario, kind, database in groups:
        group = [
            s
            for s in samples
            if (s.scenario, s.projection, s.database) == (scenario, kind, database)
        ]
        phases = [s.corrections for s in group if s.corrections is not None]
        ratios = [s.ratio for s in group if s.ratio is not None]
        rows.append(
            [
                scenario,
                kind,
                database,
                rate_spread([s.ordinary.rate for s in group]),
                rate_spread([phase.rate for phase in phases]) if phases else "-",
                format_spread(Spread.of(ratios), 3) if ratios else "-",
                median_text([s.ordinary.cpu_us for s in group]),
                median_text([phase.cpu_us for phase in phases]),
                format_spread(Spread.of([phase.seconds for phase in phases]), 1) if phases else "-",
                goal_of(scenario, kind),
                goal_met(scenario, kind, group),
                runs_text(group),
            ]
        )
    return markdown_table(rows)


# ---------------------------------------------------------------- main


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=None, help="ordinary events per run")
    parser.add_argument("--keys", type=int, default=None, help="sensors (entity keys)")
    parser.add_argument(
        "--corrections", type=int, default=None, help="replacements in the spread and hot scenarios"
    )
    parser.add_argument(
        "--hot-keys", type=int, default=None, help="sensors the hot scenario's corrections hit"
    )
    parser.add_argument(
        "--retract", type=int, default=None, help="events the bulk scenario retracts (first ones)"
    )
    parser.add_argument("--repeat", type=int, default=None, help="runs per setting")
    parser.add_argument("--partitions", type=int, default=PARTITIONS_DEFAULT)
    parser.add_argument("--database", choices=DATABASES, action="append", default=None)
    parser.add_argument("--projection", choices=PROJECTIONS, action="append", default=None)
    parser.add_argument("--scenario", choices=SCENARIOS, action="append", default=None)
    parser.add_argument(
        "--postgres",
        default=POSTGRES_ADMIN_DEFAULT,
        help="admin URL of the PostgreSQL server; fresh databases are made and dropped there",
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the scratch dir")
    parser.add_argument(
        "--step-timeout",
        type=float,
        default=None,
        help=f"seconds a phase may take before it is cut short (default {STEP_TIMEOUT_S:.0f}, "
        f"--quick {QUICK['step_timeout']:.0f})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: "
        + ", ".join(f"{name.replace('_', '-')} {value:,}" for name, value in QUICK.items()),
    )
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    return parser.parse_args(argv)


def make_plan(arguments: argparse.Namespace) -> Plan:
    defaults: dict[str, float] = {
        "events": EVENTS_DEFAULT,
        "keys": KEYS_DEFAULT,
        "corrections": CORRECTIONS_DEFAULT,
        "retract": RETRACT_DEFAULT,
        "repeat": REPEAT_DEFAULT,
        "step_timeout": STEP_TIMEOUT_S,
    }
    if arguments.quick:
        defaults.update(QUICK)

    def chosen(name: str) -> Any:
        given = getattr(arguments, name)
        return defaults[name] if given is None else given

    events, keys = int(chosen("events")), int(chosen("keys"))
    hot_keys = HOT_KEYS_DEFAULT if arguments.hot_keys is None else arguments.hot_keys
    plan = Plan(
        events=events,
        keys=keys,
        corrections=int(chosen("corrections")),
        hot_keys=min(hot_keys, keys),
        retract=min(int(chosen("retract")), events),
        repeat=int(chosen("repeat")),
        partitions=arguments.partitions,
        databases=tuple(dict.fromkeys(arguments.database or DATABASES)),
        projections=tuple(dict.fromkeys(arguments.projection or PROJECTIONS)),
        scenarios=tuple(dict.fromkeys(arguments.scenario or SCENARIOS)),
        step_timeout_s=float(chosen("step_timeout")),
    )
    for name in ("events", "keys", "corrections", "hot_keys", "retract", "repeat", "partitions"):
        if getattr(plan, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1")
    return plan


def main(argv: Sequence[str]) -> None:
    arguments = parse_arguments(argv)
    plan = make_plan(arguments)
    scratch = Path(tempfile.mkdtemp(prefix="bench-corrections-", dir=arguments.data_dir))
    results: dict[str, Any] = {"plan": asdict(plan), "machine": describe_machine(scratch)}
    try:
        progress(
            f"{plan.events:,} events over {plan.keys:,} sensors; {plan.corrections:,} corrections "
            f"(hot: {plan.hot_keys} sensors); bulk retraction of {plan.retract:,}"
        )
        workload = make_workload(plan)
        samples = measure(plan, workload, arguments.postgres, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["samples"] = [asdict(sample) for sample in samples]
    results["command"] = invocation(__file__, argv)
    checked = sum(sample.check == "checked" for sample in samples)
    print(f"command: {results['command']}\n")
    print(report(samples))
    print(
        f"\ncorrectness checks: {checked} of {len(samples)} runs checked against the corrected "
        f"history, {len(samples) - checked} skipped (timed out)"
    )
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
