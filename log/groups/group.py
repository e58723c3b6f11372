"""One consumer group of the classic protocol: its members, state and timers, as plain data.

States and the transitions Kafka allows between them::

    Empty ──join──> PreparingRebalance ──all joined or timeout──> CompletingRebalance
      ^                  ^       │                                   │   │
      │                  │       └──no member left──> Empty           │   │ leader's SyncGroup
      │                  └──────────── join, leave, expiry ───────────┘   v
      │                  └──────────── join, leave, expiry ────────────── Stable
    any state ──deleted or expired──> Dead

``Group`` keeps the invariants that hold between requests: the leader is a
member, every static member's instance id maps to its member id, a member
waits for at most one JoinGroup and one SyncGroup answer, the members
waiting for a JoinGroup answer are exactly those with a join callback. It
makes no decision about the protocol; :mod:`eventplatform.log.groups.core`
does. Timers are deadlines in monotonic milliseconds held here and fired by
the core; nothing in this module reads a clock or does I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from eventplatform.log.groups.records import CommittedOffset, TopicPartition
from eventplatform.log.invariants import require
from eventplatform.log.protocol import ErrorCode

NO_GENERATION = -1


class GroupState(StrEnum):
    """Kafka's names, as DescribeGroups and ListGroups report them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(GroupState),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """What the leader learns about each member in its JoinGroup answer."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]
Protocols = tuple[tuple[str, bytes], ...]


@dataclass(slots=True)
class JoinTimer:
    """When the current rebalance stops waiting for members to rejoin.

    An initial timer (Kafka's ``InitialDelayedJoin``, armed when an Empty group
    starts rebalancing) never completes early: it waits out
    ``group.initial.rebalance.delay.ms`` and re-arms while new members keep
    arriving, until ``remaining_ms`` of the rebalance timeout is used up.
    """

    deadline_ms: int
    initial: bool = False
    remaining_ms: int = 0


@dataclass(slots=True, eq=False)
class Member:
    """One member; ``heartbeat_deadline_ms`` is when it is considered gone."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_callback: JoinCallback | None = None
    sync_callback: SyncCallback | None = None
    is_new: bool = False
    heartbeat_deadline_ms: int | None = None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: Protocols) -> bool:
        """Same protocols, same order, same metadata: a rejoin that changes nothing."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The first protocol of this member's preference list that every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


def unique_protocols(protocols: list[tuple[str, bytes]]) -> Protocols:
    """Drop repeated protocol names, keeping the first (a member lists each once)."""
    seen: set[str] = set()
    kept = []
    for name, metadata in protocols:
        if name not in seen:
            seen.add(name)
            kept.append((name, bytes(metadata)))
    return tuple(kept)


def new_member_id(prefix: str) -> str:
    """Kafka's form: the client id (or group instance id), a dash and a random UUID."""
    return f"{prefix}-{uuid.uuid4()}"


@dataclass(eq=False)
class Group:
    """See the module docstring."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    current_state_timestamp_ms: int | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)
    pending_sync_members: set[str] = field(default_factory=set)
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    pending_offsets: dict[int, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    """Offsets committed inside a transaction (TxnOffsetCommit), by producer id, until
    its marker commits them (into ``offsets``) or aborts them."""
    new_member_added: bool = False
    join_timer: JoinTimer | None = None
    sync_deadline_ms: int | None = None
    scheduled_ms: int | None = None

    # ------------------------------------------------------------ queries

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    @property
    def size(self) -> int:
        return len(self.members)

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_members

    @property
    def awaiting_join_count(self) -> int:
        return sum(1 for member in self.members.values() if member.is_awaiting_join)

    def not_yet_rejoined(self) -> list[Member]:
        return [member for member in self.members.values() if not member.is_awaiting_join]

    def has_all_members_joined(self) -> bool:
        return self.awaiting_join_count == len(self.members) and not self.pending_members

    @property
    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of any member: how long a rebalance may wait."""
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in _PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    def is_unused(self) -> bool:
        """Created by a request that then failed: no member, no offset, nothing written."""
        return (
            self.is_(GroupState.EMPTY)
            and self.generation_id == 0
            and not self.members
            and not self.pending_members
            and not self.offsets
            and not self.pending_offsets
        )

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        common = set(first.protocol_names)
        for member in members:
            common &= set(member.protocol_names)
        return common

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a member with these protocols may join (Kafka's ``supportsProtocols``)."""
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        counts = self._support_counts()
        return any(counts.get(name, 0) == len(self.members) for name in names)

    def _support_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for member in self.members.values():
            for name in member.protocol_names:
                counts[name] = counts.get(name, 0) + 1
        return counts

    def select_protocol(self) -> str:
        """The common protocol with the most first-choice votes.

        Each member votes for the first protocol in its own preference list
        that every member supports. Ties go to the protocol the leader
        prefers, so the choice is deterministic.
        """
        require(bool(self.members), "a protocol is selected only for a group with members")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        rank = {name: position for position, name in enumerate(leader.protocol_names)}
        return max(votes, key=lambda name: (votes[name], -rank.get(name, len(rank))))

    def current_member_metadata(self) -> tuple[JoinedMember, ...]:
        """Every member's metadata for the selected protocol: the leader's JoinGroup answer."""
        require(
            self.state not in (GroupState.DEAD, GroupState.PREPARING_REBALANCE),
            f"group {self.group_id} has no member metadata while {self.state}",
        )
        protocol = self.protocol_name or ""
        return tuple(
            JoinedMember(member.member_id, member.group_instance_id, member.metadata(protocol))
            for member in self.members.values()
        )

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            member.heartbeat_deadline_ms
            for member in self.members.values()
            if member.heartbeat_deadline_ms is not None
        ]
        deadlines.extend(self.pending_members.values())
        if self.join_timer is not None:
            deadlines.append(self.join_timer.deadline_ms)
        if self.sync_deadline_ms is not None:
            deadlines.append(self.sync_deadline_ms)
        return min(deadlines, default=None)

    def all_members(self) -> Iterator[Member]:
        return iter(list(self.members.values()))

    # ------------------------------------------------------------ changes

    def transition_to(self, state: GroupState, wall_ms: int) -> None:
        require(
            self.state in _PREVIOUS_STATES[state],
            f"group {self.group_id} cannot go from {self.state} to {state}",
        )
        self.state = state
        self.current_state_timestamp_ms = wall_ms

    def add(self, member: Member, callback: JoinCallback | None) -> None:
        instance_id = member.group_instance_id
        if instance_id is not None:
            require(
                instance_id not in self.static_members,
                f"group {self.group_id} already has static member {instance_id}",
            )
            self.static_members[instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        require(self.protocol_type == member.protocol_type, "members share one protocol type")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.join_callback = callback
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        """Forget a member; callbacks still held are the caller's to answer first."""
        member = self.members.pop(member_id, None)
        instance_id = None if member is None else member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self,
        member: Member,
        protocols: Protocols,
        *,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> None:
        """A known member rejoins: new protocols and timeouts, a new join callback.

        A JoinGroup still held under the same member id (its client gave up
        and retried) is answered REBALANCE_IN_PROGRESS, so no handler waits
        for an answer that would go to the newer request.
        """
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        previous = member.join_callback
        member.join_callback = callback
        if previous is not None and previous is not callback:
            previous(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))

    def replace_static_member(
        self, instance_id: str, old_member_id: str, new_member_id: str
    ) -> Member:
        """Give a static member a new member id, fencing whatever waits under the old one."""
        member = self.members.pop(old_member_id, None)
        require(member is not None, f"static member {old_member_id} of {self.group_id} is missing")
        assert member is not None
        self.invoke_join_callback(member, JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_member_id))
        self.invoke_sync_callback(member, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def invoke_join_callback(self, member: Member, result: JoinResult) -> bool:
        callback = member.join_callback
        if callback is None:
            return False
        member.join_callback = None
        callback(result)
        return True

    def invoke_sync_callback(self, member: Member, result: SyncResult) -> bool:
        callback = member.sync_callback
        if callback is None:
            return False
        member.sync_callback = None
        callback(result)
        return True

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep a leader that rejoined, else pick any member that did; False when none did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def init_next_generation(self, wall_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, wall_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, wall_ms)
        self.pending_sync_members.clear()
        self.sync_deadline_ms = None
