"""Committed offsets and group metadata in ``__consumer_offsets``: written, reloaded, kept.

The coordinator is stopped cleanly or crashed (every log dropped as a
killed process would leave it) and started again on the same directory;
what consumers committed and what the group was must come back.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import TYPE_CHECKING

import pytest
import trio

from eventplatform.log.config import BrokerConfig
from eventplatform.log.groups.group import GroupState, JoinResult
from eventplatform.log.groups.messages import (
    MemberIdentity,
    OffsetCommit,
)
from eventplatform.log.groups.records import (
    OFFSETS_TOPIC,
    CommittedOffset,
    GroupKey,
    OffsetKey,
    TopicPartition,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_offset_key,
    partition_for,
)
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.storage import Cleaner, Record
from eventplatform.log.storage.record_batch import encode_batch

if TYPE_CHECKING:
    from conftest import Client, Node

    from eventplatform.log.groups.coordinator import GroupCoordinator

SESSION_S = 10.0
PARTITION = TopicPartition("events", 0)


async def form_group(client: Client, node: Node, group_id: str = "group") -> list[JoinResult]:
    """Two members join together (the initial delay collects them) and sync; leader first."""
    results: list[JoinResult] = []

    async def join() -> None:
        results.append(await client.join(group_id))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join)
        nursery.start_soon(join)
    results.sort(key=lambda result: result.leader_id != result.member_id)
    leader, follower = results
    assignments = {leader.member_id: b"leader-part", follower.member_id: b"follower-part"}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: client.sync(leader, group_id, assignments))
        nursery.start_soon(lambda: client.sync(follower, group_id))
    return results


def delayed(node: Node) -> BrokerConfig:
    """The node's config with an initial rebalance delay, so members can join together."""
    return dataclasses.replace(node.config, group_initial_rebalance_delay_ms=1_000)


def offsets_records(node: Node, group_id: str) -> list[tuple[object, bytes | None]]:
    """Every record of the group's ``__consumer_offsets`` partition, key decoded."""
    assert node.topics is not None
    topic = node.topics.get(OFFSETS_TOPIC)
    assert topic is not None
    partition = topic.partitions[partition_for(group_id, len(topic.partitions))]
    return [
        (decode_key(record.key or b""), record.value) for record in partition.log.iter_records()
    ]


@pytest.mark.parametrize("crashed", [True, False], ids=["crash", "clean"])
async def test_committed_offsets_come_back_after_a_restart(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client, crashed: bool
) -> None:
    coordinator = await node.start()
    other = TopicPartition("events", 1)
    results = await coordinator.commit_offsets(
        "simple",
        member_id="",
        group_instance_id=None,
        generation_id=-1,
        offsets={PARTITION: OffsetCommit(41, 4, "checkpoint-a"), other: OffsetCommit(7, -1, None)},
    )
    assert set(results.values()) == {ErrorCode.NONE}
    await client.commit("simple", {PARTITION: 42}, metadata="checkpoint-b")
    coordinator = await node.restart(crashed=crashed)
    error, offsets = await coordinator.fetch_offsets("simple", None)
    assert error is ErrorCode.NONE
    assert offsets == {
        PARTITION: CommittedOffset(42, "checkpoint-b", -1, offsets[PARTITION].commit_timestamp_ms),
        other: CommittedOffset(7, "", -1, offsets[other].commit_timestamp_ms),
    }
    assert offsets[PARTITION].commit_timestamp_ms >= 1_700_000_000_000


async def test_records_use_kafkas_formats_in_the_groups_partition(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start(delayed(node))
    leader, follower = await form_group(client, node)
    await client.commit(
        "group", {PARTITION: 5}, member_id=leader.member_id, generation_id=leader.generation_id
    )
    records = offsets_records(node, "group")
    kinds = [key for key, _ in records]
    assert kinds == [GroupKey("group"), OffsetKey("group", "events", 0)]
    group_value = records[0][1]
    assert group_value is not None
    stored = decode_group_value(group_value)
    assert stored.generation == 1 and stored.protocol == "range"
    assert stored.leader == leader.member_id
    assert {member.member_id: member.assignment for member in stored.members} == {
        leader.member_id: b"leader-part",
        follower.member_id: b"follower-part",
    }
    offset_value = records[1][1]
    assert offset_value is not None and decode_offset_value(offset_value).offset == 5
    assert node.topics is not None
    topic = node.topics.get(OFFSETS_TOPIC)
    assert topic is not None and topic.internal and topic.log_config.compact
    assert len(topic.partitions) == node.config.offsets_topic_num_partitions
    others = [
        p for p in topic.partitions if p.index != partition_for("group", len(topic.partitions))
    ]
    assert all(partition.high_watermark == 0 for partition in others)


async def test_a_stable_group_survives_a_crash_and_its_members_carry_on(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start(delayed(node))
    leader, follower = await form_group(client, node)
    await node.restart(crashed=True)
    assert await client.heartbeat(leader) is ErrorCode.NONE
    assert (await client.sync(leader)).assignment == b"leader-part"
    assert node.coordinator is not None
    [(_, described)] = await node.coordinator.describe_groups(["group"])
    assert described.state is GroupState.STABLE
    assert {member.member_id for member in described.members} == {
        leader.member_id,
        follower.member_id,
    }
    # The follower never comes back: its session runs out and the group rebalances.
    start = trio.current_time()
    with trio.fail_after(SESSION_S * 3):
        while await client.heartbeat(leader) is ErrorCode.NONE:
            await trio.sleep(1)
    assert trio.current_time() - start == pytest.approx(SESSION_S + 1, abs=1)
    alone = await client.join("group", leader.member_id)
    assert alone.generation_id == 2
    assert [member.member_id for member in alone.members] == [leader.member_id]


async def test_an_emptied_group_keeps_its_generation_and_offsets_across_restarts(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start(delayed(node))
    leader, follower = await form_group(client, node)
    await client.commit(
        "group", {PARTITION: 99}, member_id=leader.member_id, generation_id=leader.generation_id
    )
    await client.leave("group", MemberIdentity(leader.member_id))
    await client.leave("group", MemberIdentity(follower.member_id))
    coordinator = await node.restart(crashed=True)
    [(_, described)] = await coordinator.describe_groups(["group"])
    assert described.state is GroupState.EMPTY and described.protocol_type == "consumer"
    assert await client.committed("group", [PARTITION]) == {PARTITION: 99}
    rejoined = await client.join("group")
    assert rejoined.generation_id == 3, "generation 1, then 2 when the last member left"


async def test_deleted_groups_stay_deleted_after_a_crash(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    coordinator = await node.start(delayed(node))
    await form_group(client, node, "busy")
    await client.commit("idle", {PARTITION: 3})
    results = await coordinator.delete_groups(["idle", "busy", "never-existed"])
    assert results == {
        "idle": ErrorCode.NONE,
        "busy": ErrorCode.NON_EMPTY_GROUP,
        "never-existed": ErrorCode.GROUP_ID_NOT_FOUND,
    }
    assert await client.committed("idle") == {}
    coordinator = await node.restart(crashed=True)
    assert await client.committed("idle") == {}
    _, groups = await coordinator.list_groups()
    assert {group.group_id for group in groups} == {"busy"}
    assert (await coordinator.delete_groups(["idle"]))["idle"] is ErrorCode.GROUP_ID_NOT_FOUND


async def test_deleted_offsets_stay_deleted_after_a_crash(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    coordinator = await node.start(delayed(node))
    other = TopicPartition(PARTITION.topic, PARTITION.partition + 1)
    await client.commit("idle", {PARTITION: 3, other: 4})
    error, answers = await coordinator.delete_offsets("idle", [PARTITION])
    assert (error, answers) == (ErrorCode.NONE, {PARTITION: ErrorCode.NONE})
    coordinator = await node.restart(crashed=True)
    assert await client.committed("idle") == {other: 4}


async def test_compaction_keeps_the_latest_commit_of_every_partition(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    config = dataclasses.replace(node.config, offsets_topic_segment_bytes=1024)
    await node.start(config)
    for offset in range(200):
        partition = TopicPartition("events", offset % 3)
        assert await client.commit("compacted", {partition: offset}) == {partition: ErrorCode.NONE}
    assert node.topics is not None
    topic = node.topics.get(OFFSETS_TOPIC)
    assert topic is not None
    log = topic.partitions[partition_for("compacted", len(topic.partitions))].log
    assert len(log.segments) > 5
    Cleaner().compact(log, upper_bound_offset=log.log_end_offset)
    assert len(list(log.iter_records())) < 20
    await node.restart(crashed=True)
    assert await client.committed("compacted") == {
        TopicPartition("events", 0): 198,
        TopicPartition("events", 1): 199,
        TopicPartition("events", 2): 197,
    }


async def test_offsets_of_groups_without_members_expire_after_the_retention(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start(delayed(node))
    leader, follower = await form_group(client, node, "active")
    await client.commit(
        "active", {PARTITION: 8}, member_id=leader.member_id, generation_id=leader.generation_id
    )
    await client.commit("simple", {PARTITION: 1})
    retention_s = node.config.offsets_retention_minutes * 60
    async with trio.open_nursery() as nursery:

        async def heartbeat_forever(member: JoinResult) -> None:
            while True:
                assert await client.heartbeat(member, "active") is ErrorCode.NONE
                await trio.sleep(3)

        nursery.start_soon(heartbeat_forever, leader)
        nursery.start_soon(heartbeat_forever, follower)
        await trio.sleep(retention_s - 60)
        assert await client.committed("simple") == {PARTITION: 1}
        await trio.sleep(11 * 60)  # past the retention and one expiry pass (every 10 minutes)
        nursery.cancel_scope.cancel()
    assert await client.committed("simple") == {}
    assert await client.committed("active") == {PARTITION: 8}, "a group with members keeps them"
    coordinator = await node.restart(crashed=True)
    _, groups = await coordinator.list_groups()
    assert {group.group_id for group in groups} == {"active"}
    assert await client.committed("simple") == {}


async def test_groups_written_in_older_formats_load(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    assert node.topics is not None
    topic = node.topics.get(OFFSETS_TOPIC)
    assert topic is not None
    partition = topic.partitions[partition_for("legacy", len(topic.partitions))]

    def string(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    member = (
        string("legacy-member")
        + string("client")
        + string("/h")
        + struct.pack(">i", 20_000)  # rebalance timeout (v1)
        + struct.pack(">i", 10_000)  # session timeout
        + struct.pack(">i", 1)
        + b"s"
        + struct.pack(">i", 1)
        + b"a"
    )
    group_v1 = (
        struct.pack(">h", 1)
        + string("consumer")
        + struct.pack(">i", 6)
        + string("range")
        + string("legacy-member")
        + struct.pack(">i", 1)
        + member
    )
    offset_v1 = (
        struct.pack(">h", 1)
        + struct.pack(">q", 77)
        + string("old")
        + struct.pack(">q", 1_700_000_000_000)
        + struct.pack(">q", -1)
    )
    records = [
        Record(0, 0, encode_group_key("legacy"), group_v1),
        Record(1, 0, encode_offset_key("legacy", "events", 0), offset_v1),
    ]
    assert partition.append(encode_batch(records)).error is ErrorCode.NONE
    coordinator = await node.restart(crashed=False)
    [(_, described)] = await coordinator.describe_groups(["legacy"])
    assert described.state is GroupState.STABLE
    assert [member.member_id for member in described.members] == ["legacy-member"]
    assert await client.committed("legacy") == {PARTITION: 77}
    legacy = JoinResult(ErrorCode.NONE, "legacy-member", generation_id=6)
    assert await client.heartbeat(legacy, "legacy") is ErrorCode.NONE


async def commit_twenty_thousand(coordinator: GroupCoordinator, group_id: str) -> None:
    """Twenty batches of a thousand committed offsets: a load yields between them."""
    for batch in range(20):
        many = {
            TopicPartition(f"topic-{batch}", index): OffsetCommit(index, -1, "")
            for index in range(1_000)
        }
        committed = await coordinator.commit_offsets(
            group_id, member_id="", group_instance_id=None, generation_id=-1, offsets=many
        )
        assert set(committed.values()) == {ErrorCode.NONE}


async def test_while_loading_group_requests_are_told_to_retry(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    # One offsets partition: "group" loads behind "big".
    coordinator = await node.start(
        dataclasses.replace(delayed(node), offsets_topic_num_partitions=1)
    )
    leader, _ = await form_group(client, node)
    await commit_twenty_thousand(coordinator, "big")
    await node.stop()

    coordinator = await node.start(wait_loaded=False)
    assert coordinator.is_available, "FindCoordinator names the broker while it loads"
    assert (await client.join("group")).error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert await client.heartbeat(leader) is ErrorCode.NONE
    assert (await client.sync(leader)).error is ErrorCode.REBALANCE_IN_PROGRESS
    error, _ = await coordinator.fetch_offsets("big", None)
    assert error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    error, _ = await coordinator.list_groups()
    assert error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    with trio.fail_after(10):
        await coordinator.wait_loaded()
    assert len(await client.committed("big")) == 20_000
    assert await client.heartbeat(leader) is ErrorCode.NONE
    error, groups = await coordinator.list_groups()
    assert error is ErrorCode.NONE and {g.group_id for g in groups} >= {"group", "big"}


async def test_groups_of_a_loaded_partition_are_served_while_another_loads(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    partitions = node.config.offsets_topic_num_partitions
    other = next(
        name
        for name in (f"other-{n}" for n in range(100))
        if partition_for(name, partitions) != partition_for("big", partitions)
    )
    coordinator = await node.start()
    await commit_twenty_thousand(coordinator, "big")
    await client.commit(other, {PARTITION: 7})
    await node.stop()

    coordinator = await node.start(wait_loaded=False)
    error, _ = await coordinator.fetch_offsets("big", None)
    assert error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await trio.sleep(0)  # the small partitions' loads finish between the big one's batches
    assert await client.committed(other) == {PARTITION: 7}
    error, _ = await coordinator.fetch_offsets("big", None)
    assert error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    with trio.fail_after(10):
        await coordinator.wait_loaded()
    assert len(await client.committed("big")) == 20_000


async def test_offsets_of_a_deleted_topic_are_forgotten_for_good(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    coordinator = await node.start()
    kept = TopicPartition("kept", 0)
    await client.commit("first", {PARTITION: 1, kept: 2})
    await client.commit("second", {TopicPartition("events", 3): 4})
    coordinator.topic_deleted("events")
    assert await client.committed("first") == {kept: 2}
    assert await client.committed("second") == {}
    await node.restart(crashed=True)
    assert await client.committed("first") == {kept: 2}
    assert await client.committed("second") == {}


async def test_commit_metadata_over_the_limit_is_refused_per_partition(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    coordinator = await node.start()
    other = TopicPartition("events", 1)
    results = await coordinator.commit_offsets(
        "group",
        member_id="",
        group_instance_id=None,
        generation_id=-1,
        offsets={
            PARTITION: OffsetCommit(5, -1, "x" * 4097),
            other: OffsetCommit(6, -1, "y" * 4096),
        },
    )
    assert results == {PARTITION: ErrorCode.OFFSET_METADATA_TOO_LARGE, other: ErrorCode.NONE}
    assert await client.committed("group") == {other: 6}
