"""The classic group protocol on virtual time: joins, rebalances, expiry, static members.

Every test drives a real coordinator (real ``__consumer_offsets`` on disk) the
way consumers would and checks what they would see: error codes,
generations, who leads, who gets which assignment, and when answers arrive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest
import trio

from eventplatform.log.groups.coordinator import GroupCoordinator
from eventplatform.log.groups.group import GroupState, JoinedMember, JoinResult
from eventplatform.log.groups.messages import JoinRequest, MemberIdentity
from eventplatform.log.groups.records import TopicPartition
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.topics import TopicRegistry
from eventplatform.log.storage import LogConfig

if TYPE_CHECKING:
    from conftest import Client, Node

SESSION_S = 10.0
"""The session timeout ``client`` joins with (``Client.session_timeout_ms``)."""
REBALANCE_S = 30.0
HEARTBEATING_S_MAX = 600.0
SETTLE_S = 0.01
"""Virtual time for a request that is not held to be fully handled."""

RANGE_FIRST = (("range", b"r"), ("roundrobin", b"rr"))
ROUNDROBIN_FIRST = (("roundrobin", b"rr"), ("range", b"r"))


async def gather(*calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run ``calls`` concurrently; their results in order."""
    results: list[Any] = [None] * len(calls)

    async def run(index: int) -> None:
        results[index] = await calls[index]()

    async with trio.open_nursery() as nursery:
        for index in range(len(calls)):
            nursery.start_soon(run, index)
    return results


async def stable_group(
    client: Client, count_or_members: int | Sequence[dict[str, Any]], group_id: str = "group"
) -> list[JoinResult]:
    """Form a Stable group, one member at a time; the first one leads.

    Each newcomer's join starts a rebalance, then every earlier member rejoins,
    so each generation has everyone. The leader assigns ``assignment-<id>``.
    """
    if isinstance(count_or_members, int):
        specs: Sequence[dict[str, Any]] = [
            {"client_id": f"member-{index}"} for index in range(count_or_members)
        ]
    else:
        specs = count_or_members
    members: list[JoinResult] = []

    async def join(
        results: dict[int, JoinResult], index: int, member_id: str, options: dict[str, Any]
    ) -> None:
        results[index] = await client.join(group_id, member_id, **options)

    for spec in specs:
        results: dict[int, JoinResult] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(join, results, len(members), "", spec)
            await trio.sleep(SETTLE_S)
            for index, member in enumerate(members):
                nursery.start_soon(join, results, index, member.member_id, specs[index])
        members = [results[index] for index in range(len(members) + 1)]
    assert {member.generation_id for member in members} == {len(specs)}
    assignments = {
        member.member_id: f"assignment-{member.member_id}".encode() for member in members
    }
    synced = await gather(
        *[(lambda member=member: client.sync(member, group_id, assignments)) for member in members]
    )
    assert all(result.error is ErrorCode.NONE for result in synced)
    return members


def group_state(node: Node, group_id: str = "group") -> GroupState:
    assert node.coordinator is not None
    group = node.coordinator.core.groups.get(group_id)
    return GroupState.DEAD if group is None else group.state


async def keep_heartbeating(
    client: Client, member: JoinResult, seen: list[ErrorCode], group_id: str = "group"
) -> None:
    """Heartbeat every second, ignoring rebalances, until the member is gone (at most 10 min)."""
    with trio.fail_after(HEARTBEATING_S_MAX):
        while True:
            error = await client.heartbeat(member, group_id)
            seen.append(error)
            if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                return
            await trio.sleep(1)


# ---------------------------------------------------------------- joining


async def test_a_dynamic_members_first_join_gets_a_member_id_to_join_with(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    first = await client.join_once("group", client_id="app")
    assert first.error is ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("app-")
    joined = await client.join_once("group", first.member_id, client_id="app")
    assert joined.error is ErrorCode.NONE
    assert joined.member_id == first.member_id
    assert joined.generation_id == 1
    assert joined.leader_id == joined.member_id
    assert joined.protocol_name == "range"
    assert joined.members == (JoinedMember(joined.member_id, None, b"range-subscription"),)


async def test_old_join_versions_are_admitted_without_a_round_trip(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    joined = await client.join_once("group", require_known_member_id=False)
    assert joined.error is ErrorCode.NONE
    assert joined.generation_id == 1


async def test_a_member_id_that_is_never_used_expires_with_the_session(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    first = await client.join_once("group")
    await trio.sleep(SESSION_S + 1)
    late = await client.join_once("group", first.member_id)
    assert late.error is ErrorCode.UNKNOWN_MEMBER_ID


async def test_the_initial_delay_collects_members_that_arrive_together(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    config = dataclasses.replace(node.config, group_initial_rebalance_delay_ms=3_000)
    await node.start(config)
    start = trio.current_time()
    answered_at: list[float] = []

    async def join_after(delay_s: float) -> JoinResult:
        await trio.sleep(delay_s)
        result = await client.join("group")
        answered_at.append(trio.current_time() - start)
        return result

    first, second = await gather(lambda: join_after(0), lambda: join_after(1))
    assert first.generation_id == second.generation_id == 1
    assert {member.member_id for member in first.members + second.members} == {
        first.member_id,
        second.member_id,
    }
    # The second arrival re-arms the delay once: 3 s, then 3 s more.
    assert answered_at == [pytest.approx(6.0, abs=0.01)] * 2


async def test_invalid_session_timeouts_and_group_ids_are_refused(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    too_short = await client.join("group", session_timeout_ms=500)
    too_long = await client.join("group", session_timeout_ms=500_000)
    no_group = await client.join("")
    assert too_short.error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert too_long.error is ErrorCode.INVALID_SESSION_TIMEOUT
    assert no_group.error is ErrorCode.INVALID_GROUP_ID


async def test_rejoining_with_an_unknown_member_id_is_refused(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    await stable_group(client, 1)
    stranger = await client.join_once("group", "nobody-1234")
    nowhere = await client.join_once("no-such-group", "nobody-1234")
    assert stranger.error is ErrorCode.UNKNOWN_MEMBER_ID
    assert nowhere.error is ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_full_group_refuses_new_members(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start(dataclasses.replace(node.config, group_max_size=2))
    await stable_group(client, 2)
    third = await client.join("group")
    assert third.error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert third.member_id == ""
    assert group_state(node) is GroupState.STABLE


# ---------------------------------------------------------------- protocols


async def test_the_protocol_all_members_support_with_most_votes_wins(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start(dataclasses.replace(node.config, group_initial_rebalance_delay_ms=1_000))
    results = await gather(
        lambda: client.join("votes", protocols=RANGE_FIRST),
        lambda: client.join("votes", protocols=RANGE_FIRST),
        lambda: client.join("votes", protocols=ROUNDROBIN_FIRST),
    )
    assert {result.protocol_name for result in results} == {"range"}
    leader = next(result for result in results if result.leader_id == result.member_id)
    assert sorted(member.metadata for member in leader.members) == [b"r", b"r", b"r"]


async def test_a_protocol_every_member_supports_beats_a_more_popular_one(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start(dataclasses.replace(node.config, group_initial_rebalance_delay_ms=1_000))
    sticky_first = (("cooperative-sticky", b"cs"), ("range", b"r"))
    results = await gather(
        lambda: client.join("mixed", protocols=sticky_first),
        lambda: client.join("mixed", protocols=sticky_first),
        lambda: client.join("mixed", protocols=(("range", b"r"),)),
    )
    assert {result.protocol_name for result in results} == {"range"}


async def test_cooperative_sticky_is_selected_when_everyone_prefers_it(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    joined = await client.join("sticky", protocols=(("cooperative-sticky", b"cs"),))
    assert joined.protocol_name == "cooperative-sticky"
    assert joined.members[0].metadata == b"cs"


async def test_members_without_a_common_protocol_or_type_are_refused(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    await stable_group(client, 1)
    other_protocol = await client.join("group", protocols=(("roundrobin", b"rr"),))
    other_type = await client.join("group", protocol_type="connect")
    no_protocols = await client.join("fresh", protocols=())
    assert other_protocol.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert other_type.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert no_protocols.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert group_state(node) is GroupState.STABLE


# ---------------------------------------------------------------- rebalancing


async def test_a_rebalance_waits_until_every_known_member_rejoins(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    leader, follower = await stable_group(client, 2)
    assert leader.leader_id == leader.member_id
    async with trio.open_nursery() as nursery:
        newcomer: list[JoinResult] = []

        async def join_newcomer() -> None:
            newcomer.append(await client.join("group", client_id="newcomer"))

        nursery.start_soon(join_newcomer)
        await trio.sleep(2)
        assert not newcomer, "the newcomer is answered only when everyone rejoined"
        assert await client.heartbeat(leader) is ErrorCode.REBALANCE_IN_PROGRESS
        assert await client.heartbeat(follower) is ErrorCode.REBALANCE_IN_PROGRESS
        rejoined = await gather(
            lambda: client.join("group", leader.member_id),
            lambda: client.join("group", follower.member_id),
        )
    new_leader, new_follower = rejoined
    everyone = [new_leader, new_follower, newcomer[0]]
    assert {result.generation_id for result in everyone} == {3}
    assert new_leader.leader_id == leader.member_id
    assert {member.member_id for member in new_leader.members} == {
        result.member_id for result in everyone
    }
    assert new_follower.members == () and newcomer[0].members == ()


async def test_followers_wait_for_the_leaders_assignment(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    config = dataclasses.replace(node.config, group_initial_rebalance_delay_ms=1_000)
    await node.start(config)
    first, second = await gather(lambda: client.join("group"), lambda: client.join("group"))
    leader, follower = (first, second) if first.leader_id == first.member_id else (second, first)
    answered: list[float] = []

    async def follower_sync() -> bytes:
        result = await client.sync(follower)
        answered.append(trio.current_time())
        return result.assignment

    async def leader_sync_later() -> bytes:
        await trio.sleep(5)
        assignments = {leader.member_id: b"partitions-0-2", follower.member_id: b"partitions-3-5"}
        return (await client.sync(leader, assignments=assignments)).assignment

    start = trio.current_time()
    follower_assignment, leader_assignment = await gather(follower_sync, leader_sync_later)
    assert follower_assignment == b"partitions-3-5"
    assert leader_assignment == b"partitions-0-2"
    assert answered == [pytest.approx(start + 5, abs=0.01)]
    assert group_state(node) is GroupState.STABLE
    # In a Stable group a repeated SyncGroup gets the same assignment at once.
    assert (await client.sync(follower)).assignment == b"partitions-3-5"


async def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    leader, lagging = await stable_group(client, 2)
    lagging_heartbeats: list[ErrorCode] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_heartbeating, client, lagging, lagging_heartbeats)
        await trio.sleep(0.5)
        start = trio.current_time()
        newcomer, rejoined = await gather(
            lambda: client.join("group", client_id="newcomer"),
            lambda: client.join("group", leader.member_id),
        )
        waited_s = trio.current_time() - start
    assert waited_s == pytest.approx(REBALANCE_S, abs=0.01)
    assert rejoined.generation_id == newcomer.generation_id == 3
    assert {member.member_id for member in rejoined.members} == {
        leader.member_id,
        newcomer.member_id,
    }
    assert ErrorCode.REBALANCE_IN_PROGRESS in lagging_heartbeats
    assert lagging_heartbeats[-1] is ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_silent_member_is_removed_after_its_session_timeout(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    alive, silent = await stable_group(client, 2)
    start = trio.current_time()
    with trio.fail_after(SESSION_S * 3):
        while await client.heartbeat(alive) is ErrorCode.NONE:
            await trio.sleep(1)
    noticed_s = trio.current_time() - start
    assert SESSION_S <= noticed_s <= SESSION_S + 1
    rejoined = await client.join("group", alive.member_id)
    assert rejoined.generation_id == 3 and rejoined.members == (
        JoinedMember(alive.member_id, None, b"range-subscription"),
    )
    assert await client.heartbeat(silent) is ErrorCode.UNKNOWN_MEMBER_ID


async def test_heartbeats_keep_a_member_in_the_group_past_its_session_timeout(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    (member,) = await stable_group(client, 1)
    for _ in range(20):
        await trio.sleep(SESSION_S / 3)
        assert await client.heartbeat(member) is ErrorCode.NONE
    assert group_state(node) is GroupState.STABLE


async def test_followers_are_told_to_rejoin_when_the_leader_never_syncs(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start(dataclasses.replace(node.config, group_initial_rebalance_delay_ms=1_000))
    first, second = await gather(lambda: client.join("group"), lambda: client.join("group"))
    leader, follower = (first, second) if first.leader_id == first.member_id else (second, first)
    leader_heartbeats: list[ErrorCode] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_heartbeating, client, leader, leader_heartbeats)
        start = trio.current_time()
        synced = await client.sync(follower)
        waited_s = trio.current_time() - start
    assert synced.error is ErrorCode.REBALANCE_IN_PROGRESS
    assert waited_s == pytest.approx(REBALANCE_S, abs=0.01)
    assert leader_heartbeats[-1] is ErrorCode.UNKNOWN_MEMBER_ID
    alone = await client.join("group", follower.member_id)
    assert alone.generation_id == 2 and alone.leader_id == follower.member_id


async def test_a_new_member_held_five_minutes_is_told_its_join_failed(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    (old,) = [await client.join("group", rebalance_timeout_ms=600_000)]
    await client.sync(old, assignments={old.member_id: b"all"})
    heartbeats: list[ErrorCode] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_heartbeating, client, old, heartbeats)
        start = trio.current_time()
        newcomer = await client.join("group", client_id="newcomer")
        waited_s = trio.current_time() - start
        nursery.cancel_scope.cancel()
    assert newcomer.error is ErrorCode.UNKNOWN_MEMBER_ID
    assert waited_s == pytest.approx(300, abs=0.01)


async def test_leaving_members_trigger_a_rebalance_and_batches_name_each_member(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    first, _static, third = await stable_group(
        client, [{"client_id": "first"}, {"instance_id": "instance-s"}, {"client_id": "third"}]
    )
    result = await client.leave(
        "group",
        MemberIdentity(first.member_id),
        MemberIdentity("", "instance-s"),
        MemberIdentity("nobody"),
    )
    assert result.error is ErrorCode.NONE
    assert [error for _, error in result.members] == [
        ErrorCode.NONE,
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    assert group_state(node) is GroupState.PREPARING_REBALANCE
    assert await client.heartbeat(third) is ErrorCode.REBALANCE_IN_PROGRESS
    remaining = await client.join("group", third.member_id)
    assert remaining.leader_id == third.member_id
    assert [member.member_id for member in remaining.members] == [third.member_id]
    unknown_group = await client.leave("elsewhere", MemberIdentity("x"))
    assert unknown_group.members[0][1] is ErrorCode.UNKNOWN_MEMBER_ID


async def test_the_last_member_leaving_empties_the_group(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    (member,) = await stable_group(client, 1)
    await client.leave("group", MemberIdentity(member.member_id))
    assert group_state(node) is GroupState.EMPTY
    assert await client.heartbeat(member) is ErrorCode.UNKNOWN_MEMBER_ID


# ---------------------------------------------------------------- generations


async def test_requests_from_another_generation_are_refused(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    (member,) = await stable_group(client, 1)
    stale = member.generation_id - 1
    assert await client.heartbeat(member, generation_id=stale) is ErrorCode.ILLEGAL_GENERATION
    assert (await client.sync(member, generation_id=stale)).error is ErrorCode.ILLEGAL_GENERATION
    partition = TopicPartition("topic", 0)
    committed = await client.commit(
        "group", {partition: 5}, member_id=member.member_id, generation_id=stale
    )
    assert committed == {partition: ErrorCode.ILLEGAL_GENERATION}
    unknown = await client.commit(
        "group", {partition: 5}, member_id="stranger", generation_id=member.generation_id
    )
    assert unknown == {partition: ErrorCode.UNKNOWN_MEMBER_ID}
    current = await client.commit(
        "group", {partition: 5}, member_id=member.member_id, generation_id=member.generation_id
    )
    assert current == {partition: ErrorCode.NONE}
    assert await client.committed("group", [partition]) == {partition: 5}


async def test_commits_while_completing_a_rebalance_are_told_to_wait(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    joined = await client.join("group")
    assert group_state(node) is GroupState.COMPLETING_REBALANCE
    partition = TopicPartition("topic", 0)
    during = await client.commit(
        "group", {partition: 1}, member_id=joined.member_id, generation_id=joined.generation_id
    )
    assert during == {partition: ErrorCode.REBALANCE_IN_PROGRESS}
    simple = await client.commit("group", {partition: 1})
    assert simple == {partition: ErrorCode.UNKNOWN_MEMBER_ID}


# ---------------------------------------------------------------- static membership


async def test_a_restarted_static_member_takes_its_place_without_a_rebalance(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    static, dynamic = await stable_group(
        client, [{"instance_id": "instance-a"}, {"client_id": "dynamic"}]
    )
    generation = static.generation_id

    restarted = await client.join("group", instance_id="instance-a")
    assert restarted.error is ErrorCode.NONE
    assert restarted.member_id != static.member_id
    assert restarted.member_id.startswith("instance-a-")
    assert restarted.generation_id == generation
    assert restarted.leader_id == static.member_id, "the old leader id: no assignment to redo"
    assert restarted.members == ()
    assert group_state(node) is GroupState.STABLE
    synced = await client.sync(restarted, instance_id="instance-a")
    assert synced.assignment == f"assignment-{static.member_id}".encode()
    assert await client.heartbeat(dynamic) is ErrorCode.NONE
    fenced = await client.heartbeat(static, instance_id="instance-a")
    assert fenced is ErrorCode.FENCED_INSTANCE_ID
    assert await client.heartbeat(restarted, instance_id="instance-a") is ErrorCode.NONE
    assert (await client.join("group", static.member_id, instance_id="instance-a")).error is (
        ErrorCode.FENCED_INSTANCE_ID
    )


async def test_a_static_member_rejoining_during_a_rebalance_fences_the_old_request(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    (other,) = await stable_group(client, 1)
    answers: dict[str, JoinResult] = {}

    async def join(name: str, member_id: str = "", instance_id: str | None = None) -> None:
        answers[name] = await client.join_once("group", member_id, instance_id=instance_id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join, "first", "", "instance-b")
        await trio.sleep(SETTLE_S)
        assert group_state(node) is GroupState.PREPARING_REBALANCE
        nursery.start_soon(join, "restarted", "", "instance-b")
        await trio.sleep(SETTLE_S)
        assert answers["first"].error is ErrorCode.FENCED_INSTANCE_ID
        nursery.start_soon(join, "other", other.member_id)
    restarted = answers["restarted"]
    assert restarted.error is ErrorCode.NONE
    assert restarted.generation_id == answers["other"].generation_id == 2
    assert {member.member_id for member in answers["other"].members} == {
        other.member_id,
        restarted.member_id,
    }


# ---------------------------------------------------------------- lifecycle


async def test_requests_before_start_and_after_close_find_no_coordinator(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    topics = TopicRegistry.open(node.config.data_dir, LogConfig(), lambda: 0)
    idle = GroupCoordinator(node.config, topics, lambda: 0)
    request = JoinRequest(
        "group", "", None, "client", "/host", 10_000, 10_000, "consumer", (("range", b""),), True
    )
    assert (await idle.join_group(request)).error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert not idle.is_available
    topics.close()

    await node.start()
    (first,) = await stable_group(client, 1)
    held: list[JoinResult] = []
    async with trio.open_nursery() as nursery:

        async def hold() -> None:
            held.append(await client.join("group", client_id="held"))

        nursery.start_soon(hold)
        await trio.sleep(1)
        assert not held
        assert node.coordinator is not None
        node.coordinator.close()
    assert held[0].error is ErrorCode.NOT_COORDINATOR
    assert (await client.join("group")).error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert await client.heartbeat(first) is ErrorCode.COORDINATOR_NOT_AVAILABLE


async def test_describe_and_list_report_what_clients_and_tools_expect(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    leader, follower = await stable_group(client, 2)
    await client.commit("offsets-only", {TopicPartition("topic", 0): 1})
    coordinator = node.coordinator
    assert coordinator is not None
    [(error, stable), (_, missing)] = await coordinator.describe_groups(["group", "missing"])
    assert error is ErrorCode.NONE
    assert stable.state is GroupState.STABLE
    assert stable.protocol_type == "consumer" and stable.protocol == "range"
    assignments = {member.member_id: member.assignment for member in stable.members}
    assert assignments == {
        leader.member_id: f"assignment-{leader.member_id}".encode(),
        follower.member_id: f"assignment-{follower.member_id}".encode(),
    }
    assert {member.client_host for member in stable.members} == {"/127.0.0.1"}
    assert {member.client_id for member in stable.members} == {"member-0", "member-1"}
    assert missing.state is GroupState.DEAD and missing.members == ()
    list_error, overviews = await coordinator.list_groups()
    assert list_error is ErrorCode.NONE
    assert {(item.group_id, item.protocol_type) for item in overviews} == {
        ("group", "consumer"),
        ("offsets-only", ""),
    }
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: client.join("group", leader.member_id))
        await trio.sleep(SETTLE_S)
        [(_, preparing)] = await coordinator.describe_groups(["group"])
        nursery.cancel_scope.cancel()
    assert preparing.state is GroupState.PREPARING_REBALANCE
    assert preparing.protocol == "" and all(member.metadata == b"" for member in preparing.members)


async def test_a_join_without_a_usable_rebalance_timeout_uses_the_session_timeout(
    autojump_clock: trio.testing.MockClock, node: Node, client: Client
) -> None:
    await node.start()
    old = await client.join("group", rebalance_timeout_ms=-1)
    await client.sync(old, assignments={old.member_id: b"all"})
    heartbeats: list[ErrorCode] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keep_heartbeating, client, old, heartbeats)
        start = trio.current_time()
        newcomer = await client.join("group", rebalance_timeout_ms=0, client_id="newcomer")
        waited_s = trio.current_time() - start
    # The old member heartbeats but never rejoins: the session timeout ends the wait.
    assert waited_s == pytest.approx(SESSION_S, abs=0.01)
    assert newcomer.error is ErrorCode.NONE
    assert [joined.member_id for joined in newcomer.members] == [newcomer.member_id]
    assert heartbeats[-1] is ErrorCode.UNKNOWN_MEMBER_ID
