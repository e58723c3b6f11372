"""Share groups' membership: joining, epochs, fencing, leaving, sessions running out,
and the simple assignor."""

from __future__ import annotations

from eventplatform.log.groups.share_group import (
    ShareGroups,
    ShareGroupSettings,
    ShareHeartbeat,
    ShareMember,
    assign,
)
from eventplatform.log.protocol import ErrorCode

SETTINGS = ShareGroupSettings(session_timeout_ms=1_000, max_size=3)
COUNTS = {"t": 4, "u": 1}


def _beat(groups: ShareGroups, member: str, epoch: int, topics=("t",), now: int = 0):
    request = ShareHeartbeat("g", member, epoch, None, topics)
    return groups.heartbeat(request, COUNTS, SETTINGS, now)


def test_a_member_joins_and_is_told_its_partitions_once() -> None:
    groups = ShareGroups()
    joined = _beat(groups, "m1", 0)
    assert joined.error is ErrorCode.NONE and joined.member_id == "m1"
    assert joined.assignment == {"t": (0, 1, 2, 3)}
    again = _beat(groups, "m1", joined.member_epoch, topics=None)
    assert again.error is ErrorCode.NONE and again.assignment is None


def test_a_second_member_takes_half_and_the_first_hears_of_it() -> None:
    groups = ShareGroups()
    first = _beat(groups, "m1", 0)
    second = _beat(groups, "m2", 0)
    assert second.assignment == {"t": (1, 3)}
    moved = _beat(groups, "m1", first.member_epoch, topics=None)
    assert moved.member_epoch > first.member_epoch
    assert moved.assignment == {"t": (0, 2)}


def test_more_members_than_partitions_share_them() -> None:
    members = {m: ShareMember(m, "", "", None, ("u",)) for m in ("a", "b", "c")}
    assert assign(members, {"u": 1}) == {m: {"u": (0,)} for m in ("a", "b", "c")}


def test_a_stale_epoch_is_fenced_and_the_previous_one_accepted() -> None:
    groups = ShareGroups()
    first = _beat(groups, "m1", 0)
    _beat(groups, "m2", 0)
    moved = _beat(groups, "m1", first.member_epoch, topics=None)
    assert moved.assignment is not None
    # the answer that raised the epoch was lost: the previous epoch is told again
    repeated = _beat(groups, "m1", first.member_epoch, topics=None)
    assert repeated.error is ErrorCode.NONE and repeated.assignment == moved.assignment
    assert _beat(groups, "m1", 99, topics=None).error is ErrorCode.FENCED_MEMBER_EPOCH
    assert _beat(groups, "nobody", 3, topics=None).error is ErrorCode.UNKNOWN_MEMBER_ID


def test_leaving_and_running_out_remove_members() -> None:
    groups = ShareGroups()
    _beat(groups, "m1", 0, now=0)
    _beat(groups, "m2", 0, now=500)
    assert _beat(groups, "m2", -1, topics=None).member_epoch == -1
    assert groups.advance(999, COUNTS) == []
    assert groups.advance(1_000, COUNTS) == [("g", "m1")]
    assert groups.groups["g"].state == "Empty"
    assert groups.delete("g") is ErrorCode.NONE


def test_malformed_heartbeats_and_a_full_group_are_refused() -> None:
    groups = ShareGroups()
    assert _beat(groups, "m1", 0, topics=None).error is ErrorCode.INVALID_REQUEST
    assert _beat(groups, "", 5).error is ErrorCode.INVALID_REQUEST
    assert _beat(groups, "m1", -2).error is ErrorCode.INVALID_REQUEST
    for member in ("a", "b", "c"):
        assert _beat(groups, member, 0).error is ErrorCode.NONE
    assert _beat(groups, "d", 0).error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert groups.delete("g") is ErrorCode.NON_EMPTY_GROUP


def test_new_partitions_raise_the_epoch_and_reach_the_member() -> None:
    groups = ShareGroups()
    joined = _beat(groups, "m1", 0, topics=("u",))
    assert joined.assignment == {"u": (0,)}
    grown = groups.heartbeat(
        ShareHeartbeat("g", "m1", joined.member_epoch, None, None), {"u": 2}, SETTINGS, 10
    )
    assert grown.member_epoch > joined.member_epoch and grown.assignment == {"u": (0, 1)}
