"""``platform groups``: list consumer groups, describe one with its lag, reset its offsets.

Lag is the log end offset (the high watermark) minus the committed offset;
a partition without a commit has no lag to report. Offset resets go
through the admin API's OffsetCommit and are refused while the group has
members, because a live member would overwrite the new offsets with its
next commit. Planning a reset (which offset each partition gets) is the
pure :func:`plan_reset`; the shell only fetches the offsets it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, OffsetSpec

from eventplatform.tools.arguments import ClusterSettings, parse_timestamp_ms
from eventplatform.tools.errors import GroupActiveError, InvalidInputError, KafkaRequestError
from eventplatform.tools.kafka_clients import (
    EARLIEST,
    LATEST,
    admin_client,
    describe_error,
    error_of_request,
    partition_offsets,
    topic_partition_ids,
    wait_for,
)
from eventplatform.tools.tables import format_table

Echo = Callable[[str], Any]
NO_COMMITTED_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group never committed here
NO_OFFSET_FOR_TIMESTAMP = -1
UNKNOWN_STATE = "Unknown"
GROUP_STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: UNKNOWN_STATE,
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
INACTIVE_STATES = frozenset({"Empty", "Dead"})

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class MemberSummary:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[TopicPartitionKey, ...]


@dataclass(frozen=True)
class PartitionLag:
    """One partition's position: ``None`` where the group never committed or the end is unknown."""

    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    lag: int | None
    member_id: str | None


@dataclass(frozen=True)
class GroupSummary:
    group_id: str
    state: str
    assignor: str
    members: tuple[MemberSummary, ...]
    partitions: tuple[PartitionLag, ...]


class ResetKind(StrEnum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    DATETIME = "datetime"


@dataclass(frozen=True)
class ResetTarget:
    """Where to move the offsets: ``offset`` for OFFSET, ``timestamp_ms`` for DATETIME."""

    kind: ResetKind
    offset: int | None = None
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class OffsetReset:
    """One partition's planned move; ``note`` says why ``new`` differs from what was asked."""

    partition: int
    current: int | None
    new: int
    note: str = ""


def state_name(state: object) -> str:
    """Kafka's name for a group state, as DescribeGroups reports it."""
    if isinstance(state, ConsumerGroupState):
        return GROUP_STATE_NAMES.get(state, UNKNOWN_STATE)
    return UNKNOWN_STATE


def lag_of(committed: int | None, log_end: int | None) -> int | None:
    """How many records the group is behind; never negative, ``None`` when not known."""
    if committed is None or log_end is None:
        return None
    return max(0, log_end - committed)


def partition_lags(
    committed: Mapping[TopicPartitionKey, int | None],
    log_ends: Mapping[TopicPartitionKey, int],
    owners: Mapping[TopicPartitionKey, str],
) -> list[PartitionLag]:
    """Every partition the group committed on or has assigned, sorted by topic and partition."""
    keys = sorted(set(committed) | set(owners))
    return [
        PartitionLag(
            topic=topic,
            partition=partition,
            committed=committed.get((topic, partition)),
            log_end=log_ends.get((topic, partition)),
            lag=lag_of(committed.get((topic, partition)), log_ends.get((topic, partition))),
            member_id=owners.get((topic, partition)),
        )
        for topic, partition in keys
    ]


def group_description_lines(summary: GroupSummary) -> list[str]:
    """The describe output: the group's state, its members, then one row per partition."""
    lines = [
        f"group: {summary.group_id}",
        f"state: {summary.state}",
        f"assignor: {summary.assignor or '-'}",
        f"members: {len(summary.members)}",
    ]
    if summary.members:
        lines.append("")
        lines += format_table(
            ("member", "client", "host", "partitions"),
            (
                (
                    member.member_id,
                    member.client_id,
                    member.host,
                    " ".join(f"{topic}[{partition}]" for topic, partition in member.assignment),
                )
                for member in summary.members
            ),
        )
    lines.append("")
    if not summary.partitions:
        lines.append("no committed offsets")
        return lines
    lines += format_table(
        ("topic", "partition", "committed", "log-end", "lag", "member"),
        (
            (row.topic, row.partition, row.committed, row.log_end, row.lag, row.member_id)
            for row in summary.partitions
        ),
    )
    return lines


def reset_target(
    *, to_earliest: bool, to_latest: bool, to_offset: int | None, to_datetime: str | None
) -> ResetTarget:
    """The one target the options name; none or several is an error."""
    targets = []
    if to_earliest:
        targets.append(ResetTarget(ResetKind.EARLIEST))
    if to_latest:
        targets.append(ResetTarget(ResetKind.LATEST))
    if to_offset is not None:
        targets.append(ResetTarget(ResetKind.OFFSET, offset=to_offset))
    if to_datetime is not None:
        targets.append(
            ResetTarget(ResetKind.DATETIME, timestamp_ms=parse_timestamp_ms(to_datetime))
        )
    if len(targets) != 1:
        raise InvalidInputError(
            "give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime"
        )
    return targets[0]


def new_offset(
    target: ResetTarget, *, earliest: int, latest: int, at_timestamp: int | None
) -> tuple[int, str]:
    """The offset one partition moves to, and a note when it is not exactly what was asked.

    An explicit offset outside ``[earliest, latest]`` is clamped into it, as
    Kafka's own tool does; a datetime later than every record means the end.
    """
    if target.kind is ResetKind.EARLIEST:
        return earliest, ""
    if target.kind is ResetKind.LATEST:
        return latest, ""
    if target.kind is ResetKind.OFFSET:
        assert target.offset is not None
        if target.offset < earliest:
            return earliest, f"{target.offset} is before the log start"
        if target.offset > latest:
            return latest, f"{target.offset} is past the log end"
        return target.offset, ""
    if at_timestamp is None or at_timestamp == NO_OFFSET_FOR_TIMESTAMP:
        return latest, "no record at or after the datetime"
    return at_timestamp, ""


def plan_reset(
    target: ResetTarget,
    partitions: Sequence[int],
    *,
    current: Mapping[int, int | None],
    earliest: Mapping[int, int],
    latest: Mapping[int, int],
    at_timestamp: Mapping[int, int],
) -> list[OffsetReset]:
    """The new committed offset of every partition in ``partitions``."""
    plan = []
    for partition in partitions:
        offset, note = new_offset(
            target,
            earliest=earliest[partition],
            latest=latest[partition],
            at_timestamp=at_timestamp.get(partition),
        )
        plan.append(OffsetReset(partition, current.get(partition), offset, note))
    return plan


def reset_lines(topic: str, plan: Sequence[OffsetReset]) -> list[str]:
    return format_table(
        ("topic", "partition", "current", "new", "note"),
        ((topic, row.partition, row.current, row.new, row.note or "") for row in plan),
    )


def list_groups(cluster: ClusterSettings, *, echo: Echo) -> None:
    """Print every consumer group with its state, sorted by group id.

    Clusters that answer ListGroups below v4 send no states; those groups
    are described in one more request, so every row has its state.
    """
    states = read_group_states(admin_client(cluster), cluster)
    if not states:
        echo("no consumer groups")
        return
    for line in format_table(("group", "state"), sorted(states.items())):
        echo(line)


def read_group_states(admin: AdminClient, cluster: ClusterSettings) -> dict[str, str]:
    """Every consumer group's state by group id."""
    future = admin.list_consumer_groups(request_timeout=cluster.request_timeout_s)
    result = wait_for(future, cluster, "cannot list consumer groups")
    if result.errors:
        raise error_of_request(cluster, "cannot list consumer groups", result.errors[0])
    states = {listing.group_id: state_name(listing.state) for listing in result.valid}
    unknown = sorted(group for group, state in states.items() if state == UNKNOWN_STATE)
    if unknown:
        states.update(described_states(admin, cluster, unknown))
    return states


def described_states(
    admin: AdminClient, cluster: ClusterSettings, groups: list[str]
) -> dict[str, str]:
    futures = admin.describe_consumer_groups(groups, request_timeout=cluster.request_timeout_s)
    return {
        group: state_name(wait_for(future, cluster, f"cannot describe group {group!r}").state)
        for group, future in futures.items()
    }


def fetch_group(
    admin: AdminClient, cluster: ClusterSettings, group: str
) -> ConsumerGroupDescription | None:
    """The group's description, or ``None`` when the cluster knows no such group."""
    futures = admin.describe_consumer_groups([group], request_timeout=cluster.request_timeout_s)
    try:
        description: ConsumerGroupDescription = wait_for(
            futures[group], cluster, f"cannot describe group {group!r}"
        )
    except KafkaRequestError as error:
        if error.code == "GROUP_ID_NOT_FOUND":
            return None
        raise
    return description


def committed_offsets(
    admin: AdminClient,
    cluster: ClusterSettings,
    group: str,
    partitions: Sequence[TopicPartition] | None = None,
) -> dict[TopicPartitionKey, int | None]:
    """The group's committed offsets (all of them when ``partitions`` is ``None``)."""
    request = ConsumerGroupTopicPartitions(group, list(partitions) if partitions else None)
    futures = admin.list_consumer_group_offsets(
        [request], request_timeout=cluster.request_timeout_s
    )
    result = wait_for(futures[group], cluster, f"cannot read the offsets of group {group!r}")
    offsets: dict[TopicPartitionKey, int | None] = {}
    for entry in result.topic_partitions or []:
        if entry.error is not None:
            raise KafkaRequestError(
                f"cannot read the offset of group {group!r} on {entry.topic}[{entry.partition}]: "
                f"{describe_error(entry.error)}"
            )
        offsets[(entry.topic, entry.partition)] = (
            None if entry.offset == NO_COMMITTED_OFFSET else entry.offset
        )
    return offsets


def describe_group(cluster: ClusterSettings, group: str, *, echo: Echo) -> None:
    """Print the group's state and members, and per partition its offsets and lag."""
    summary = read_group_summary(admin_client(cluster), cluster, group)
    for line in group_description_lines(summary):
        echo(line)


def read_group_summary(admin: AdminClient, cluster: ClusterSettings, group: str) -> GroupSummary:
    """The group's state, members, and per partition its committed offset, log end and lag;
    a :class:`KafkaRequestError` when the cluster knows no such group."""
    description = fetch_group(admin, cluster, group)
    committed = committed_offsets(admin, cluster, group)
    members = member_summaries(description)
    if not members and not committed and group_state(description) in INACTIVE_STATES:
        raise KafkaRequestError(f"group {group!r} does not exist", code="GROUP_ID_NOT_FOUND")
    owners = {key: member.member_id for member in members for key in member.assignment}
    keys = set(committed) | set(owners)
    log_ends: dict[TopicPartitionKey, int] = {}
    for topic in sorted({topic for topic, _ in keys}):
        partitions = sorted(partition for name, partition in keys if name == topic)
        found = partition_offsets(admin, cluster, topic, partitions, LATEST)
        log_ends.update({(topic, partition): offset for partition, offset in found.items()})
    return GroupSummary(
        group_id=group,
        state=group_state(description),
        assignor=description.partition_assignor if description is not None else "",
        members=tuple(members),
        partitions=tuple(partition_lags(committed, log_ends, owners)),
    )


def group_state(description: ConsumerGroupDescription | None) -> str:
    return "Dead" if description is None else state_name(getattr(description, "state", None))


def member_summaries(description: ConsumerGroupDescription | None) -> list[MemberSummary]:
    if description is None:
        return []
    return [
        MemberSummary(
            member_id=member.member_id,
            client_id=member.client_id,
            host=member.host,
            assignment=tuple(
                sorted(
                    (entry.topic, entry.partition) for entry in member.assignment.topic_partitions
                )
            ),
        )
        for member in sorted(description.members, key=lambda member: member.member_id)
    ]


def reset_group_offsets(
    cluster: ClusterSettings,
    group: str,
    *,
    topic: str,
    partition: int | None,
    target: ResetTarget,
    dry_run: bool,
    echo: Echo,
) -> None:
    """Move the group's committed offsets on ``topic`` (one partition or all) to ``target``.

    Prints the plan either way; with ``dry_run`` nothing is committed (the command
    line plans unless given ``--execute``, as Kafka's own tool does).
    Raises :class:`GroupActiveError` when the group has members.
    """
    admin = admin_client(cluster)
    description = fetch_group(admin, cluster, group)
    members = member_summaries(description)
    state = group_state(description)
    if members or state not in INACTIVE_STATES:
        raise GroupActiveError(
            f"group {group!r} is {state} with {len(members)} active members; "
            "stop its consumers before resetting offsets"
        )
    partitions = chosen_partitions(admin, cluster, topic, partition)
    plan = plan_reset(
        target,
        partitions,
        current={
            key[1]: offset
            for key, offset in committed_offsets(
                admin, cluster, group, [TopicPartition(topic, item) for item in partitions]
            ).items()
        },
        earliest=partition_offsets(admin, cluster, topic, partitions, EARLIEST),
        latest=partition_offsets(admin, cluster, topic, partitions, LATEST),
        at_timestamp=timestamp_offsets(admin, cluster, topic, partitions, target),
    )
    for line in reset_lines(topic, plan):
        echo(line)
    if dry_run:
        echo("plan only: no offsets were changed (add --execute to commit them)")
        return
    commit_offsets(admin, cluster, group, topic, plan)
    echo(f"group {group}: offsets reset on {len(plan)} partitions of {topic}")


def chosen_partitions(
    admin: AdminClient, cluster: ClusterSettings, topic: str, partition: int | None
) -> list[int]:
    partitions = topic_partition_ids(admin, cluster, topic)
    if partition is None:
        return partitions
    if partition not in partitions:
        raise InvalidInputError(
            f"topic {topic!r} has {len(partitions)} partitions; "
            f"partition {partition} does not exist"
        )
    return [partition]


def timestamp_offsets(
    admin: AdminClient,
    cluster: ClusterSettings,
    topic: str,
    partitions: Sequence[int],
    target: ResetTarget,
) -> dict[int, int]:
    if target.kind is not ResetKind.DATETIME:
        return {}
    assert target.timestamp_ms is not None
    spec = OffsetSpec.for_timestamp(target.timestamp_ms)
    return partition_offsets(admin, cluster, topic, partitions, spec)


def commit_offsets(
    admin: AdminClient,
    cluster: ClusterSettings,
    group: str,
    topic: str,
    plan: Sequence[OffsetReset],
) -> None:
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, row.partition, row.new) for row in plan]
    )
    futures = admin.alter_consumer_group_offsets(
        [request], request_timeout=cluster.request_timeout_s
    )
    result = wait_for(futures[group], cluster, f"cannot reset the offsets of group {group!r}")
    for entry in result.topic_partitions or []:
        if entry.error is not None:
            raise KafkaRequestError(
                f"cannot reset the offset of group {group!r} on {entry.topic}[{entry.partition}]: "
                f"{describe_error(entry.error)}"
            )
