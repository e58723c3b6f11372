"""Consumer groups with confluent-kafka (librdkafka) against a real broker process.

Three consumers share a six-partition topic and rebalance as members join
and leave; a consumer killed without a LeaveGroup is dropped when its
session times out; committed offsets survive a broker kill -9 and a new
consumer resumes exactly after them; cooperative-sticky and static
membership work; the admin API lists, describes and deletes groups. Every
wait has a deadline.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from eventplatform.testing import BrokerProcess, running_broker

SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 500
REBALANCE_WAIT_S = 30.0
POLL_S = 0.05
CHILD_START_S = 30.0
RESTART_OVERRIDES = ("group.initial.rebalance.delay.ms=0",)


def make_consumer(bootstrap: str, group: str, **overrides: Any) -> Consumer:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "topic.metadata.refresh.interval.ms": 1_000,
    }
    config.update(overrides)
    return Consumer(config)


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for index in range(per_partition):
            producer.produce(topic, value=f"p{partition}-{index}".encode(), partition=partition)
    assert producer.flush(30) == 0


class Poller:
    """Polls consumers in turn, recording every record each one returns."""

    def __init__(self, *consumers: Consumer) -> None:
        self.consumers = list(consumers)
        self.records: dict[int, list[tuple[int, int]]] = {id(c): [] for c in consumers}

    def add(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.records.setdefault(id(consumer), [])

    def remove(self, consumer: Consumer) -> None:
        self.consumers.remove(consumer)

    def poll_until(self, condition: Callable[[], bool], timeout_s: float, what: str) -> float:
        """Poll until ``condition()``; returns the seconds it took, fails at the deadline."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            for consumer in self.consumers:
                message = consumer.poll(POLL_S)
                if message is not None:
                    self._record(consumer, message)
            if condition():
                return time.monotonic() - start
        pytest.fail(f"{what} within {timeout_s} s; assignments: {self.assignments()}")

    def _record(self, consumer: Consumer, message: Message) -> None:
        error = message.error()
        assert error is None, f"consumer error: {error}"
        self.records[id(consumer)].append((message.partition(), message.offset()))

    def assignments(self) -> list[list[int]]:
        return [sorted(tp.partition for tp in consumer.assignment()) for consumer in self.consumers]

    def all_records(self) -> set[tuple[int, int]]:
        return {record for records in self.records.values() for record in records}


def sizes_are(poller: Poller, expected: Sequence[int]) -> Callable[[], bool]:
    def check() -> bool:
        assignments = poller.assignments()
        covered = sorted(partition for assigned in assignments for partition in assigned)
        return sorted(len(assigned) for assigned in assignments) == sorted(expected) and (
            covered == list(range(sum(expected)))
        )

    return check


@pytest.fixture
def closing() -> Iterator[list[Consumer]]:
    """Consumers registered here are closed at the end of the test, even when it fails."""
    consumers: list[Consumer] = []
    yield consumers
    for consumer in consumers:
        with contextlib.suppress(RuntimeError):
            consumer.close()


def test_three_consumers_share_six_partitions_and_rebalance_on_join_and_leave(
    broker: BrokerProcess, new_topic: Callable[..., str], closing: list[Consumer]
) -> None:
    topic = new_topic(6)
    produce(broker.bootstrap, topic, 6, 10)
    group = f"{topic}-group"
    poller = Poller()
    for count, expected in ((1, [6]), (2, [3, 3]), (3, [2, 2, 2])):
        consumer = make_consumer(broker.bootstrap, group, **{"client.id": f"member-{count}"})
        closing.append(consumer)
        consumer.subscribe([topic])
        poller.add(consumer)
        poller.poll_until(sizes_are(poller, expected), REBALANCE_WAIT_S, f"{count} members")
    poller.poll_until(lambda: len(poller.all_records()) == 60, REBALANCE_WAIT_S, "all records")

    leaving = poller.consumers[-1]
    poller.remove(leaving)
    leaving.close()
    closing.remove(leaving)
    took_s = poller.poll_until(sizes_are(poller, [3, 3]), REBALANCE_WAIT_S, "a rebalance")
    assert took_s < SESSION_TIMEOUT_MS / 1000, "LeaveGroup rebalances at once, not on expiry"


CHILD_CONSUMER = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Consumer
    bootstrap, group, topic, session_ms, heartbeat_ms = sys.argv[1:6]
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": int(heartbeat_ms),
        "client.id": "doomed",
    })
    consumer.subscribe([topic])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        consumer.poll(0.05)
        print("assigned", len(consumer.assignment()), flush=True)
    """
)


def test_a_consumer_killed_without_leaving_is_dropped_when_its_session_times_out(
    broker: BrokerProcess, new_topic: Callable[..., str], closing: list[Consumer]
) -> None:
    topic = new_topic(6)
    group = f"{topic}-group"
    survivor = make_consumer(broker.bootstrap, group)
    closing.append(survivor)
    survivor.subscribe([topic])
    poller = Poller(survivor)
    poller.poll_until(sizes_are(poller, [6]), REBALANCE_WAIT_S, "the first member")
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD_CONSUMER,
            broker.bootstrap,
            group,
            topic,
            str(SESSION_TIMEOUT_MS),
            str(HEARTBEAT_INTERVAL_MS),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    child_assigned: list[int] = []
    try:
        threading.Thread(target=_read_counts, args=(child, child_assigned), daemon=True).start()
        poller.poll_until(
            lambda: len(survivor.assignment()) == 3 and child_assigned[-1:] == [3],
            CHILD_START_S,
            "the child joining",
        )
    finally:
        child.kill()
        child.wait(10)
    took_s = poller.poll_until(sizes_are(poller, [6]), REBALANCE_WAIT_S, "the takeover")
    session_s = SESSION_TIMEOUT_MS / 1000
    assert session_s - 1.5 <= took_s <= session_s + 10, f"takeover after {took_s:.1f} s"


def _read_counts(child: subprocess.Popen[str], counts: list[int]) -> None:
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("assigned "):
            counts.append(int(line.split()[1]))


def test_committed_offsets_survive_a_broker_kill_and_a_new_consumer_resumes_after_them(
    tmp_path: Path, closing: list[Consumer]
) -> None:
    with running_broker(tmp_path / "broker", RESTART_OVERRIDES) as process:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        admin.create_topics([NewTopic("resume", 3, 1)])["resume"].result(30)
        produce(process.bootstrap, "resume", 3, 10)
        first = make_consumer(process.bootstrap, "resumers")
        closing.append(first)
        first.subscribe(["resume"])
        poller = Poller(first)
        poller.poll_until(lambda: len(poller.all_records()) >= 12, REBALANCE_WAIT_S, "records")
        consumed = poller.all_records()
        first.commit(asynchronous=False)
        positions = {tp.partition: tp.offset for tp in first.position(first.assignment())}
        first.close()
        closing.remove(first)

        process.kill()
        process.restart()

        second = make_consumer(process.bootstrap, "resumers")
        closing.append(second)
        committed = second.committed([TopicPartition("resume", p) for p in range(3)], timeout=30)
        assert {tp.partition: tp.offset for tp in committed} == positions
        second.subscribe(["resume"])
        poller = Poller(second)
        remaining = 30 - len(consumed)
        poller.poll_until(
            lambda: len(poller.all_records()) >= remaining, REBALANCE_WAIT_S, "the rest"
        )
        time_after = time.monotonic() + 1
        while time.monotonic() < time_after:
            message = second.poll(POLL_S)
            assert message is None, "nothing beyond the rest"
        resumed = poller.records[id(second)]
        assert len(resumed) == len(set(resumed)) == remaining
        assert set(resumed) | consumed == {(p, o) for p in range(3) for o in range(10)}
        assert all(offset >= positions[partition] for partition, offset in resumed)


def test_cooperative_sticky_consumers_split_and_take_over_partitions(
    broker: BrokerProcess, new_topic: Callable[..., str], closing: list[Consumer]
) -> None:
    topic = new_topic(6)
    group = f"{topic}-group"
    poller = Poller()
    for count, expected in ((1, [6]), (2, [3, 3])):
        consumer = make_consumer(
            broker.bootstrap, group, **{"partition.assignment.strategy": "cooperative-sticky"}
        )
        closing.append(consumer)
        consumer.subscribe([topic])
        poller.add(consumer)
        poller.poll_until(sizes_are(poller, expected), REBALANCE_WAIT_S, f"{count} members")
    leaving = poller.consumers.pop()
    leaving.close()
    closing.remove(leaving)
    poller.poll_until(sizes_are(poller, [6]), REBALANCE_WAIT_S, "the takeover")


def test_a_restarted_static_member_gets_its_partitions_back_without_disturbing_others(
    broker: BrokerProcess, new_topic: Callable[..., str], closing: list[Consumer]
) -> None:
    topic = new_topic(6)
    group = f"{topic}-group"
    revoked: list[list[int]] = []

    def on_revoke(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked.append([tp.partition for tp in partitions])

    steady = make_consumer(broker.bootstrap, group)
    closing.append(steady)
    steady.subscribe([topic], on_revoke=on_revoke)
    static_config = {"group.instance.id": f"{topic}-instance", "session.timeout.ms": 20_000}
    static = make_consumer(broker.bootstrap, group, **static_config)
    closing.append(static)
    static.subscribe([topic])
    poller = Poller(steady, static)
    poller.poll_until(sizes_are(poller, [3, 3]), REBALANCE_WAIT_S, "two members")
    static_partitions = sorted(tp.partition for tp in static.assignment())
    revoked.clear()

    static.close()  # a static member does not send LeaveGroup
    closing.remove(static)
    poller.remove(static)
    restarted = make_consumer(broker.bootstrap, group, **static_config)
    closing.append(restarted)
    restarted.subscribe([topic])
    poller.add(restarted)
    poller.poll_until(sizes_are(poller, [3, 3]), REBALANCE_WAIT_S, "the static member back")
    assert sorted(tp.partition for tp in restarted.assignment()) == static_partitions
    assert revoked == [], "the other member kept its partitions throughout"


def test_admin_lists_describes_and_deletes_groups_and_their_offsets(
    broker: BrokerProcess, new_topic: Callable[..., str], admin: AdminClient
) -> None:
    topic = new_topic(2)
    produce(broker.bootstrap, topic, 2, 3)
    group = f"{topic}-group"
    consumer = make_consumer(broker.bootstrap, group)
    try:
        consumer.subscribe([topic])
        poller = Poller(consumer)
        poller.poll_until(lambda: len(poller.all_records()) == 6, REBALANCE_WAIT_S, "records")
        consumer.commit(asynchronous=False)
        described = admin.describe_consumer_groups([group])[group].result(30)
        assert described.state is ConsumerGroupState.STABLE
        assert [member.client_id for member in described.members] == ["rdkafka"]
        assert sorted(tp.partition for tp in described.members[0].assignment.topic_partitions) == [
            0,
            1,
        ]
    finally:
        consumer.close()
    listed = admin.list_consumer_groups().result(30)
    assert group in {item.group_id for item in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result(30)
    assert described.state is ConsumerGroupState.EMPTY
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    fetched = offsets[group].result(30)
    assert sorted((tp.partition, tp.offset) for tp in fetched.topic_partitions) == [(0, 3), (1, 3)]
    admin.delete_consumer_groups([group])[group].result(30)
    listed = admin.list_consumer_groups().result(30)
    assert group not in {item.group_id for item in listed.valid}
