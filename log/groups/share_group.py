"""Share groups' membership (KIP-932), as a sans-I/O state machine.

A share group has no rebalance: a member joins with ShareGroupHeartbeat at
epoch 0 and its subscription, and is told its partitions in the answer. The
coordinator keeps a **group epoch** that every change of membership,
subscriptions or the subscribed topics' partition counts raises, and computes
the assignment afresh at each one (the simple assignor below). A member whose
partitions change takes the group epoch as its **member epoch**, and its next
answer carries them; partitions may be shared by several members (records,
not partitions, are what members hold), so nothing has to be revoked first.

A heartbeat names the member's epoch: 0 joins, -1 leaves, anything else must
be the member's current epoch, or the one before it when the answer that
raised it was lost (FENCED_MEMBER_EPOCH otherwise); an unknown member is
UNKNOWN_MEMBER_ID, and both make the client join again. A member that does not
heartbeat within the session timeout is removed.

The **simple assignor** spreads each subscribed topic's partitions over the
members subscribed to it, round robin from a rotating start, so that every
partition has a member; when a topic has fewer partitions than members, each
member gets one, and partitions are shared.

Every call takes ``now_ms``; nothing reads a clock. One caller at a time (the
coordinator's trio thread).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from eventplatform.log.protocol import ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
SHARE_GROUP_MAX_SIZE = 200
"""Kafka's ``group.share.max.size``."""
SHARE_GROUP_MAX_SUBSCRIBED_TOPICS = 10_000
"""The most topic names one member may subscribe to (a bound on a heartbeat's work)."""
ASSIGNOR_NAME = "simple"


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = SHARE_GROUP_MAX_SIZE


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: tuple[str, ...]
    member_epoch: int = 0
    previous_epoch: int = -1
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)
    sent_epoch: int = -1
    """The member epoch whose assignment the member was last sent."""
    deadline_ms: int = 0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    partition_counts: dict[str, int] = field(default_factory=dict)
    """The subscribed topics' partition counts the assignment was computed for."""

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {topic for member in self.members.values() for topic in member.subscribed}


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None
    subscribed: tuple[str, ...] | None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    assignment: dict[str, tuple[int, ...]] | None = None
    """The member's partitions by topic name, when it has not been sent them yet."""


class ShareGroups:
    """Every share group of one coordinator; see the module docstring."""

    def __init__(self) -> None:
        self.groups: dict[str, ShareGroup] = {}

    def heartbeat(
        self,
        request: ShareHeartbeat,
        partition_counts: Mapping[str, int],
        settings: ShareGroupSettings,
        now_ms: int,
    ) -> ShareHeartbeatResult:
        """Answer one heartbeat. ``partition_counts`` has the partition count of every
        existing topic that the group's members (this one included) subscribe to."""
        error = _check(request)
        if error is not None:
            return ShareHeartbeatResult(ErrorCode.INVALID_REQUEST, error)
        group = self.groups.get(request.group_id)
        if request.member_epoch == LEAVE_EPOCH:
            return self._leave(group, request, partition_counts)
        if request.member_epoch == JOIN_EPOCH:
            if group is None:
                group = self.groups[request.group_id] = ShareGroup(request.group_id)
            member = group.members.get(request.member_id)
            if member is None:
                if len(group.members) >= settings.max_size:
                    return ShareHeartbeatResult(
                        ErrorCode.GROUP_MAX_SIZE_REACHED,
                        f"the share group has its {settings.max_size} members",
                    )
                member = ShareMember(
                    request.member_id or uuid.uuid4().hex,
                    request.client_id,
                    request.client_host,
                    request.rack_id,
                    (),
                )
                group.members[member.member_id] = member
                group.group_epoch += 1
            member.sent_epoch = -1  # a member that joins again is told everything again
        else:
            member = group.members.get(request.member_id) if group is not None else None
            if member is None:
                return ShareHeartbeatResult(
                    ErrorCode.UNKNOWN_MEMBER_ID, "the member is not in the share group"
                )
            if request.member_epoch == member.previous_epoch:
                member.sent_epoch = -1  # the answer that raised its epoch was lost
            elif request.member_epoch != member.member_epoch:
                return ShareHeartbeatResult(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"epoch {request.member_epoch} is not the member's {member.member_epoch}",
                )
        assert group is not None
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if (
            request.subscribed is not None
            and tuple(sorted(request.subscribed)) != member.subscribed
        ):
            member.subscribed = tuple(sorted(set(request.subscribed)))
            group.group_epoch += 1
        member.deadline_ms = now_ms + settings.session_timeout_ms
        self._assign_if_changed(group, partition_counts)
        assignment = None
        if member.sent_epoch != member.member_epoch:
            assignment = dict(member.assignment)
            member.sent_epoch = member.member_epoch
        return ShareHeartbeatResult(
            ErrorCode.NONE, None, member.member_id, member.member_epoch, assignment
        )

    def _leave(
        self,
        group: ShareGroup | None,
        request: ShareHeartbeat,
        partition_counts: Mapping[str, int],
    ) -> ShareHeartbeatResult:
        member = group.members.get(request.member_id) if group is not None else None
        if group is None or member is None:
            return ShareHeartbeatResult(
                ErrorCode.UNKNOWN_MEMBER_ID, "the member is not in the share group"
            )
        self._remove(group, member.member_id, partition_counts)
        return ShareHeartbeatResult(ErrorCode.NONE, None, member.member_id, LEAVE_EPOCH)

    def _remove(
        self, group: ShareGroup, member_id: str, partition_counts: Mapping[str, int]
    ) -> None:
        del group.members[member_id]
        group.group_epoch += 1
        self._assign_if_changed(group, partition_counts)

    # ------------------------------------------------------------ timers

    def next_deadline_ms(self) -> int | None:
        return min(
            (m.deadline_ms for g in self.groups.values() for m in g.members.values()),
            default=None,
        )

    def advance(self, now_ms: int, partition_counts: Mapping[str, int]) -> list[tuple[str, str]]:
        """Remove every member whose session ran out; the (group, member) pairs removed."""
        removed = []
        for group in self.groups.values():
            for member in list(group.members.values()):
                if member.deadline_ms <= now_ms:
                    self._remove(group, member.member_id, partition_counts)
                    removed.append((group.group_id, member.member_id))
        return removed

    # ------------------------------------------------------------ admin

    def delete(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        del self.groups[group_id]
        return ErrorCode.NONE

    # ------------------------------------------------------------ assignment

    def _assign_if_changed(self, group: ShareGroup, partition_counts: Mapping[str, int]) -> None:
        counts = {topic: partition_counts.get(topic, 0) for topic in group.subscribed_topics()}
        counts = {topic: count for topic, count in counts.items() if count > 0}
        if counts != group.partition_counts:
            group.partition_counts = counts
            group.group_epoch += 1
        if group.assignment_epoch == group.group_epoch:
            return
        target = assign(group.members, counts)
        for member_id, partitions in target.items():
            member = group.members[member_id]
            if partitions != member.assignment or member.member_epoch == 0:
                member.assignment = partitions
                member.previous_epoch = member.member_epoch
                member.member_epoch = group.group_epoch
        group.assignment_epoch = group.group_epoch


def assign(
    members: Mapping[str, ShareMember], partition_counts: Mapping[str, int]
) -> dict[str, dict[str, tuple[int, ...]]]:
    """The simple assignor: see the module docstring. Deterministic for one input."""
    result: dict[str, dict[str, list[int]]] = {member_id: {} for member_id in members}
    rotation = 0
    for topic in sorted(partition_counts):
        subscribers = sorted(m for m, member in members.items() if topic in member.subscribed)
        if not subscribers:
            continue
        count = partition_counts[topic]
        if count >= len(subscribers):
            for partition in range(count):
                owner = subscribers[(partition + rotation) % len(subscribers)]
                result[owner].setdefault(topic, []).append(partition)
            rotation += count
        else:
            for index, member_id in enumerate(subscribers):
                result[member_id].setdefault(topic, []).append((index + rotation) % count)
            rotation += len(subscribers)
    return {
        member_id: {topic: tuple(sorted(parts)) for topic, parts in topics.items()}
        for member_id, topics in result.items()
    }


def _check(request: ShareHeartbeat) -> str | None:
    """What makes a heartbeat malformed, in Kafka's words, or None."""
    if not request.group_id:
        return "GroupId can't be empty."
    if request.member_epoch < LEAVE_EPOCH:
        return f"MemberEpoch {request.member_epoch} is invalid."
    if request.member_epoch != JOIN_EPOCH and not request.member_id:
        return "MemberId can't be empty."
    if request.member_epoch == JOIN_EPOCH and request.subscribed is None:
        return "SubscribedTopicNames must be set in first request."
    if (
        request.subscribed is not None
        and len(request.subscribed) > SHARE_GROUP_MAX_SUBSCRIBED_TOPICS
    ):
        return f"a member subscribes to at most {SHARE_GROUP_MAX_SUBSCRIBED_TOPICS} topics"
    return None
