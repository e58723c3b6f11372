"""One consumer group's whole life with confluent-kafka, every record accounted for.

A real broker process serves a six-partition topic while a producer thread
keeps writing keyed, numbered records at a modest rate (a bounded count).
Meanwhile one group of consumers goes through:

1. three members joining one at a time: 6, then 3/3, then 2/2/2;
2. a fourth member (a child process) joining, then a member leaving with
   ``close()``, which rebalances well before the session timeout;
3. the child being SIGKILLed (no LeaveGroup): its partitions move only once
   its session times out, and what it processed without committing is
   delivered again;
4. the survivors closing cleanly, the broker stopping (SIGTERM) and starting
   again on the same port, and a new set of members resuming exactly at the
   committed offsets and reading to the end.

Every member commits after each batch it processes. Over the whole run each
produced record is consumed; no record below an acknowledged commit of its
partition is delivered after that acknowledgement; a record is delivered
again only when whoever processed it before never committed it. All clocks
are ``time.monotonic()`` (one system-wide clock on Linux, child included).
Every wait has a deadline.
"""

from __future__ import annotations

import bisect
import contextlib
import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from eventplatform.testing import BrokerProcess

TOPIC = "whole-run"
GROUP = "whole-run-group"
PARTITIONS = 6
SESSION_TIMEOUT_MS = 6_000
SESSION_S = SESSION_TIMEOUT_MS / 1000
HEARTBEAT_INTERVAL_MS = 500
BROKER_OVERRIDES = (
    "group.initial.rebalance.delay.ms=0",
    "group.min.session.timeout.ms=1000",
    f"num.partitions={PARTITIONS}",
    "offsets.topic.num.partitions=3",
)
RATE_PER_S = 200
MAX_RECORDS = 9_000
TAIL_RECORDS = 300
KEYS = 97
BATCH_MAX = 500
POLL_S = 0.03
WAIT_S = 30.0
CHILD_START_S = 30.0
FLUSH_S = 60.0
ADMIN_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Delivery:
    member: str
    partition: int
    offset: int
    value: str
    at: float


@dataclass(frozen=True, slots=True)
class Commit:
    """An acknowledged commit: ``offset`` is the next offset to read."""

    member: str
    partition: int
    offset: int
    at: float


class KeyedProducer(threading.Thread):
    """Writes ``key-(n % KEYS)`` -> ``n`` at a steady rate until told to finish.

    After ``finish`` it writes ``TAIL_RECORDS`` more and flushes; it never
    writes more than ``MAX_RECORDS``.
    """

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.finish = threading.Event()
        self.abort = threading.Event()
        self.delivered: dict[tuple[int, int], tuple[str, str]] = {}
        self.errors: list[str] = []
        self.produced = 0
        self.unflushed = -1

    def run(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        start = time.monotonic()
        stop_at = MAX_RECORDS
        while self.produced < stop_at and not self.abort.is_set():
            if self.finish.is_set():
                stop_at = min(stop_at, self.produced + TAIL_RECORDS)
                self.finish.clear()
            wait_s = start + self.produced / RATE_PER_S - time.monotonic()
            producer.poll(max(wait_s, 0))
            number = self.produced
            producer.produce(
                TOPIC, key=f"key-{number % KEYS}", value=str(number), on_delivery=self._report
            )
            self.produced += 1
        if self.abort.is_set():
            producer.purge()
            producer.flush(1)
        else:
            self.unflushed = producer.flush(FLUSH_S)

    def _report(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.errors.append(str(error))
            return
        key, value = message.key(), message.value()
        partition, offset = message.partition(), message.offset()
        assert key is not None and value is not None
        assert partition is not None and offset is not None
        self.delivered[(partition, offset)] = (key.decode(), value.decode())


class Member:
    """An in-process member: each step consumes a batch, then commits it synchronously."""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.name = name
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "client.id": name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
                "topic.metadata.refresh.interval.ms": 1_000,
            }
        )
        self.consumer.subscribe([TOPIC])
        self.deliveries: list[Delivery] = []
        self.commits: list[Commit] = []
        self.failed_commits: list[str] = []
        self.closed = False

    def step(self) -> None:
        batch = self.consumer.consume(BATCH_MAX, POLL_S)
        now = time.monotonic()
        nexts: dict[int, int] = {}
        for message in batch:
            error = message.error()
            assert error is None, f"{self.name}: consumer error {error}"
            value = message.value()
            assert value is not None
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            self.deliveries.append(Delivery(self.name, partition, offset, value.decode(), now))
            nexts[partition] = offset + 1
        if not nexts:
            return
        try:
            answer = self.consumer.commit(
                offsets=[TopicPartition(TOPIC, p, o) for p, o in nexts.items()], asynchronous=False
            )
        except KafkaException as error:
            self.failed_commits.append(str(error))
            return
        acked = time.monotonic()
        for tp in answer or ():
            if tp.error is not None:
                self.failed_commits.append(f"{tp.partition}: {tp.error}")
            else:
                self.commits.append(Commit(self.name, tp.partition, tp.offset, acked))

    def partitions(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


CHILD_MEMBER = textwrap.dedent(
    """
    import sys, threading, time
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    bootstrap, group, topic, session_ms, heartbeat_ms, batch_max, poll_s = sys.argv[1:8]
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": "doomed",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": int(heartbeat_ms),
        "topic.metadata.refresh.interval.ms": 1000,
    })
    consumer.subscribe([topic])
    hold = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), hold.set()), daemon=True).start()
    holding, assigned = False, None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if hold.is_set() and not holding:
            holding = True
            print("holding", flush=True)
        batch = consumer.consume(int(batch_max), float(poll_s))
        now = time.monotonic()
        current = sorted(tp.partition for tp in consumer.assignment())
        if current != assigned:
            assigned = current
            print("assigned", *current, flush=True)
        nexts = {}
        for message in batch:
            if message.error() is not None:
                print("error", message.error(), flush=True)
                continue
            p, o = message.partition(), message.offset()
            print("record", p, o, message.value().decode(), repr(now))
            nexts[p] = o + 1
        sys.stdout.flush()
        if nexts and not holding:
            offsets = [TopicPartition(topic, p, o) for p, o in nexts.items()]
            try:
                answer = consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as error:
                print("commit-failed", error, flush=True)
                continue
            acked = time.monotonic()
            for tp in answer:
                if tp.error is None:
                    print("commit", tp.partition, tp.offset, repr(acked))
                else:
                    print("commit-failed", tp.partition, tp.error)
            sys.stdout.flush()
    """
)


class ChildMember:
    """A member in a child process, so it can die by SIGKILL without a LeaveGroup."""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD_MEMBER,
                bootstrap,
                GROUP,
                TOPIC,
                str(SESSION_TIMEOUT_MS),
                str(HEARTBEAT_INTERVAL_MS),
                str(BATCH_MAX),
                str(POLL_S),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.deliveries: list[Delivery] = []
        self.commits: list[Commit] = []
        self.failed_commits: list[str] = []
        self.other: list[str] = []
        self.assigned: list[int] = []
        self.holding = threading.Event()
        self.held_deliveries = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            kind, *fields = line.split()
            if kind == "record":
                partition, offset, value, at = fields
                delivery = Delivery(self.name, int(partition), int(offset), value, float(at))
                self.deliveries.append(delivery)
                if self.holding.is_set():
                    self.held_deliveries += 1
            elif kind == "commit":
                partition, offset, at = fields
                self.commits.append(Commit(self.name, int(partition), int(offset), float(at)))
            elif kind == "assigned":
                self.assigned = [int(p) for p in fields]
            elif kind == "holding":
                self.holding.set()
            elif kind == "commit-failed":
                self.failed_commits.append(line.strip())
            else:
                self.other.append(line)

    def partitions(self) -> list[int]:
        return list(self.assigned)

    def hold(self) -> None:
        """Keep processing, but commit nothing from now on."""
        assert self.process.stdin is not None
        self.process.stdin.write("hold\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self.reader.join(10)


class Group:
    """Drives the in-process members in turn; the child runs by itself."""

    def __init__(self) -> None:
        self.members: list[Member | ChildMember] = []
        self.everyone: list[Member | ChildMember] = []

    def add(self, member: Member | ChildMember) -> None:
        self.members.append(member)
        self.everyone.append(member)

    def remove(self, member: Member | ChildMember) -> None:
        self.members.remove(member)

    def assignments(self) -> dict[str, list[int]]:
        return {member.name: member.partitions() for member in self.members}

    def run_until(
        self,
        condition: Callable[[], bool],
        timeout_s: float,
        what: str,
        detail: Callable[[], str] = lambda: "",
    ) -> float:
        """Step every in-process member until ``condition()``; returns the seconds it took."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            stepped = False
            for member in self.members:
                if isinstance(member, Member):
                    member.step()
                    stepped = True
            if not stepped:
                time.sleep(POLL_S)
            if condition():
                return time.monotonic() - start
        pytest.fail(f"{what} within {timeout_s} s; assignments: {self.assignments()} {detail()}")

    def split_is(self, sizes: Sequence[int]) -> Callable[[], bool]:
        def check() -> bool:
            assignments = list(self.assignments().values())
            covered = sorted(p for assigned in assignments for p in assigned)
            return sorted(map(len, assignments)) == sorted(sizes) and covered == list(
                range(PARTITIONS)
            )

        return check


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(ADMIN_TIMEOUT_S)


def committed_offsets(member: Member) -> dict[int, int]:
    answer = member.consumer.committed(
        [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=ADMIN_TIMEOUT_S
    )
    return {tp.partition: tp.offset for tp in answer}


def latest_commits(commits: Iterable[Commit]) -> dict[int, int]:
    latest: dict[int, Commit] = {}
    for commit in sorted(commits, key=lambda c: c.at):
        latest[commit.partition] = commit
    return {partition: commit.offset for partition, commit in latest.items()}


def is_covered(
    delivery: Delivery,
    own_commits: dict[tuple[str, int], list[Commit]],
    before: float = float("inf"),
) -> bool:
    """Whether the member that processed ``delivery`` had a commit past it acknowledged
    after processing it and before ``before``."""
    return any(
        delivery.at <= commit.at < before and commit.offset > delivery.offset
        for commit in own_commits.get((delivery.member, delivery.partition), ())
    )


def own_commits_of(commits: Iterable[Commit]) -> dict[tuple[str, int], list[Commit]]:
    by_member: dict[tuple[str, int], list[Commit]] = defaultdict(list)
    for commit in commits:
        by_member[(commit.member, commit.partition)].append(commit)
    return by_member


def rewinds(deliveries: Iterable[Delivery], commits: Iterable[Commit]) -> list[str]:
    """Deliveries of an offset below a commit of their partition acknowledged before them."""
    by_partition: dict[int, list[Commit]] = defaultdict(list)
    for commit in sorted(commits, key=lambda c: c.at):
        by_partition[commit.partition].append(commit)
    times = {p: [c.at for c in cs] for p, cs in by_partition.items()}
    highest: dict[int, list[int]] = {}
    for partition, partition_commits in by_partition.items():
        running = -1
        highest[partition] = []
        for commit in partition_commits:
            running = max(running, commit.offset)
            highest[partition].append(running)
    found = []
    for delivery in deliveries:
        earlier = bisect.bisect_left(times.get(delivery.partition, []), delivery.at)
        if earlier and delivery.offset < highest[delivery.partition][earlier - 1]:
            found.append(
                f"{delivery} after commit {highest[delivery.partition][earlier - 1]} was acked"
            )
    return found


def test_a_group_lives_through_joins_leaves_a_kill_and_a_broker_restart_accounting_every_record(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(tmp_path / "broker", BROKER_OVERRIDES).start()
    producer = KeyedProducer(broker.bootstrap)
    group = Group()
    child: ChildMember | None = None
    phases: dict[str, float] = {}
    began = time.monotonic()
    try:
        create_topic(broker.bootstrap)
        producer.start()

        # Phase 1: three members join one at a time.
        for count, sizes in ((1, [6]), (2, [3, 3]), (3, [2, 2, 2])):
            group.add(Member(f"member-{count}", broker.bootstrap))
            group.run_until(group.split_is(sizes), WAIT_S, f"{count} members sharing")
        first_three = [m for m in group.members if isinstance(m, Member)]
        group.run_until(lambda: all(m.commits for m in first_three), WAIT_S, "commits by all")
        phases["1: three join"] = time.monotonic() - began

        # Phase 2: a fourth member joins, then one leaves cleanly.
        mark = time.monotonic()
        doomed = child = ChildMember("doomed", broker.bootstrap)
        group.add(doomed)
        group.run_until(
            group.split_is([2, 2, 1, 1]),
            CHILD_START_S,
            "a fourth member",
            lambda: "".join(doomed.other[-10:]),
        )
        group.run_until(lambda: bool(doomed.commits), WAIT_S, "the fourth member committing")
        leaving = first_three[0]
        group.remove(leaving)
        leaving.close()
        took_s = group.run_until(group.split_is([2, 2, 2]), WAIT_S, "a rebalance on leave")
        assert took_s < SESSION_S, f"LeaveGroup rebalanced after {took_s:.1f} s, not at once"
        phases["2: join and leave"] = time.monotonic() - mark

        # Phase 3: the child stops committing, processes some more, and is killed.
        mark = time.monotonic()
        doomed.hold()
        group.run_until(
            lambda: doomed.holding.is_set() and doomed.held_deliveries >= 5,
            WAIT_S,
            "the fourth member processing without committing",
        )
        survivors = [m for m in group.members if isinstance(m, Member)]
        doomed.kill()
        group.remove(doomed)
        took_s = group.run_until(group.split_is([3, 3]), WAIT_S, "the takeover")
        assert SESSION_S - 1.5 <= took_s <= SESSION_S + 10, f"takeover after {took_s:.1f} s"
        child_commits = own_commits_of(doomed.commits)
        uncommitted = {
            (d.partition, d.offset) for d in doomed.deliveries if not is_covered(d, child_commits)
        }
        assert uncommitted, "the killed member processed records it never committed"

        def redelivered() -> bool:
            seen = {(d.partition, d.offset) for m in survivors for d in m.deliveries}
            return uncommitted <= seen

        group.run_until(redelivered, WAIT_S, "the killed member's uncommitted records again")
        phases["3: kill and takeover"] = time.monotonic() - mark

        # Phase 4: close cleanly, restart the broker, resume with new members.
        mark = time.monotonic()
        for member in survivors:
            group.remove(member)
            member.close()
        before_stop = latest_commits(c for m in group.everyone for c in m.commits)
        assert broker.stop() == 0, broker.log_text()[-4000:]
        broker.restart()
        assert "topics, clean shutdown before)" in broker.log_text()
        newcomers = [Member(f"after-restart-{n}", broker.bootstrap) for n in (1, 2, 3)]
        for member in newcomers:
            group.add(member)
        resumed_at = time.monotonic()
        assert committed_offsets(newcomers[0]) == before_stop
        producer.finish.set()
        group.run_until(group.split_is([2, 2, 2]), WAIT_S, "three new members sharing")

        def drained() -> bool:
            if producer.is_alive():
                return False
            seen = {(d.partition, d.offset) for m in group.everyone for d in m.deliveries}
            return not set(producer.delivered) - seen

        def progress() -> str:
            if producer.is_alive():
                return f"producer still running: {producer.produced} written"
            seen = {(d.partition, d.offset) for m in group.everyone for d in m.deliveries}
            missing = sorted(set(producer.delivered) - seen)
            return f"{len(missing)} of {len(producer.delivered)} unread, from {missing[:5]}"

        group.run_until(drained, FLUSH_S, "the new members reading to the end", progress)
        ends = {p: 1 + max(o for q, o in producer.delivered if q == p) for p in range(PARTITIONS)}
        group.run_until(
            lambda: latest_commits(c for m in newcomers for c in m.commits) == ends,
            WAIT_S,
            "every record committed",
        )
        assert committed_offsets(newcomers[0]) == ends
        for member in newcomers:
            group.remove(member)
            member.close()
        phases["4: restart and resume"] = time.monotonic() - mark
    finally:
        producer.abort.set()
        if child is not None:
            child.kill()
        for anyone in group.everyone:
            if isinstance(anyone, Member):
                with contextlib.suppress(RuntimeError, KafkaException):
                    anyone.close()
        producer.join(FLUSH_S)
        broker.kill()

    broker_log = broker.log_text()
    assert " ERROR " not in broker_log and "Traceback" not in broker_log, broker_log[-4000:]

    # The producer: everything written once; a key stays on one partition, in order.
    assert producer.errors == [] and producer.unflushed == 0
    assert len(producer.delivered) == producer.produced
    assert producer.produced < MAX_RECORDS, "the bound cut the run short"
    produced = producer.delivered
    assert {p for p, _ in produced} == set(range(PARTITIONS))
    last_value: dict[str, tuple[int, int]] = {}
    for (partition, _), (key, value) in sorted(produced.items()):
        previous = last_value.get(key, (partition, -1))
        assert previous[0] == partition and previous[1] < int(value), f"{key} out of order"
        last_value[key] = (partition, int(value))

    # The consumers: every record consumed, and consumed as written.
    deliveries = sorted((d for m in group.everyone for d in m.deliveries), key=lambda d: d.at)
    commits = [c for m in group.everyone for c in m.commits]
    assert {(d.partition, d.offset) for d in deliveries} == set(produced)
    wrong = [d for d in deliveries if produced[(d.partition, d.offset)][1] != d.value]
    assert wrong == [], f"values differ from those written: {wrong[:5]}"

    # No delivery below a commit already acknowledged for its partition.
    found = rewinds(deliveries, commits)
    assert found == [], f"{len(found)} records delivered again after a clean commit: {found[:5]}"

    # A delivery is followed by another of the same record exactly when the member
    # that processed it had no commit past it acknowledged in between; the last
    # delivery of every record was committed.
    own_commits = own_commits_of(commits)
    by_record: dict[tuple[int, int], list[Delivery]] = defaultdict(list)
    for delivery in deliveries:
        by_record[(delivery.partition, delivery.offset)].append(delivery)
    unexplained = []
    for record in by_record.values():
        for index, delivery in enumerate(record):
            last = index == len(record) - 1
            before = float("inf") if last else record[index + 1].at
            if is_covered(delivery, own_commits, before) != last:
                unexplained.append(delivery)
    assert unexplained == [], f"{len(unexplained)} deliveries unaccounted: {unexplained[:5]}"
    repeated = {record for record, ds in by_record.items() if len(ds) > 1}
    assert uncommitted <= repeated

    # The new members started exactly at the offsets committed before the restart.
    first_after: dict[int, Delivery] = {}
    for delivery in deliveries:
        if delivery.at >= resumed_at:
            first_after.setdefault(delivery.partition, delivery)
    assert {p: d.offset for p, d in first_after.items()} == before_stop
    assert all(d.member.startswith("after-restart-") for d in first_after.values())

    failed = [f for m in group.everyone for f in m.failed_commits]
    rounded = {phase: round(seconds, 1) for phase, seconds in phases.items()}
    print(
        f"\nproduced {len(produced)}, delivered {len(deliveries)}, "
        f"delivered again {len(repeated)} (killed member's {len(uncommitted)}), "
        f"commits {len(commits)}, failed commits {len(failed)}: {failed[:3]}; "
        f"phases {rounded}, "
        f"total {time.monotonic() - began:.1f} s"
    )
