"""The sans-I/O core driven directly: several requests at the same millisecond, then timers.

Through the trio shell, which request lands before the timer task wakes is
up to the scheduler; here the order is chosen, so the orders that are rare
in a running broker are tested every time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eventplatform.log.groups.core import GroupCoordinatorCore
from eventplatform.log.groups.group import GroupState, JoinResult
from eventplatform.log.groups.messages import GroupConfig, JoinRequest
from eventplatform.log.groups.offsets_topic import OffsetsTopic
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.topics import TopicRegistry
from eventplatform.log.storage import LogConfig

WALL_MS = 1_700_000_000_000
SESSION_TIMEOUT_MS = 10_000


@pytest.fixture
def core(tmp_path: Path) -> GroupCoordinatorCore:
    topics = TopicRegistry.open(tmp_path, LogConfig(), lambda: WALL_MS)
    offsets_topic = OffsetsTopic(
        topics, partitions=2, segment_bytes=1 << 20, clock_ms=lambda: WALL_MS
    )
    offsets_topic.ensure_created()
    config = GroupConfig(
        session_timeout_ms_min=1_000,
        session_timeout_ms_max=60_000,
        initial_rebalance_delay_ms=0,
        group_size_max=100,
        offsets_retention_ms=3_600_000,
    )
    return GroupCoordinatorCore(config, offsets_topic, lambda: WALL_MS)


def join_request(member_id: str = "", *, require_known_member_id: bool = False) -> JoinRequest:
    return JoinRequest(
        group_id="group",
        member_id=member_id,
        group_instance_id=None,
        client_id="client",
        client_host="/127.0.0.1",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        rebalance_timeout_ms=SESSION_TIMEOUT_MS,
        protocol_type="consumer",
        protocols=(("range", b""),),
        require_known_member_id=require_known_member_id,
    )


def test_members_joining_in_the_same_millisecond_with_no_initial_delay_form_one_generation(
    core: GroupCoordinatorCore,
) -> None:
    answers: list[JoinResult] = []
    core.join_group(join_request(), 100, answers.append)
    core.join_group(join_request(), 100, answers.append)
    assert answers == [], "an Empty group's first rebalance waits for the timer"
    assert core.next_deadline_ms() == 100
    core.advance(100)
    assert [answer.error for answer in answers] == [ErrorCode.NONE, ErrorCode.NONE]
    assert {answer.generation_id for answer in answers} == {1}
    assert core.groups["group"].state is GroupState.COMPLETING_REBALANCE


def test_a_group_whose_members_all_expire_settles_while_a_new_member_is_pending(
    core: GroupCoordinatorCore,
) -> None:
    answers: list[JoinResult] = []
    core.join_group(join_request(), 0, answers.append)
    core.advance(0)
    (member,) = answers
    # A second client asks to join and is told its member id, then the first one goes silent.
    core.join_group(join_request(require_known_member_id=True), 5_000, answers.append)
    assert answers[-1].error is ErrorCode.MEMBER_ID_REQUIRED
    # At 10 s the silent member's session ends: a rebalance of a group without members,
    # waiting on nobody but the pending member, which never comes back either.
    core.advance(SESSION_TIMEOUT_MS)
    group = core.groups["group"]
    assert group.members == {}
    assert group.state is GroupState.EMPTY
    core.advance(5_000 + SESSION_TIMEOUT_MS)
    assert "group" not in core.groups or not core.groups["group"].pending_members
    assert member.member_id not in core.groups.get("group", group).members
