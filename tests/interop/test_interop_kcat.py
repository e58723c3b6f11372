"""kcat (librdkafka's command-line client) against a real broker process.

Metadata listing, producing with every codec, consuming from the beginning
and from the tail, offsets by timestamp, and a balanced consumer group of two
kcat processes. Every kcat run has a timeout.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Producer

from eventplatform.testing import BrokerProcess

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
KCAT_TIMEOUT_S = 30.0
GROUP_TIMEOUT_S = 45.0
LINE_FORMAT = "%p\t%o\t%k\t%s\n"
# ``-o`` in -G mode would override the committed offsets on every assignment.
FROM_COMMITTED_OR_EARLIEST = ("-X", "auto.offset.reset=earliest")
_REBALANCE = re.compile(r"rebalanced \(memberid [^)]*\): (assigned|revoked): (.*)$")


def kcat(broker: BrokerProcess, *arguments: str, stdin: str | None = None) -> str:
    """Run kcat to completion; returns stdout and fails the test on a non-zero exit."""
    completed = subprocess.run(
        [KCAT, "-b", broker.bootstrap, *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=KCAT_TIMEOUT_S,
        check=False,
    )
    assert completed.returncode == 0, f"kcat {arguments} failed:\n{completed.stderr}"
    return completed.stdout


@dataclass(frozen=True, slots=True)
class Line:
    partition: int
    offset: int
    key: str
    value: str


def parse_lines(output: str) -> list[Line]:
    lines = []
    for text in output.splitlines():
        partition, offset, key, value = text.split("\t")
        lines.append(Line(int(partition), int(offset), key, value))
    return lines


def keyed_input(count: int, prefix: str = "value") -> str:
    return "".join(f"key{index % 17}:{prefix}-{index}\n" for index in range(count))


def test_metadata_lists_the_broker_and_topic_partitions(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=3)

    metadata = json.loads(kcat(broker, "-L", "-J"))
    single = kcat(broker, "-L", "-t", topic)

    addresses = broker.bootstrap.split(",")
    nodes = list(range(1, len(addresses) + 1))
    assert [(entry["id"], entry["name"]) for entry in metadata["brokers"]] == list(
        zip(nodes, addresses, strict=True)
    )
    [described] = [entry for entry in metadata["topics"] if entry["topic"] == topic]
    assert [entry["partition"] for entry in described["partitions"]] == [0, 1, 2]
    for entry in described["partitions"]:
        assert sorted(replica["id"] for replica in entry["replicas"]) == nodes
        assert sorted(replica["id"] for replica in entry["isrs"]) == nodes
        assert entry["leader"] in nodes
    assert f'topic "{topic}" with 3 partitions:' in single


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_then_consume_from_the_beginning(
    broker: BrokerProcess, new_topic: Callable[..., str], codec: str
) -> None:
    topic = new_topic(partitions=3)
    count = 500

    kcat(
        broker,
        "-P",
        "-t",
        topic,
        "-K",
        ":",
        "-z",
        codec,
        "-H",
        "tool=kcat",
        stdin=keyed_input(count),
    )
    output = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%p\t%o\t%k\t%s\t%h\n")

    rows = [text.split("\t") for text in output.splitlines()]
    assert {row[4] for row in rows} == {"tool=kcat"}
    lines = [Line(int(p), int(o), k, v) for p, o, k, v, _ in rows]
    assert sorted(line.value for line in lines) == sorted(f"value-{i}" for i in range(count))
    for partition in {line.partition for line in lines}:
        offsets = [line.offset for line in lines if line.partition == partition]
        assert offsets == list(range(len(offsets)))
    partitions_of_key: dict[str, set[int]] = {}
    for line in lines:
        partitions_of_key.setdefault(line.key, set()).add(line.partition)
        index = int(line.value.removeprefix("value-"))
        assert line.key == f"key{index % 17}"
    assert all(len(partitions) == 1 for partitions in partitions_of_key.values())
    for key in partitions_of_key:
        indexes = [int(line.value[6:]) for line in lines if line.key == key]
        assert indexes == sorted(indexes), f"records of {key} out of order"


def test_consume_the_last_ten_of_each_partition(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """``-o -10`` starts ten records before each partition's end (all of a shorter one)."""
    topic = new_topic(partitions=3)
    sizes = {0: 25, 1: 5, 2: 10}
    for partition, size in sizes.items():
        records = keyed_input(size, prefix=f"p{partition}")
        kcat(broker, "-P", "-t", topic, "-p", str(partition), "-K", ":", stdin=records)

    lines = parse_lines(kcat(broker, "-C", "-t", topic, "-o", "-10", "-e", "-f", LINE_FORMAT))

    by_partition = {
        partition: [(line.offset, line.value) for line in lines if line.partition == partition]
        for partition in sizes
    }
    assert by_partition == {
        partition: [(offset, f"p{partition}-{offset}") for offset in range(max(0, size - 10), size)]
        for partition, size in sizes.items()
    }


def test_query_offsets_by_timestamp(broker: BrokerProcess, new_topic: Callable[..., str]) -> None:
    topic = new_topic(partitions=2)
    base_ms = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for index in range(10):
        producer.produce(topic, value=b"v", partition=0, timestamp=base_ms + 1_000 * index)
    assert producer.flush(KCAT_TIMEOUT_S) == 0

    queries = {
        "before": base_ms - 1,
        "exact": base_ms + 4_000,
        "between": base_ms + 6_500,
        "after": base_ms + 10_000,
    }
    answers = {}
    for name, timestamp in queries.items():
        result = json.loads(kcat(broker, "-Q", "-J", "-t", f"{topic}:0:{timestamp}"))
        answers[name] = result[topic]["0"]["offset"]
    empty = json.loads(kcat(broker, "-Q", "-J", "-t", f"{topic}:1:{base_ms}"))

    assert answers == {"before": 0, "exact": 4, "between": 7, "after": -1}
    assert empty[topic]["1"]["offset"] == -1


# ---------------------------------------------------------------- balanced group


@dataclass
class GroupMember:
    """One ``kcat -G`` process; its stdout lines and latest assignment, read by threads."""

    process: subprocess.Popen[str]
    lines: list[Line] = field(default_factory=list)
    assignment: set[int] | None = None
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(cls, broker: BrokerProcess, group: str, topic: str) -> GroupMember:
        process = subprocess.Popen(
            [
                *(KCAT, "-b", broker.bootstrap, "-G", group, *FROM_COMMITTED_OR_EARLIEST),
                *("-u", "-f", LINE_FORMAT, topic),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        member = cls(process)
        threading.Thread(target=member._read_stdout, daemon=True).start()
        threading.Thread(target=member._read_stderr, daemon=True).start()
        return member

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for text in self.process.stdout:
            with self.lock:
                self.lines.extend(parse_lines(text))

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for text in self.process.stderr:
            match = _REBALANCE.search(text.strip())
            with self.lock:
                self.errors.append(text)
                if match and match.group(1) == "assigned":
                    self.assignment = {int(p) for p in re.findall(r"\[(\d+)\]", match.group(2))}
                elif match:
                    self.assignment = set()

    def stop(self) -> int:
        """SIGTERM: kcat closes its consumer, which commits and leaves the group."""
        self.process.terminate()
        try:
            return self.process.wait(KCAT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


def _balanced(members: Sequence[GroupMember], partitions: set[int]) -> bool:
    assignments = [member.assignment for member in members]
    if any(not assignment for assignment in assignments):
        return False
    union = set().union(*assignments)  # type: ignore[arg-type]
    total = sum(len(assignment) for assignment in assignments)  # type: ignore[arg-type]
    return union == partitions and total == len(partitions)


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_balanced_consumer_group_splits_partitions_and_commits(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """Two ``kcat -G`` members share the partitions, read each record once, and commit.

    A third member of the same group started afterwards resumes at the
    committed offsets and so finds nothing; a member of a new group reads all.
    """
    topic = new_topic(partitions=4)
    group = f"kcat-group-{time.monotonic_ns()}"
    count = 200
    members = [GroupMember.start(broker, group, topic) for _ in range(2)]
    try:
        balanced = _wait_for(lambda: _balanced(members, set(range(4))), GROUP_TIMEOUT_S)
        assert balanced, [member.errors for member in members]
        kcat(broker, "-P", "-t", topic, "-K", ":", stdin=keyed_input(count))
        consumed = _wait_for(
            lambda: sum(len(member.lines) for member in members) >= count, GROUP_TIMEOUT_S
        )
        assignments = [set(member.assignment or ()) for member in members]
    finally:
        exit_codes = [member.stop() for member in members]

    assert consumed, [len(member.lines) for member in members]
    assert exit_codes == [0, 0]
    every_line = [line for member in members for line in member.lines]
    assert sorted(line.value for line in every_line) == sorted(f"value-{i}" for i in range(count))
    for member, assignment in zip(members, assignments, strict=True):
        assert {line.partition for line in member.lines} <= assignment

    resumed = kcat(broker, "-G", group, *FROM_COMMITTED_OR_EARLIEST, "-e", "-f", LINE_FORMAT, topic)
    fresh = kcat(
        broker, "-G", f"{group}-new", *FROM_COMMITTED_OR_EARLIEST, "-e", "-f", LINE_FORMAT, topic
    )
    assert parse_lines(resumed) == []
    assert len(parse_lines(fresh)) == count
