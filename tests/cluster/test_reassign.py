"""Moving partition replicas between the brokers of a 4-node cluster of real processes,
with `platform topics reassign`.

A partition moves off its leader while an idempotent acks=all producer writes: every
acknowledged record is read back exactly once from the new replicas, the leadership moved,
and the broker that left no longer holds the partition's directory. A reassignment to a
stopped broker stays in progress, shows in --list and `cluster status`, refuses a second
target, and --cancel takes it back. Bad input is refused with a clear message and changes
nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from cluster_workload import (
    AckedLog,
    check_acked,
    producer,
    read_partitions,
    wait_healed,
)
from cluster_workload import create_topic as create_new_topic
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from eventplatform.cli import main
from eventplatform.testing import LocalCluster
from eventplatform.tools.cluster_status import fetch_cluster_status

BROKERS = 4
WAIT_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster.create(
        tmp_path_factory.mktemp("cluster"), BROKERS, ["min.insync.replicas=2"]
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


def create_topic(bootstrap: str, name: str, partitions: int, replication: int) -> None:
    """Create a topic this module alone names; a retried CreateTopics whose first attempt
    took effect (a slow answer under load) finds it there, and that is the same topic."""
    try:
        create_new_topic(bootstrap, name, partitions, replication)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_for(
            lambda: all(
                p.leader >= 0
                for p in admin.list_topics(name, timeout=10).topics[name].partitions.values()
            ),
            WAIT_TIMEOUT_S,
            f"leaders of {name}",
        )


def reassign(cluster: LocalCluster, *arguments: str) -> Result:
    runner = CliRunner()
    return runner.invoke(
        main, ["topics", "reassign", *arguments, "--data-dir", str(cluster.directory)]
    )


def partition_state(cluster: LocalCluster, topic: str, partition: int = 0) -> dict[str, Any]:
    status = fetch_cluster_status(data_dir=cluster.directory, controllers=None)
    state: dict[str, Any] = status["topics"][topic]["partitions"][partition]
    return state


def holds(cluster: LocalCluster, broker: int, topic: str, partition: int = 0) -> bool:
    return (cluster.directory / f"node-{broker}" / f"{topic}-{partition}").is_dir()


def wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class Writer:
    """An idempotent acks=all producer writing numbered values from a thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.acked = AckedLog()
        self.topic = topic
        self.sent = 0
        self._producer = producer(bootstrap)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            value = f"writer-{self.sent}".encode()
            self._producer.produce(
                self.topic, value, partition=0, on_delivery=self.acked.on_delivery
            )
            self.sent += 1
            self._producer.poll(0)
            time.sleep(0.002)

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert self._producer.flush(FLUSH_TIMEOUT_S) == 0, "records still unacknowledged"


def test_a_partition_moves_off_its_leader_under_writes(cluster: LocalCluster) -> None:
    topic = "moving"
    create_topic(cluster.bootstrap, topic, 1, 3)
    before = partition_state(cluster, topic)
    old_leader = before["leader"]
    (spare,) = set(cluster.broker_ids) - set(before["replicas"])
    target = [spare, *(r for r in before["replicas"] if r != old_leader)]
    assert holds(cluster, old_leader, topic) and not holds(cluster, spare, topic)

    with Writer(cluster.bootstrap, topic) as writer:
        wait_for(lambda: len(writer.acked.acked) >= 200, WAIT_TIMEOUT_S, "records before")
        replicas = ",".join(str(r) for r in target)
        result = reassign(
            cluster, topic, "--partition", "0", "--replicas", replicas, "--wait", "--timeout", "30"
        )
        assert result.exit_code == 0, result.output
        assert f"{topic}-0: replicas {target}" in result.output
        moved = len(writer.acked.acked)
        wait_for(lambda: len(writer.acked.acked) >= moved + 200, WAIT_TIMEOUT_S, "records after")

    assert not writer.acked.failed, writer.acked.failed[:5]
    after = partition_state(cluster, topic)
    assert after["replicas"] == target
    assert sorted(after["isr"]) == sorted(target)
    assert after["leader"] in target and after["leader"] != old_leader
    assert after["leader_epoch"] > before["leader_epoch"]
    assert (after["adding"], after["removing"], after["target"]) == ([], [], [])
    wait_for(lambda: not holds(cluster, old_leader, topic), WAIT_TIMEOUT_S, "the old copy gone")
    assert holds(cluster, spare, topic)

    found = read_partitions(cluster.bootstrap, topic, [0])
    check_acked(writer.acked.acked, found)
    assert len(found[0]) >= len(writer.acked.acked) >= 400


def test_a_stalled_reassignment_is_listed_refuses_another_and_cancels(
    cluster: LocalCluster,
) -> None:
    topic = "stalled"
    create_topic(cluster.bootstrap, topic, 1, 2)
    before = partition_state(cluster, topic)
    spare = max(set(cluster.broker_ids) - set(before["replicas"]))
    target = [before["replicas"][0], spare]
    cluster.kill(spare)  # registered, but never catches up while it is down
    try:
        result = reassign(cluster, topic, "--partition", "0", "--replicas", f"{target[0]},{spare}")
        assert result.exit_code == 0, result.output
        assert f"reassigning {topic}-0 from {before['replicas']} to {target}" in result.output

        listed = reassign(cluster, "--list")
        assert listed.exit_code == 0, listed.output
        assert f"{topic}-0  replicas {before['replicas'] + [spare]}  target {target}" in (
            listed.output
        )
        assert f"adding [{spare}]" in listed.output
        status = CliRunner().invoke(
            main, ["cluster", "status", "--data-dir", str(cluster.directory)]
        )
        assert f"reassigning: {topic}-0 to {target}" in status.output, status.output

        again = reassign(cluster, topic, "--partition", "0", "--replicas", "1,2")
        assert again.exit_code == 1
        assert "already being reassigned" in again.output

        waited = reassign(
            cluster,
            topic,
            "--partition",
            "0",
            "--replicas",
            f"{target[0]},{spare}",
            "--wait",
            "--timeout",
            "1",
        )
        assert waited.exit_code == 1  # refused (already moving), so nothing to wait on
        cancelled = reassign(cluster, topic, "--partition", "0", "--cancel")
        assert cancelled.exit_code == 0, cancelled.output
        assert f"cancelled the reassignment of {topic}-0" in cancelled.output
        assert "no reassignments in progress" in reassign(cluster, "--list").output
        after = partition_state(cluster, topic)
        assert after["replicas"] == before["replicas"]
        assert after["target"] == [] and after["adding"] == []

        missing = reassign(cluster, topic, "--partition", "0", "--cancel")
        assert missing.exit_code == 1
        assert "is not being reassigned" in missing.output
    finally:
        cluster.start([spare])
    wait_healed(cluster)
    assert not holds(cluster, spare, topic)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (("nope", "--partition", "0", "--replicas", "1,2"), "no partition nope/0"),
        (("checked", "--partition", "7", "--replicas", "1,2"), "no partition checked/7"),
        (("checked", "--partition", "0", "--replicas", "1,9"), "brokers [9] are not registered"),
        (("checked", "--partition", "0", "--replicas", "1,1"), "a broker is named twice"),
        (("checked", "--partition", "0", "--replicas", ""), "give broker ids"),
        (("checked", "--partition", "0", "--replicas", "a,b"), "give broker ids"),
        (("checked", "--partition", "0"), "give the new replicas with --replicas"),
        (("checked",), "give TOPIC --partition N, or --plan FILE"),
        (("__consumer_offsets", "--partition", "0", "--replicas", "1"), "cannot be moved"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    cluster: LocalCluster, arguments: tuple[str, ...], message: str
) -> None:
    if (
        "checked"
        not in fetch_cluster_status(data_dir=cluster.directory, controllers=None)["topics"]
    ):
        create_topic(cluster.bootstrap, "checked", 1, 2)
    before = partition_state(cluster, "checked")
    result = reassign(cluster, *arguments)
    assert result.exit_code != 0
    assert message in result.output
    assert partition_state(cluster, "checked")["replicas"] == before["replicas"]
    assert "no reassignments in progress" in reassign(cluster, "--list").output


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ("{not json", "the plan is not valid JSON"),
        ('{"version": 1}', 'must be an object with a "partitions" list'),
        ('{"version": 2, "partitions": []}', "plan version 2 is not 1"),
        ('{"partitions": [{"topic": "checked", "partition": 0}]}', '"replicas" must be a list'),
        ('{"partitions": [{"topic": "checked", "partition": "0", "replicas": [1]}]}', "partition"),
        ('{"partitions": [{"topic": "checked", "partition": 0, "replica": [1]}]}', "unknown"),
        ('{"partitions": []}', "names no partitions"),
        # one good entry and one bad: neither starts
        (
            '{"partitions": [{"topic": "checked", "partition": 0, "replicas": [4, 3]},'
            ' {"topic": "checked", "partition": 0, "replicas": [1, 2]}]}',
            "more than once",
        ),
        (
            '{"partitions": [{"topic": "checked", "partition": 0, "replicas": [4, 3]},'
            ' {"topic": "nope", "partition": 0, "replicas": [1, 2]}]}',
            "no partition nope/0",
        ),
    ],
)
def test_a_bad_plan_is_refused_and_changes_nothing(
    cluster: LocalCluster, tmp_path: Path, plan: str, message: str
) -> None:
    if (
        "checked"
        not in fetch_cluster_status(data_dir=cluster.directory, controllers=None)["topics"]
    ):
        create_topic(cluster.bootstrap, "checked", 1, 2)
    before = partition_state(cluster, "checked")
    path = tmp_path / "plan.json"
    path.write_text(plan)
    result = reassign(cluster, "--plan", str(path))
    assert result.exit_code != 0
    assert message in result.output, result.output
    assert partition_state(cluster, "checked")["replicas"] == before["replicas"]
    assert "no reassignments in progress" in reassign(cluster, "--list").output


def test_a_plan_moves_several_partitions(cluster: LocalCluster, tmp_path: Path) -> None:
    topic = "planned"
    create_topic(cluster.bootstrap, topic, 2, 2)
    brokers = sorted(cluster.broker_ids)
    targets = {0: brokers[2:], 1: brokers[:2]}
    entries = ", ".join(
        f'{{"topic": "{topic}", "partition": {p}, "replicas": {r}}}' for p, r in targets.items()
    )
    path = tmp_path / "plan.json"
    path.write_text(f'{{"version": 1, "partitions": [{entries}]}}')
    result = reassign(cluster, "--plan", str(path), "--wait", "--timeout", "30")
    assert result.exit_code == 0, result.output
    for partition, replicas in targets.items():
        assert partition_state(cluster, topic, partition)["replicas"] == replicas
        for broker in brokers:
            wait_for(
                lambda b=broker, p=partition: holds(cluster, b, topic, p) == (b in targets[p]),
                WAIT_TIMEOUT_S,
                f"broker {broker}'s copy of {topic}-{partition}",
            )


def test_a_new_active_controller_completes_a_reassignment(tmp_path: Path) -> None:
    """Brokers and a 3-voter quorum apart: the active controller dies while the new replica
    is down; once it is back, the next active controller completes the move."""
    cluster = LocalCluster.create(tmp_path, 3, ["min.insync.replicas=1"], controllers=3)
    cluster.start()
    try:
        topic = "handed-over"
        create_topic(cluster.bootstrap, topic, 1, 2)
        writer = producer(cluster.bootstrap)
        acked = AckedLog()
        for number in range(100):
            writer.produce(
                topic, f"writer-{number}".encode(), partition=0, on_delivery=acked.on_delivery
            )
        assert writer.flush(FLUSH_TIMEOUT_S) == 0
        del writer
        before = partition_state(cluster, topic)
        (spare,) = set(cluster.broker_ids) - set(before["replicas"])
        old_leader = before["leader"]
        target = [*(r for r in before["replicas"] if r != old_leader), spare]
        cluster.kill(spare)
        result = reassign(cluster, topic, "--partition", "0", "--replicas", f"{target[0]},{spare}")
        assert result.exit_code == 0, result.output

        active = fetch_cluster_status(data_dir=cluster.directory, controllers=None)["controller"]
        cluster.kill(active)
        wait_for(
            lambda: (
                fetch_cluster_status(data_dir=cluster.directory, controllers=None)["controller"]
                != active
            ),
            WAIT_TIMEOUT_S,
            "a new active controller",
        )
        assert partition_state(cluster, topic)["target"] == target  # still in progress
        cluster.start([spare])
        wait_for(
            lambda: partition_state(cluster, topic)["replicas"] == target,
            WAIT_TIMEOUT_S,
            "the reassignment to complete",
        )
        after = partition_state(cluster, topic)
        assert after["leader"] == target[0] and after["target"] == []
        wait_for(lambda: not holds(cluster, old_leader, topic), WAIT_TIMEOUT_S, "the old copy gone")
        cluster.start([active])
        found = read_partitions(cluster.bootstrap, topic, [0])
        check_acked(acked.acked, found)
        assert len(found[0]) == 100
    finally:
        cluster.stop()


def test_the_same_replicas_change_nothing_and_a_new_order_applies_at_once(
    cluster: LocalCluster,
) -> None:
    topic = "reordered"
    create_topic(cluster.bootstrap, topic, 1, 2)
    replicas = partition_state(cluster, topic)["replicas"]
    same = reassign(cluster, topic, "--partition", "0", "--replicas", ",".join(map(str, replicas)))
    assert same.exit_code == 0, same.output
    assert f"{topic}-0 already has the replicas {replicas}" in same.output
    flipped = list(reversed(replicas))
    result = reassign(
        cluster, topic, "--partition", "0", "--replicas", ",".join(map(str, flipped)), "--wait"
    )
    assert result.exit_code == 0, result.output
    assert partition_state(cluster, topic)["replicas"] == flipped
    assert all(holds(cluster, broker, topic) for broker in flipped)
