"""``platform groups`` and ``platform consume --group`` against a real broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from confluent_kafka import Consumer

if TYPE_CHECKING:
    from conftest import Platform

    from eventplatform.testing import BrokerProcess

WAIT_S = "5"
JOIN_TIMEOUT_S = 15.0


def offset_rows(describe_output: str) -> dict[int, list[str]]:
    """``partition -> [committed, log-end, lag, member]`` from ``groups describe``."""
    lines = describe_output.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("topic "))
    rows = {}
    for line in lines[start + 1 :]:
        _topic, partition, *rest = line.split()
        rows[int(partition)] = rest
    return rows


def reset_rows(reset_output: str) -> dict[int, tuple[str, str]]:
    """``partition -> (current, new)`` from ``groups reset-offsets``."""
    rows = {}
    for line in reset_output.splitlines()[1:]:
        if not line or line.startswith(("plan only", "group ")):
            continue
        _topic, partition, current, new, *_note = line.split()
        rows[int(partition)] = (current, new)
    return rows


def seed_topic(platform: Platform, topic: str, records_per_partition: int = 4) -> None:
    platform.ok("topics", "create", topic, "--partitions", "2")
    lines = b"".join(f"r{number}\n".encode() for number in range(records_per_partition))
    for partition in ("0", "1"):
        platform.ok("produce", topic, "--partition", partition, input=lines)


@contextmanager
def live_member(bootstrap: str, group: str, topic: str) -> Iterator[Consumer]:
    """A group member that holds an assignment until the block ends."""
    assigned: list[bool] = []
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    consumer.subscribe([topic], on_assign=lambda _consumer, _partitions: assigned.append(True))
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.1)
    assert assigned, "the member never got an assignment"
    try:
        yield consumer
    finally:
        consumer.close()


def test_consume_with_a_group_commits_and_resumes(platform: Platform, unique_name: str) -> None:
    seed_topic(platform, unique_name)
    group = f"{unique_name}-group"

    first = platform.ok(
        "consume",
        unique_name,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "5",
        "--timeout",
        WAIT_S,
    )
    second = platform.ok(
        "consume", unique_name, "--group", group, "--max-messages", "3", "--timeout", WAIT_S
    )

    assert len(first.stdout.splitlines()) == 5
    assert len(second.stdout.splitlines()) == 3
    assert sorted(first.stdout.splitlines() + second.stdout.splitlines()) == sorted(
        [f"r{number}" for number in range(4)] * 2
    )


def test_describe_shows_committed_offsets_log_end_and_lag(
    platform: Platform, unique_name: str
) -> None:
    seed_topic(platform, unique_name)
    group = f"{unique_name}-group"
    platform.ok(
        "consume",
        unique_name,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "8",
        "--timeout",
        WAIT_S,
    )
    platform.ok("produce", unique_name, "--partition", "1", input=b"late-1\nlate-2\nlate-3\n")

    described = platform.ok("groups", "describe", group).stdout

    assert f"group: {group}" in described
    assert "state: Empty" in described
    assert "members: 0" in described
    assert offset_rows(described) == {0: ["4", "4", "0", "-"], 1: ["4", "7", "3", "-"]}
    assert group in platform.ok("groups", "list").stdout
    listed = {
        line.split()[0]: line.split()[1]
        for line in platform.ok("groups", "list").stdout.splitlines()[1:]
    }
    assert listed[group] == "Empty"


def test_describe_shows_live_members_and_their_partitions(
    platform: Platform, broker: BrokerProcess, unique_name: str
) -> None:
    seed_topic(platform, unique_name)
    group = f"{unique_name}-group"

    with live_member(broker.bootstrap, group, unique_name) as member:
        described = platform.ok("groups", "describe", group).stdout
        member_id = member.memberid()

    assert "state: Stable" in described
    assert "members: 1" in described
    assert member_id is not None
    assert member_id in described
    assert f"{unique_name}[0] {unique_name}[1]" in described


def test_describe_of_an_unknown_group_fails(platform: Platform, unique_name: str) -> None:
    assert platform.fails("groups", "describe", unique_name) == (
        f"Error: group '{unique_name}' does not exist"
    )


def test_reset_offsets_to_each_target(platform: Platform, unique_name: str) -> None:
    seed_topic(platform, unique_name)
    group = f"{unique_name}-group"
    platform.ok(
        "consume",
        unique_name,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "8",
        "--timeout",
        WAIT_S,
    )

    earliest = platform.ok(
        "groups", "reset-offsets", group, "--topic", unique_name, "--to-earliest", "--execute"
    )
    assert reset_rows(earliest.stdout) == {0: ("4", "0"), 1: ("4", "0")}

    one = platform.ok(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        unique_name,
        "--partition",
        "1",
        "--to-offset",
        "3",
        "--execute",
    )
    assert reset_rows(one.stdout) == {1: ("0", "3")}

    clamped = platform.ok(
        "groups", "reset-offsets", group, "--topic", unique_name, "--to-offset", "99", "--execute"
    )
    assert reset_rows(clamped.stdout) == {0: ("0", "4"), 1: ("3", "4")}
    assert "past the log end" in clamped.stdout

    platform.ok(
        "groups", "reset-offsets", group, "--topic", unique_name, "--to-earliest", "--execute"
    )
    latest = platform.ok(
        "groups", "reset-offsets", group, "--topic", unique_name, "--to-latest", "--execute"
    )
    assert reset_rows(latest.stdout) == {0: ("0", "4"), 1: ("0", "4")}

    assert offset_rows(platform.ok("groups", "describe", group).stdout) == {
        0: ["4", "4", "0", "-"],
        1: ["4", "4", "0", "-"],
    }


def test_reset_offsets_to_a_datetime(platform: Platform, unique_name: str) -> None:
    platform.ok("topics", "create", unique_name, "--partitions", "1")
    platform.ok("produce", unique_name, input=b"a\nb\n")
    time.sleep(0.05)
    boundary = datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="milliseconds")
    time.sleep(0.05)
    platform.ok("produce", unique_name, input=b"c\n")
    group = f"{unique_name}-group"
    iso = boundary.replace("+00:00", "Z")

    reset = platform.ok(
        "groups", "reset-offsets", group, "--topic", unique_name, "--to-datetime", iso, "--execute"
    )
    assert reset_rows(reset.stdout) == {0: ("-", "2")}

    later = platform.ok(
        "groups",
        "reset-offsets",
        group,
        "--topic",
        unique_name,
        "--to-datetime",
        "2999-01-01T00:00:00Z",
        "--execute",
    )
    assert reset_rows(later.stdout) == {0: ("2", "3")}
    assert "no record at or after the datetime" in later.stdout


def test_dry_run_changes_nothing(platform: Platform, unique_name: str) -> None:
    seed_topic(platform, unique_name)
    group = f"{unique_name}-group"
    platform.ok(
        "consume",
        unique_name,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "8",
        "--timeout",
        WAIT_S,
    )

    dry = platform.ok(
        "groups", "reset-offsets", group, "--topic", unique_name, "--to-earliest", "--dry-run"
    )

    assert reset_rows(dry.stdout) == {0: ("4", "0"), 1: ("4", "0")}
    assert "plan only: no offsets were changed" in dry.stdout
    assert offset_rows(platform.ok("groups", "describe", group).stdout) == {
        0: ["4", "4", "0", "-"],
        1: ["4", "4", "0", "-"],
    }


def test_reset_offsets_plans_unless_told_to_execute(platform: Platform, unique_name: str) -> None:
    seed_topic(platform, unique_name)
    group = f"{unique_name}-group"
    platform.ok(
        "consume",
        unique_name,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "8",
        "--timeout",
        WAIT_S,
    )

    plan = platform.ok("groups", "reset-offsets", group, "--topic", unique_name, "--to-earliest")

    assert reset_rows(plan.stdout) == {0: ("4", "0"), 1: ("4", "0")}
    assert "add --execute to commit them" in plan.stdout
    assert offset_rows(platform.ok("groups", "describe", group).stdout) == {
        0: ["4", "4", "0", "-"],
        1: ["4", "4", "0", "-"],
    }
    assert (
        "exclude each other"
        in platform(
            "groups",
            "reset-offsets",
            group,
            "--topic",
            unique_name,
            "--to-earliest",
            "--execute",
            "--dry-run",
        ).output
    )


def test_reset_is_refused_while_the_group_has_members(
    platform: Platform, broker: BrokerProcess, unique_name: str
) -> None:
    seed_topic(platform, unique_name)
    group = f"{unique_name}-group"

    with live_member(broker.bootstrap, group, unique_name):
        error = platform.fails(
            "groups", "reset-offsets", group, "--topic", unique_name, "--to-earliest"
        )

    assert error.startswith(f"Error: group '{group}' is Stable with 1 active members")
    after = platform.ok(
        "groups", "reset-offsets", group, "--topic", unique_name, "--to-latest", "--execute"
    )
    assert reset_rows(after.stdout) == {0: ("-", "4"), 1: ("-", "4")}


def test_reset_needs_exactly_one_target_and_a_real_partition(
    platform: Platform, unique_name: str
) -> None:
    seed_topic(platform, unique_name)

    assert "exactly one of" in platform.fails(
        "groups", "reset-offsets", "g", "--topic", unique_name
    )
    assert "exactly one of" in platform.fails(
        "groups", "reset-offsets", "g", "--topic", unique_name, "--to-earliest", "--to-latest"
    )
    assert "partition 7 does not exist" in platform.fails(
        "groups", "reset-offsets", "g", "--topic", unique_name, "--partition", "7", "--to-latest"
    )
    assert f"topic '{unique_name}-missing' does not exist" in platform.fails(
        "groups", "reset-offsets", "g", "--topic", f"{unique_name}-missing", "--to-latest"
    )
