"""Exactly-once effect under SIGKILL: two runners, many kills, a stream of events.

Two ``platform projections run`` processes share the six partitions of the
test app's topic while a producer thread appends ``Tick`` events (80,000 in the
suite, 200,000 in ``make exactly-once``; ``EXACTLY_ONCE_EVENTS``). Eight times in
the suite, twenty in ``make exactly-once`` (``EXACTLY_ONCE_KILLS``), one runner
(chosen at random) is SIGKILLed and started again:
most kills land a random moment after the group has settled with both
runners applying, the others while the group is still rebalancing. The
producer's progress is tied to the kills (an equal share of the stream
between two kills), so every kill lands while events are still streaming in.

Afterwards both tables equal a fold the test computes itself from the events
it appended, ordered by the log positions the producer reported: equal
counts per entity and per label mean no event was applied twice or missed,
and the order-sensitive ``trail`` column means none was applied out of order.

A monitor thread samples the group (which process owns which partition) and
the checkpoints, so the test can tell that both processes applied events
and that partitions moved between them.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import projection_test_app
import pytest
from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from projection_test_app import TRAIL_SEPARATOR, Tick, label_totals, totals
from runner_process import RunnerProcess, RunnerSummary
from sqlalchemy import Engine, func, select

from eventplatform.events import EventProducer, EventRef
from eventplatform.projections import schema
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.errors import ApplyTimeoutError
from eventplatform.projections.migrate import upgrade
from eventplatform.projections.operations import wait_until_applied
from eventplatform.projections.registry import checkpoints_of, registered
from eventplatform.testing import running_broker

pytestmark = pytest.mark.alone  # tests/conftest.py: Spark, clusters, timed kills or a browser

SEED = 20_250_611
EVENTS = int(os.environ.get("EXACTLY_ONCE_EVENTS", "80000"))
KILLS = int(os.environ.get("EXACTLY_ONCE_KILLS", "8"))
PARTITIONS = 6
ENTITIES = 300
LABELS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
AMOUNT_MIN, AMOUNT_MAX = -1_000, 1_000

PROJECTION = projection_test_app.totals_projection
TOPIC = Tick.event_topic
RUNNER_NAMES = ("runner-a", "runner-b")
BATCH_SIZE = 100
SESSION_TIMEOUT_MS = 3_000
HEARTBEAT_INTERVAL_MS = 500
CONSUMER_SETTINGS = {
    "session.timeout.ms": SESSION_TIMEOUT_MS,
    "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
    "topic.metadata.refresh.interval.ms": 1_000,
}
BROKER_OVERRIDES = (
    f"num.partitions={PARTITIONS}",
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=1000",
    "offsets.topic.num.partitions=3",
)

CHUNK_EVENTS = 500
RATE_PER_S_MAX = 3_000
KILL_WHILE_REBALANCING_PROBABILITY = 0.25
KILL_DELAY_S_MAX = 2.0
KILL_WHILE_REBALANCING_DELAY_S = (0.2, 1.5)
SHARING_WAIT_S = 45.0
STREAM_TIMEOUT_S = 600.0
APPLY_WAIT_S = 150.0
APPLY_POLL_S = 1.0
SAMPLE_INTERVAL_S = 0.25
ADMIN_TIMEOUT_S = 30.0
DESCRIBE_TIMEOUT_S = 5.0
JOIN_TIMEOUT_S = 30.0
DIFFERENCES_SHOWN = 5

TOTALS_COLUMNS = (
    "entity",
    "total",
    "ticks",
    "smallest",
    "largest",
    "last_label",
    "first_label",
    "labels",
    "trail",
)
LABEL_TOTALS_COLUMNS = ("label", "total", "ticks")


# --- the stream ---------------------------------------------------------------


def make_ticks(rng: random.Random) -> list[Tick]:
    return [
        Tick(
            entity=f"entity-{rng.randrange(ENTITIES):03d}",
            amount=rng.randint(AMOUNT_MIN, AMOUNT_MAX),
            label=rng.choice(LABELS),
        )
        for _ in range(EVENTS)
    ]


class TickStream(threading.Thread):
    """Appends the ticks in chunks, paced to ``RATE_PER_S_MAX`` a second on average.

    It never runs further ahead than ``allow`` lets it: after ``k`` kills,
    ``k + 1`` shares of ``KILLS + 1``. The refs come back in the order given.
    """

    def __init__(self, bootstrap: str, ticks: Sequence[Tick]) -> None:
        super().__init__(name="tick-stream", daemon=True)
        self.bootstrap = bootstrap
        self.ticks = ticks
        self.refs: list[EventRef] = []
        self.error: BaseException | None = None
        self.abort = threading.Event()
        self.finished_at: float | None = None
        self._allowed = EVENTS // (KILLS + 1)
        self._changed = threading.Condition()

    @property
    def appended(self) -> int:
        return len(self.refs)

    def allow(self, kills_done: int) -> None:
        with self._changed:
            self._allowed = (
                EVENTS if kills_done >= KILLS else EVENTS * (kills_done + 1) // (KILLS + 1)
            )
            self._changed.notify_all()

    def run(self) -> None:
        try:
            with EventProducer(self.bootstrap) as producer:
                self._stream(producer)
            self.finished_at = time.monotonic()
        except BaseException as exc:
            self.error = exc

    def _stream(self, producer: EventProducer) -> None:
        started = time.monotonic()
        deadline = started + STREAM_TIMEOUT_S
        while self.appended < EVENTS and not self.abort.is_set():
            end = min(self.appended + CHUNK_EVENTS, EVENTS)
            with self._changed:
                while self._allowed < end and not self.abort.is_set():
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"stream held at {self.appended} events")
                    self._changed.wait(0.1)
            pause_s = started + self.appended / RATE_PER_S_MAX - time.monotonic()
            if pause_s > 0:
                time.sleep(pause_s)
            self.refs.extend(producer.append(self.ticks[self.appended : end]))


# --- watching the group ---------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    at: float
    stable: bool
    owners: dict[int, tuple[str, str]]
    """partition -> (member id, client id)"""
    checkpoints: dict[int, int]

    def slots_owning(self) -> dict[str, set[int]]:
        slots: dict[str, set[int]] = {}
        for partition, (_, client_id) in self.owners.items():
            slots.setdefault(slot_of(client_id), set()).add(partition)
        return slots


def client_id(launch: int, slot: str) -> str:
    """``<launch number>.<slot>``: the newest process sorts last, so it gets the high partitions.

    The survivor of a kill then keeps or takes the low ones, and partitions
    move between the two processes, not only from a dead one to its successor.
    """
    return f"{launch:02d}.{slot}"


def slot_of(client_id: str) -> str:
    return client_id.split(".", 1)[1]


class GroupMonitor(threading.Thread):
    """Samples the group's assignment and the projection's checkpoints."""

    def __init__(self, bootstrap: str, database_url: str) -> None:
        super().__init__(name="group-monitor", daemon=True)
        self.bootstrap = bootstrap
        self.database_url = database_url
        self.samples: list[Sample] = []
        self.describe_errors = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    @property
    def latest(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    @property
    def applied(self) -> int:
        latest = self.latest
        return sum(latest.checkpoints.values()) if latest else 0

    def run(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        engine = create_store_engine(self.database_url)
        try:
            while not self.stop.wait(SAMPLE_INTERVAL_S):
                self._sample(admin, engine)
        except BaseException as exc:
            self.error = exc
        finally:
            engine.dispose()

    def _sample(self, admin: AdminClient, engine: Engine) -> None:
        with engine.connect() as connection:
            groups = {row.name: row.group_id for row in registered(connection)}
        group = groups.get(PROJECTION.name)
        if group is None:  # no runner has registered the projection yet
            return
        try:
            future = admin.describe_consumer_groups([group], request_timeout=DESCRIBE_TIMEOUT_S)[
                group
            ]
            description = future.result(timeout=DESCRIBE_TIMEOUT_S * 2)
        except KafkaException:
            self.describe_errors += 1
            return
        owners = {
            assigned.partition: (member.member_id, member.client_id)
            for member in description.members
            for assigned in (member.assignment.topic_partitions or [])
            if assigned.topic == TOPIC
        }
        with engine.connect() as connection:
            stored = checkpoints_of(connection, PROJECTION.name)
        checkpoints = {partition: offset for (topic, partition), offset in stored.items()}
        stable = description.state == ConsumerGroupState.STABLE
        self.samples.append(Sample(time.monotonic(), stable, owners, checkpoints))


def events_applied_by_slot(samples: Sequence[Sample]) -> Counter[str]:
    """Checkpoint advances between two samples that show the same member owning the partition."""
    credited: Counter[str] = Counter()
    for before, after in pairwise(samples):
        for partition, owner in after.owners.items():
            if before.owners.get(partition) != owner:
                continue
            advanced = after.checkpoints.get(partition, 0) - before.checkpoints.get(partition, 0)
            if advanced > 0:
                credited[slot_of(owner[1])] += advanced
    return credited


def handovers(samples: Sequence[Sample]) -> int:
    """How often a partition went from one runner slot to the other."""
    moves = 0
    last: dict[int, str] = {}
    for sample in samples:
        for partition, (_, client_id) in sample.owners.items():
            slot = slot_of(client_id)
            if last.get(partition, slot) != slot:
                moves += 1
            last[partition] = slot
    return moves


# --- killing ------------------------------------------------------------------


@dataclass(frozen=True)
class Kill:
    at_s: float
    victim: str
    while_rebalancing: bool
    settled_after_s: float | None
    appended: int
    applied: int


@dataclass
class KillLog:
    started: float = field(default_factory=time.monotonic)
    kills: list[Kill] = field(default_factory=list)


def failure_detail(runners: Sequence[RunnerProcess], monitor: GroupMonitor) -> str:
    latest = monitor.latest
    lines = [
        f"seed {SEED}; latest group sample: "
        f"{None if latest is None else (latest.stable, latest.slots_owning())}",
        f"checkpoints: {None if latest is None else latest.checkpoints}",
    ]
    lines += [runner.tail() for runner in runners]
    return "\n".join(lines)


def assert_running(runners: Sequence[RunnerProcess], monitor: GroupMonitor) -> None:
    for runner in runners:
        if not runner.alive():
            pytest.fail(
                f"{runner.client_id} exited by itself with {runner.returncode()}\n"
                + failure_detail(runners, monitor)
            )


def wait_until_sharing(runners: Sequence[RunnerProcess], monitor: GroupMonitor) -> float:
    """Wait until the group is stable with both current processes owning partitions."""
    started = time.monotonic()
    wanted = {runner.client_id for runner in runners}
    while time.monotonic() - started < SHARING_WAIT_S:
        assert_running(runners, monitor)
        sample = monitor.latest
        if sample is not None and sample.stable and sample.at > started:
            owning = {client_id for _, client_id in sample.owners.values()}
            if owning == wanted and set(sample.owners) == set(range(PARTITIONS)):
                return time.monotonic() - started
        time.sleep(SAMPLE_INTERVAL_S / 2)
    pytest.fail(
        f"the group did not settle with {sorted(wanted)} within {SHARING_WAIT_S} s\n"
        + failure_detail(runners, monitor)
    )


def kill_repeatedly(
    runners: Sequence[RunnerProcess],
    monitor: GroupMonitor,
    stream: TickStream,
    rng: random.Random,
) -> KillLog:
    log = KillLog()
    launches = len(runners)
    for number in range(KILLS):
        victim = rng.choice(runners)
        while_rebalancing = rng.random() < KILL_WHILE_REBALANCING_PROBABILITY
        if while_rebalancing:
            settled_after_s = None
            delay_s = rng.uniform(*KILL_WHILE_REBALANCING_DELAY_S)
        else:
            settled_after_s = wait_until_sharing(runners, monitor)
            delay_s = rng.uniform(0, KILL_DELAY_S_MAX)
        time.sleep(delay_s)
        assert_running(runners, monitor)
        kill = Kill(
            at_s=time.monotonic() - log.started,
            victim=victim.client_id,
            while_rebalancing=while_rebalancing,
            settled_after_s=settled_after_s,
            appended=stream.appended,
            applied=monitor.applied,
        )
        victim.restart(client_id(launches, victim.name))
        launches += 1
        log.kills.append(kill)
        stream.allow(number + 1)
    return log


# --- the reference fold ----------------------------------------------------------


def reference_tables(
    ticks: Sequence[Tick], refs: Sequence[EventRef]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Both tables folded from the appended events in log order (by partition, then offset)."""
    in_log_order = sorted(
        zip(refs, ticks, strict=True),
        key=lambda pair: (pair[0].position.partition, pair[0].position.offset),
    )
    by_entity: dict[str, dict[str, Any]] = {}
    by_label: dict[str, dict[str, Any]] = {}
    for _, tick in in_log_order:
        row = by_entity.get(tick.entity)
        if row is None:
            row = by_entity[tick.entity] = {
                "entity": tick.entity,
                "total": 0,
                "ticks": 0,
                "smallest": tick.amount,
                "largest": tick.amount,
                "first_label": tick.label,
                "labels": set(),
                "trail": [],
            }
        row["total"] += tick.amount
        row["ticks"] += 1
        row["smallest"] = min(row["smallest"], tick.amount)
        row["largest"] = max(row["largest"], tick.amount)
        row["last_label"] = tick.label
        row["labels"].add(tick.label)
        row["trail"].append(tick.label)
        label_row = by_label.setdefault(tick.label, {"label": tick.label, "total": 0, "ticks": 0})
        label_row["total"] += tick.amount
        label_row["ticks"] += 1
    for row in by_entity.values():
        row["labels"] = sorted(row["labels"])
        row["trail"] = TRAIL_SEPARATOR.join(row["trail"])
    return by_entity, by_label


def stored_tables(
    engine: Engine,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    with engine.connect() as connection:
        entity_rows = connection.execute(select(*(totals.c[n] for n in TOTALS_COLUMNS)))
        by_entity = {row["entity"]: dict(row) for row in entity_rows.mappings()}
        label_rows = connection.execute(select(*(label_totals.c[n] for n in LABEL_TOTALS_COLUMNS)))
        by_label = {row["label"]: dict(row) for row in label_rows.mappings()}
    return by_entity, by_label


def differences(
    expected: dict[str, dict[str, Any]], actual: dict[str, dict[str, Any]]
) -> list[str]:
    found = []
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key), actual.get(key)
        if want == got:
            continue
        if want is None or got is None:
            found.append(f"{key}: expected {ticks_of(want)}, got {ticks_of(got)}")
            continue
        columns = [name for name in want if want[name] != got.get(name)]
        details = []
        for name in columns:
            if name == "trail":
                details.append(trail_difference(want[name], got[name]))
            else:
                details.append(f"{name} expected {want[name]!r}, got {got[name]!r}")
        found.append(f"{key}: " + "; ".join(details))
    return found


def ticks_of(row: dict[str, Any] | None) -> str:
    return "no row" if row is None else f"a row of {row['ticks']} ticks"


def trail_difference(expected: str, actual: str | None) -> str:
    want = expected.split(TRAIL_SEPARATOR)
    got = (actual or "").split(TRAIL_SEPARATOR)
    first = next(
        (i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
        min(len(want), len(got)),
    )
    return f"trail of {len(want)} labels, got {len(got)}, first difference at {first}"


# --- the test ---------------------------------------------------------------------


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(ADMIN_TIMEOUT_S)


@contextmanager
def started_runners(
    database_url: str, bootstrap: str, output_dir: Path
) -> Iterator[list[RunnerProcess]]:
    runners = [
        RunnerProcess(
            name,
            projection=PROJECTION.name,
            app=projection_test_app.__name__,
            database_url=database_url,
            bootstrap=bootstrap,
            output_dir=output_dir,
            batch_size=BATCH_SIZE,
            consumer_settings=CONSUMER_SETTINGS,
        )
        for name in RUNNER_NAMES
    ]
    try:
        for launch, runner in enumerate(runners):
            runner.start(client_id(launch, runner.name))
        yield runners
    finally:
        for runner in runners:
            runner.kill()


@contextmanager
def running_thread(thread: TickStream | GroupMonitor) -> Iterator[None]:
    thread.start()
    try:
        yield
    finally:
        if isinstance(thread, TickStream):
            thread.abort.set()
        else:
            thread.stop.set()
        thread.join(JOIN_TIMEOUT_S)


def wait_until_all_applied(
    database_url: str,
    refs: Sequence[EventRef],
    runners: Sequence[RunnerProcess],
    monitor: GroupMonitor,
) -> None:
    """Wait for the checkpoints to pass every appended event, failing early if a runner dies."""
    last: dict[int, EventRef] = {}
    for ref in refs:
        known = last.get(ref.position.partition)
        if known is None or known.position.offset < ref.position.offset:
            last[ref.position.partition] = ref
    engine = create_store_engine(database_url)
    deadline = time.monotonic() + APPLY_WAIT_S
    try:
        while True:
            assert_running(runners, monitor)
            try:
                wait_until_applied(engine, PROJECTION.name, last.values(), timeout_s=APPLY_POLL_S)
                return
            except ApplyTimeoutError as exc:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"{exc} (waited {APPLY_WAIT_S} s)\n" + failure_detail(runners, monitor)
                    )
    finally:
        engine.dispose()


def stop_runners(
    runners: Sequence[RunnerProcess], monitor: GroupMonitor
) -> dict[str, RunnerSummary]:
    assert_running(runners, monitor)
    summaries = {}
    for runner in runners:
        code = runner.stop()
        summary = runner.summary()
        assert code == 0 and summary is not None, (
            f"{runner.client_id} did not stop cleanly ({code})\n" + runner.tail()
        )
        summaries[runner.client_id] = summary
    return summaries


@pytest.mark.slow
def test_sigkilled_runners_apply_every_event_exactly_once(
    tmp_path: Path, database_url: str
) -> None:
    rng = random.Random(SEED)
    ticks = make_ticks(rng)
    upgrade(database_url, [projection_test_app.app])
    timings: dict[str, float] = {}
    started = time.monotonic()
    with ExitStack() as stack:
        broker = stack.enter_context(running_broker(tmp_path / "broker", BROKER_OVERRIDES))
        create_topic(broker.bootstrap)
        runners = stack.enter_context(started_runners(database_url, broker.bootstrap, tmp_path))
        monitor = GroupMonitor(broker.bootstrap, database_url)
        stream = TickStream(broker.bootstrap, ticks)
        stack.enter_context(running_thread(monitor))
        stack.enter_context(running_thread(stream))

        kill_log = kill_repeatedly(runners, monitor, stream, rng)
        timings["kills"] = time.monotonic() - started
        stream.join(STREAM_TIMEOUT_S)
        assert stream.error is None and stream.appended == EVENTS, (
            f"the stream stopped at {stream.appended} events: {stream.error!r}"
        )
        timings["stream"] = (stream.finished_at or time.monotonic()) - started
        wait_until_all_applied(database_url, stream.refs, runners, monitor)
        timings["applied"] = time.monotonic() - started
        summaries = stop_runners(runners, monitor)
        samples = list(monitor.samples)
    assert monitor.error is None, f"the monitor failed: {monitor.error!r}"

    assert_kills_mid_stream(kill_log)
    assert_runners_shared_the_work(samples)
    engine = create_store_engine(database_url)
    try:
        assert_log_is_the_stream(stream.refs, ticks)
        assert_checkpoints_at_log_end(engine, stream.refs)
        assert_tables_equal_reference(engine, ticks, stream.refs)
    finally:
        engine.dispose()
    settled = [kill.settled_after_s for kill in kill_log.kills if kill.settled_after_s is not None]
    print(
        f"timings {timings}; slowest settle {max(settled, default=0):.1f} s; "
        f"applied by slot {dict(events_applied_by_slot(samples))}; "
        f"handovers {handovers(samples)}; final runners {summaries}; "
        f"describe errors {monitor.describe_errors}; kills with events still to apply "
        f"{sum(kill.applied < kill.appended for kill in kill_log.kills)} of {KILLS}"
    )


def assert_kills_mid_stream(kill_log: KillLog) -> None:
    kills = kill_log.kills
    assert len(kills) == KILLS
    late = [kill for kill in kills if kill.appended >= EVENTS or kill.applied >= EVENTS]
    assert not late, f"kills after the stream had ended: {late}"
    victims = Counter(slot_of(kill.victim) for kill in kills)
    assert set(victims) == set(RUNNER_NAMES), f"only {victims} were killed"


def assert_runners_shared_the_work(samples: Sequence[Sample]) -> None:
    shared = [sample for sample in samples if sample.stable and len(sample.slots_owning()) == 2]
    assert shared, "the group never had both runners owning partitions"
    credited = events_applied_by_slot(samples)
    assert all(credited[name] > 0 for name in RUNNER_NAMES), (
        f"not every runner applied events while it owned partitions: {dict(credited)}"
    )
    assert handovers(samples) >= KILLS // 2, (
        f"partitions moved between runners only {handovers(samples)} times"
    )


def assert_log_is_the_stream(refs: Sequence[EventRef], ticks: Sequence[Tick]) -> None:
    """The topic holds exactly the appended events, and each entity lives in one partition."""
    by_partition: dict[int, list[int]] = {}
    partitions_of: dict[str, set[int]] = {}
    for ref, tick in zip(refs, ticks, strict=True):
        assert ref.position.topic == TOPIC
        by_partition.setdefault(ref.position.partition, []).append(ref.position.offset)
        partitions_of.setdefault(tick.entity, set()).add(ref.position.partition)
    for partition, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {partition} has gaps"
    assert all(len(found) == 1 for found in partitions_of.values())


def assert_checkpoints_at_log_end(engine: Engine, refs: Sequence[EventRef]) -> None:
    ends = Counter(ref.position.partition for ref in refs)
    with engine.connect() as connection:
        stored = checkpoints_of(connection, PROJECTION.name)
        parked = connection.execute(
            select(func.count()).where(schema.dead_letters.c.projection == PROJECTION.name)
        ).scalar_one()
    assert stored == {(TOPIC, partition): end for partition, end in ends.items()}
    assert parked == 0


def assert_tables_equal_reference(
    engine: Engine, ticks: Sequence[Tick], refs: Sequence[EventRef]
) -> None:
    expected_entities, expected_labels = reference_tables(ticks, refs)
    stored_entities, stored_labels = stored_tables(engine)
    applied = sum(row["ticks"] for row in stored_entities.values())
    assert applied == EVENTS, f"{applied} events applied to pt_totals, not {EVENTS}"
    assert sum(row["ticks"] for row in stored_labels.values()) == EVENTS
    for table, expected, stored in (
        ("pt_totals", expected_entities, stored_entities),
        ("pt_label_totals", expected_labels, stored_labels),
    ):
        found = differences(expected, stored)
        assert not found, f"{table}: {len(found)} rows differ:\n" + "\n".join(
            found[:DIFFERENCES_SHOWN]
        )
