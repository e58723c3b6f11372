"""The classic group protocol as a sans-I/O state machine: Kafka's ``GroupCoordinator``.

``GroupCoordinatorCore`` owns every group of the broker and decides every
answer of JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups and DeleteGroups, with Kafka's error
codes. It reads no clock and waits for nothing:

- Each call takes ``now_ms``, a monotonic time in milliseconds, and every
  timer is a deadline on that scale (session expiry, the new-member join
  timeout, the rebalance's join and sync deadlines, MEMBER_ID_REQUIRED
  members that never come back). ``next_deadline_ms`` says when the next
  one is due and ``advance(now_ms)`` fires every due one. The shell sleeps
  in between.
- JoinGroup and SyncGroup answers may be held: they are delivered through
  the callback passed in, now or by a later call (another member's join,
  the leader's SyncGroup, a timer).
- Writes to ``__consumer_offsets`` go through the ``RecordSink`` port,
  which appends synchronously and reports a Kafka error code. Wall-clock
  timestamps for the records come from ``wall_clock_ms``.

Concurrency: exactly one caller (the coordinator's trio thread) calls every
method; each call runs to completion, so a group's state is never seen half
changed. Callbacks must not call back into the core.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from eventplatform.log.groups.group import (
    Group,
    GroupState,
    JoinCallback,
    JoinResult,
    JoinTimer,
    Member,
    Protocols,
    SyncCallback,
    SyncResult,
    new_member_id,
)
from eventplatform.log.groups.records import (
    CommittedOffset,
    GroupRecord,
    MemberRecord,
    TopicPartition,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from eventplatform.log.invariants import require
from eventplatform.log.protocol import ErrorCode

log = logging.getLogger("eventplatform.groups")

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
TIMER_PASSES_MAX = 16
OFFSET_METADATA_BYTES_MAX_DEFAULT = 4096

_COORDINATOR_UNAVAILABLE_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)
_NOT_COORDINATOR_ERRORS = frozenset(
    {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR}
)
_TOO_LARGE_ERRORS = frozenset(
    {ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE}
)

Record = tuple[bytes, bytes | None]


class RecordSink(Protocol):
    """Appends records of one group to its ``__consumer_offsets`` partition, as one batch."""

    def append(self, group_id: str, records: Sequence[Record]) -> ErrorCode: ...


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker's ``group.*`` and ``offsets.*`` settings the protocol obeys."""

    session_timeout_ms_min: int
    session_timeout_ms_max: int
    initial_rebalance_delay_ms: int
    group_size_max: int
    offsets_retention_ms: int
    offset_metadata_bytes_max: int = OFFSET_METADATA_BYTES_MAX_DEFAULT


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    require_known_member_id: bool


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode
    members: tuple[tuple[MemberIdentity, ErrorCode], ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One partition's commit as a member sends it."""

    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: GroupState
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: GroupState


def group_store_error(error: ErrorCode) -> ErrorCode:
    """What a failed group-metadata write is answered with (Kafka's mapping)."""
    if error in _COORDINATOR_UNAVAILABLE_ERRORS:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in _NOT_COORDINATOR_ERRORS:
        return ErrorCode.NOT_COORDINATOR
    if error is ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.UNKNOWN_SERVER_ERROR


def offset_store_error(error: ErrorCode) -> ErrorCode:
    """What a failed offset-commit write is answered with (Kafka's mapping)."""
    if error in _COORDINATOR_UNAVAILABLE_ERRORS:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in _NOT_COORDINATOR_ERRORS:
        return ErrorCode.NOT_COORDINATOR
    if error in _TOO_LARGE_ERRORS:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return ErrorCode.UNKNOWN_SERVER_ERROR


class GroupCoordinatorCore:
    """See the module docstring."""

    def __init__(
        self, config: GroupConfig, sink: RecordSink, wall_clock_ms: Callable[[], int]
    ) -> None:
        self.config = config
        self.sink = sink
        self.wall_clock_ms = wall_clock_ms
        self.groups: dict[str, Group] = {}
        self._timers: list[tuple[int, int, str]] = []
        self._sequence = itertools.count()

    # ------------------------------------------------------------ timers

    def next_deadline_ms(self) -> int | None:
        """The earliest armed deadline (possibly one that has since moved later)."""
        return self._timers[0][0] if self._timers else None

    def advance(self, now_ms: int) -> None:
        """Fire every timer due at ``now_ms``."""
        while self._timers and self._timers[0][0] <= now_ms:
            deadline_ms, _, group_id = heapq.heappop(self._timers)
            group = self.groups.get(group_id)
            if group is None or group.scheduled_ms != deadline_ms:
                continue
            group.scheduled_ms = None
            if self._fire_until_settled(group, now_ms):
                self._schedule(group)

    def _fire_until_settled(self, group: Group, now_ms: int) -> bool:
        """Fire the group's due timers until none is due; False when the group is gone.

        Firing may arm a timer that is due at once (a rebalance of a group whose
        last member just left waits zero milliseconds), so a few passes may be
        needed. A group that never settles is a bug that would spin the broker.
        """
        for _ in range(TIMER_PASSES_MAX):
            self._fire_timers(group, now_ms)
            if self.groups.get(group.group_id) is not group:
                return False
            due_ms = group.next_deadline_ms()
            if due_ms is None or due_ms > now_ms:
                return True
        require(False, f"group {group.group_id} still has a timer due at {due_ms}")
        return True

    def _schedule(self, group: Group) -> None:
        """Arm the group's earliest deadline unless an earlier entry is armed already."""
        deadline_ms = group.next_deadline_ms()
        if deadline_ms is None:
            return
        if group.scheduled_ms is None or deadline_ms < group.scheduled_ms:
            group.scheduled_ms = deadline_ms
            heapq.heappush(self._timers, (deadline_ms, next(self._sequence), group.group_id))

    def _fire_timers(self, group: Group, now_ms: int) -> None:
        for member_id, pending_deadline_ms in list(group.pending_members.items()):
            if pending_deadline_ms <= now_ms:
                log.info("pending member %s of group %s expired", member_id, group.group_id)
                self._remove_pending_member(group, member_id, now_ms)
        for member in group.all_members():
            deadline_ms = member.heartbeat_deadline_ms
            current = group.members.get(member.member_id) is member
            if current and deadline_ms is not None and deadline_ms <= now_ms:
                self._expire_heartbeat(group, member, now_ms)
        if group.join_timer is not None and group.join_timer.deadline_ms <= now_ms:
            self._expire_join(group, now_ms)
        if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now_ms:
            self._expire_sync(group, now_ms)

    def _arm_heartbeat(
        self, group: Group, member: Member, now_ms: int, timeout_ms: int | None = None
    ) -> None:
        """Kafka's ``completeAndScheduleNextHeartbeatExpiration``."""
        member.heartbeat_deadline_ms = now_ms + (
            member.session_timeout_ms if timeout_ms is None else timeout_ms
        )
        self._schedule(group)

    def _expire_heartbeat(self, group: Group, member: Member, now_ms: int) -> None:
        """A member's deadline passed: remove it unless it is parked in a join or a sync.

        A parked member's deadline is re-armed when its answer is delivered. A
        new member's deadline is the new-member join timeout; it never counts
        as parked.
        """
        member.heartbeat_deadline_ms = None
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            return
        log.info("member %s of group %s failed its session", member.member_id, group.group_id)
        self._remove_member_and_update_group(group, member, now_ms)

    # ------------------------------------------------------------ join

    def join_group(self, request: JoinRequest, now_ms: int, callback: JoinCallback) -> None:
        """Handle a JoinGroup; ``callback`` gets the answer now or when the rebalance completes."""
        config = self.config
        if not (
            config.session_timeout_ms_min
            <= request.session_timeout_ms
            <= config.session_timeout_ms_max
        ):
            callback(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, request.member_id))
            return
        if request.rebalance_timeout_ms <= 0:
            # No usable rebalance timeout: the session timeout bounds the rebalance, as in v0.
            request = dataclasses.replace(request, rebalance_timeout_ms=request.session_timeout_ms)
        is_unknown_member = request.member_id == ""
        group = self.groups.get(request.group_id)
        if group is None:
            if not is_unknown_member:
                callback(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id))
                return
            group = self.groups[request.group_id] = Group(request.group_id)
        if not self._accepts_joining_member(group, request.member_id):
            self._remove_rejected_member(group, request.member_id, now_ms)
            callback(JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED, ""))
        elif is_unknown_member:
            self._join_new_member(group, request, now_ms, callback)
        else:
            self._join_current_member(group, request, now_ms, callback)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms)
        if group.is_unused():
            del self.groups[group.group_id]

    def _accepts_joining_member(self, group: Group, member_id: str) -> bool:
        size_max = self.config.group_size_max
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (
                member is not None and member.is_awaiting_join
            ) or group.awaiting_join_count < size_max
        return group.has(member_id) or group.size < size_max

    def _remove_rejected_member(self, group: Group, member_id: str, now_ms: int) -> None:
        member = group.members.get(member_id)
        if member is not None:
            self._remove_member_and_update_group(group, member, now_ms)
        else:
            group.pending_members.pop(member_id, None)

    def _join_new_member(
        self, group: Group, request: JoinRequest, now_ms: int, callback: JoinCallback
    ) -> None:
        names = [name for name, _ in request.protocols]
        if group.is_(GroupState.DEAD):
            callback(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, ""))
            return
        if not group.supports_protocols(request.protocol_type, names):
            callback(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, ""))
            return
        instance_id = request.group_instance_id
        member_id = new_member_id(instance_id if instance_id is not None else request.client_id)
        if instance_id is not None:
            old_member_id = group.static_members.get(instance_id)
            if old_member_id is not None:
                self._replace_static_member(
                    group, request, old_member_id, member_id, now_ms, callback
                )
            else:
                self._add_member_and_rebalance(group, request, member_id, now_ms, callback)
        elif request.require_known_member_id:
            group.pending_members[member_id] = now_ms + request.session_timeout_ms
            self._schedule(group)
            callback(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id))
        else:
            self._add_member_and_rebalance(group, request, member_id, now_ms, callback)

    def _join_current_member(
        self, group: Group, request: JoinRequest, now_ms: int, callback: JoinCallback
    ) -> None:
        member_id = request.member_id
        names = [name for name, _ in request.protocols]
        if group.is_(GroupState.DEAD):
            callback(JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(request.protocol_type, names):
            callback(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if group.is_pending(member_id) and request.group_instance_id is None:
            self._add_member_and_rebalance(group, request, member_id, now_ms, callback)
            return
        error = self._validate_member(group, member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            callback(JoinResult(error, member_id))
            return
        member = group.members[member_id]
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, request, now_ms, callback)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            if member.matches(request.protocols):
                callback(self._current_generation(group, member_id, with_members=True))
            else:
                self._update_member_and_rebalance(group, member, request, now_ms, callback)
        elif group.is_(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(request.protocols):
                self._update_member_and_rebalance(group, member, request, now_ms, callback)
            else:
                callback(self._current_generation(group, member_id, with_members=False))
        else:
            callback(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))

    def _current_generation(
        self, group: Group, member_id: str, *, with_members: bool
    ) -> JoinResult:
        members = (
            group.current_member_metadata() if with_members and group.is_leader(member_id) else ()
        )
        return JoinResult(
            ErrorCode.NONE,
            member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members,
        )

    def _validate_member(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
        """UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID unless ``member_id`` is a current member."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info(
                    "member %s of group %s is fenced by %s (instance %s)",
                    member_id,
                    group.group_id,
                    current,
                    instance_id,
                )
                return ErrorCode.FENCED_INSTANCE_ID
            return ErrorCode.NONE
        return ErrorCode.NONE if group.has(member_id) else ErrorCode.UNKNOWN_MEMBER_ID

    def _add_member_and_rebalance(
        self,
        group: Group,
        request: JoinRequest,
        member_id: str,
        now_ms: int,
        callback: JoinCallback,
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            is_new=True,
        )
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, callback)
        # A new member cannot heartbeat until it has its answer; if it gives up
        # and retries under a new id, this timeout removes the abandoned one.
        self._arm_heartbeat(group, member, now_ms, NEW_MEMBER_JOIN_TIMEOUT_MS)
        log.info("member %s joins group %s (%s)", member_id, group.group_id, group.state)
        self._maybe_prepare_rebalance(group, now_ms)

    def _update_member_and_rebalance(
        self,
        group: Group,
        member: Member,
        request: JoinRequest,
        now_ms: int,
        callback: JoinCallback,
    ) -> None:
        group.update_member(
            member,
            request.protocols,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            callback=callback,
        )
        self._maybe_prepare_rebalance(group, now_ms)

    def _replace_static_member(
        self,
        group: Group,
        request: JoinRequest,
        old_member_id: str,
        member_id: str,
        now_ms: int,
        callback: JoinCallback,
    ) -> None:
        """A static member rejoins with an unknown member id: it takes over its old place.

        In a Stable group whose selected protocol would not change, there is
        no rebalance: the member gets the current generation and the old
        leader id (so it does not act as leader) and keeps its assignment.
        """
        instance_id = request.group_instance_id
        assert instance_id is not None
        member = group.replace_static_member(instance_id, old_member_id, member_id)
        old_protocols = member.protocols
        self._arm_heartbeat(group, member, now_ms)
        group.update_member(
            member,
            request.protocols,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            callback=callback,
        )
        log.info("static member %s of group %s is now %s", instance_id, group.group_id, member_id)
        if group.is_(GroupState.STABLE):
            if group.select_protocol() != group.protocol_name:
                self._maybe_prepare_rebalance(group, now_ms)
            else:
                self._keep_generation(group, member, old_member_id, old_protocols, now_ms)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms)
        else:
            require(
                group.is_(GroupState.PREPARING_REBALANCE),
                f"group {group.group_id} has a static member while {group.state}",
            )

    def _keep_generation(
        self,
        group: Group,
        member: Member,
        old_member_id: str,
        old_protocols: Protocols,
        now_ms: int,
    ) -> None:
        """Persist a static member's new id in a Stable group and answer it, or undo the swap.

        The answer names the leader by the id it had before the swap, so a
        restarted leader does not compute an assignment nobody would receive.
        """
        callback = member.join_callback
        assert callback is not None and member.group_instance_id is not None
        leader_id = old_member_id if group.is_leader(member.member_id) else group.leader_id or ""
        assignment = {other.member_id: other.assignment for other in group.all_members()}
        error = self._store_group(group, assignment)
        if error is ErrorCode.NONE:
            result = self._current_generation(group, member.member_id, with_members=False)
            group.invoke_join_callback(member, _with_leader(result, leader_id))
            return
        member.join_callback = None
        member.protocols = old_protocols
        group.replace_static_member(member.group_instance_id, member.member_id, old_member_id)
        self._arm_heartbeat(group, member, now_ms)
        callback(
            JoinResult(
                error,
                "",
                group.generation_id,
                group.protocol_type,
                group.protocol_name,
                group.leader_id or "",
            )
        )

    # ------------------------------------------------------------ rebalance

    def _maybe_prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, now_ms)

    def _prepare_rebalance(self, group: Group, now_ms: int) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms)
        group.pending_sync_members.clear()
        group.sync_deadline_ms = None
        if group.is_(GroupState.EMPTY):
            delay_ms = self.config.initial_rebalance_delay_ms
            group.join_timer = JoinTimer(
                now_ms + delay_ms,
                initial=True,
                remaining_ms=max(group.rebalance_timeout_ms - delay_ms, 0),
            )
        else:
            group.join_timer = JoinTimer(now_ms + group.rebalance_timeout_ms)
        group.transition_to(GroupState.PREPARING_REBALANCE, self.wall_clock_ms())
        log.info(
            "group %s prepares to rebalance (generation %d, %d members)",
            group.group_id,
            group.generation_id,
            group.size,
        )
        self._schedule(group)
        self._try_complete_join(group, now_ms)

    def _try_complete_join(self, group: Group, now_ms: int) -> None:
        timer = group.join_timer
        if (
            group.is_(GroupState.PREPARING_REBALANCE)
            and timer is not None
            and not timer.initial
            and group.has_all_members_joined()
        ):
            self._complete_join(group, now_ms)

    def _expire_join(self, group: Group, now_ms: int) -> None:
        timer = group.join_timer
        assert timer is not None
        delay_ms = min(self.config.initial_rebalance_delay_ms, timer.remaining_ms)
        if timer.initial and group.new_member_added and delay_ms > 0:
            group.new_member_added = False
            group.join_timer = JoinTimer(
                now_ms + delay_ms,
                initial=True,
                remaining_ms=max(timer.remaining_ms - delay_ms, 0),
            )
            self._schedule(group)
        else:
            self._complete_join(group, now_ms)

    def _complete_join(self, group: Group, now_ms: int) -> None:
        """Kafka's ``onCompleteJoin``: drop who did not rejoin, start the next generation."""
        group.join_timer = None
        group.new_member_added = False
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info("member %s of group %s did not rejoin", member.member_id, group.group_id)
                self._remove_member(group, member)
        if group.is_(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            group.join_timer = JoinTimer(now_ms + group.rebalance_timeout_ms)
            self._schedule(group)
            return
        group.init_next_generation(self.wall_clock_ms())
        if group.is_(GroupState.EMPTY):
            log.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            self._store_group(group, {})
            return
        log.info(
            "group %s stabilized generation %d with %d members, protocol %s",
            group.group_id,
            group.generation_id,
            group.size,
            group.protocol_name,
        )
        for member in group.all_members():
            result = self._current_generation(group, member.member_id, with_members=True)
            group.invoke_join_callback(member, result)
            self._arm_heartbeat(group, member, now_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms
        self._schedule(group)

    def _expire_sync(self, group: Group, now_ms: int) -> None:
        """Members that got their JoinGroup answer but never synced are removed."""
        group.sync_deadline_ms = None
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if not group.pending_sync_members:
            return
        missing = sorted(group.pending_sync_members)
        log.info("group %s removes members that did not sync: %s", group.group_id, missing)
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member(group, member)
        self._prepare_rebalance(group, now_ms)

    def _remove_member(self, group: Group, member: Member) -> None:
        """Forget ``member``, answering whatever of its requests is still held."""
        group.invoke_join_callback(member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, ""))
        group.invoke_sync_callback(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        member.heartbeat_deadline_ms = None
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: Group, member: Member, now_ms: int) -> None:
        self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms)

    def _remove_pending_member(self, group: Group, member_id: str, now_ms: int) -> None:
        group.pending_members.pop(member_id, None)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms)
        if group.is_unused():
            del self.groups[group.group_id]

    # ------------------------------------------------------------ sync

    def sync_group(self, request: SyncRequest, now_ms: int, callback: SyncCallback) -> None:
        """Handle a SyncGroup; followers' answers wait for the leader's assignment."""
        group = self.groups.get(request.group_id)
        if group is None:
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        error = self._validate_sync(group, request)
        if error is not ErrorCode.NONE:
            callback(SyncResult(error))
        elif group.is_(GroupState.EMPTY):
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif group.is_(GroupState.PREPARING_REBALANCE):
            callback(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            self._sync_completing(group, request, now_ms, callback)
        else:
            member = group.members[request.member_id]
            self._remove_pending_sync_member(group, member.member_id)
            callback(
                SyncResult(
                    ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment
                )
            )
            self._arm_heartbeat(group, member, now_ms)

    def _validate_sync(self, group: Group, request: SyncRequest) -> ErrorCode:
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(group, request.member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if request.protocol_type is not None and request.protocol_type != group.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if request.protocol_name is not None and request.protocol_name != group.protocol_name:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    def _sync_completing(
        self, group: Group, request: SyncRequest, now_ms: int, callback: SyncCallback
    ) -> None:
        member = group.members[request.member_id]
        previous = member.sync_callback
        member.sync_callback = callback
        if previous is not None and previous is not callback:
            previous(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        self._remove_pending_sync_member(group, member.member_id)
        if not group.is_leader(member.member_id):
            return
        assignment = {
            member_id: bytes(request.assignments.get(member_id, b"")) for member_id in group.members
        }
        missing = [member_id for member_id in group.members if member_id not in request.assignments]
        if missing:
            log.warning("group %s: empty assignment for members %s", group.group_id, missing)
        error = self._store_group(group, assignment)
        if error is not ErrorCode.NONE:
            self._propagate_assignment_error(group, error, now_ms)
            self._maybe_prepare_rebalance(group, now_ms)
            return
        for other in group.all_members():
            other.assignment = assignment[other.member_id]
        self._propagate_assignment(group, ErrorCode.NONE, now_ms)
        group.transition_to(GroupState.STABLE, self.wall_clock_ms())
        log.info("group %s is stable at generation %d", group.group_id, group.generation_id)

    def _propagate_assignment_error(self, group: Group, error: ErrorCode, now_ms: int) -> None:
        require(
            group.is_(GroupState.COMPLETING_REBALANCE),
            f"assignments are reset only while completing a rebalance, not {group.state}",
        )
        for member in group.all_members():
            member.assignment = b""
        self._propagate_assignment(group, error, now_ms)

    def _propagate_assignment(self, group: Group, error: ErrorCode, now_ms: int) -> None:
        succeeded = error is ErrorCode.NONE
        protocol_type = group.protocol_type if succeeded else None
        protocol_name = group.protocol_name if succeeded else None
        for member in group.all_members():
            result = SyncResult(error, protocol_type, protocol_name, member.assignment)
            if group.invoke_sync_callback(member, result):
                self._arm_heartbeat(group, member, now_ms)

    def _remove_pending_sync_member(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            group.sync_deadline_ms = None

    # ------------------------------------------------------------ heartbeat and leave

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        now_ms: int,
    ) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._arm_heartbeat(group, group.members[member_id], now_ms)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(
        self, group_id: str, leaving: Sequence[MemberIdentity], now_ms: int
    ) -> LeaveResult:
        """Remove members; an empty member id with an instance id removes that static member."""
        group = self.groups.get(group_id)
        if group is None:
            return LeaveResult(
                ErrorCode.NONE,
                tuple((identity, ErrorCode.UNKNOWN_MEMBER_ID) for identity in leaving),
            )
        if group.is_(GroupState.DEAD):
            return LeaveResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return LeaveResult(
            ErrorCode.NONE,
            tuple((identity, self._leave_one(group, identity, now_ms)) for identity in leaving),
        )

    def _leave_one(self, group: Group, identity: MemberIdentity, now_ms: int) -> ErrorCode:
        member_id = identity.member_id
        if member_id == "":
            instance_id = identity.group_instance_id
            current = None if instance_id is None else group.static_members.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            member_id = current
        elif group.is_pending(member_id):
            self._remove_pending_member(group, member_id, now_ms)
            return ErrorCode.NONE
        else:
            error = self._validate_member(group, member_id, identity.group_instance_id)
            if error is not ErrorCode.NONE:
                return error
        log.info("member %s leaves group %s", member_id, group.group_id)
        self._remove_member_and_update_group(group, group.members[member_id], now_ms)
        return ErrorCode.NONE

    # ------------------------------------------------------------ offsets

    def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommit],
        now_ms: int,
    ) -> dict[TopicPartition, int]:
        """Validate the committer, then write the offsets as one batch."""
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION)
            group = self.groups[group_id] = Group(group_id)
        error = self._validate_commit(group, member_id, group_instance_id, generation_id)
        if error is ErrorCode.NONE and group.is_(GroupState.COMPLETING_REBALANCE):
            error = ErrorCode.REBALANCE_IN_PROGRESS
        results: dict[TopicPartition, int]
        if error is not ErrorCode.NONE:
            results = dict.fromkeys(offsets, error)
        else:
            if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
                self._arm_heartbeat(group, group.members[member_id], now_ms)
            results = self._store_offsets(group, offsets)
        if group.is_unused():
            del self.groups[group_id]
        return results

    def _validate_commit(
        self, group: Group, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id != "" or instance_id is not None:
            error = self._validate_member(group, member_id, instance_id)
            if error is not ErrorCode.NONE:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
            return ErrorCode.NONE
        if not group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def _store_offsets(
        self, group: Group, offsets: Mapping[TopicPartition, OffsetCommit]
    ) -> dict[TopicPartition, int]:
        wall_ms = self.wall_clock_ms()
        results: dict[TopicPartition, int] = {}
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for partition, commit in offsets.items():
            metadata = commit.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_bytes_max:
                results[partition] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            accepted[partition] = CommittedOffset(
                commit.offset, metadata, commit.leader_epoch, wall_ms
            )
        if accepted:
            records = [
                (
                    encode_offset_key(group.group_id, partition.topic, partition.partition),
                    encode_offset_value(committed),
                )
                for partition, committed in accepted.items()
            ]
            error = self.sink.append(group.group_id, records)
            if error is ErrorCode.NONE:
                group.offsets.update(accepted)
            else:
                log.warning("group %s: offset commit failed with %s", group.group_id, error.name)
            answer = error if error is ErrorCode.NONE else offset_store_error(error)
            results.update(dict.fromkeys(accepted, answer))
        return results

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """Committed offsets of the group; all of them when ``partitions`` is None."""
        group = self.groups.get(group_id)
        committed = {} if group is None else group.offsets
        if partitions is None:
            return dict(sorted(committed.items()))
        return {partition: committed.get(partition) for partition in partitions}

    # ------------------------------------------------------------ persistence

    def _store_group(self, group: Group, assignment: Mapping[str, bytes]) -> ErrorCode:
        """Write the group's metadata record; the error is already mapped for clients."""
        protocol = group.protocol_name
        require(
            not group.members or protocol is not None,
            f"group {group.group_id} has members but no protocol",
        )
        record = GroupRecord(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp_ms=group.current_state_timestamp_ms or -1,
            members=tuple(
                MemberRecord(
                    member_id=member.member_id,
                    group_instance_id=member.group_instance_id,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    rebalance_timeout_ms=member.rebalance_timeout_ms,
                    session_timeout_ms=member.session_timeout_ms,
                    subscription=member.metadata(protocol or ""),
                    assignment=assignment.get(member.member_id, b""),
                )
                for member in group.members.values()
            ),
        )
        key = encode_group_key(group.group_id)
        error = self.sink.append(group.group_id, [(key, encode_group_value(record))])
        if error is ErrorCode.NONE:
            return error
        log.warning("group %s: metadata write failed with %s", group.group_id, error.name)
        return group_store_error(error)

    def _write_tombstones(
        self, group: Group, partitions: Iterable[TopicPartition], *, group_record: bool
    ) -> ErrorCode:
        records: list[Record] = [
            (encode_offset_key(group.group_id, partition.topic, partition.partition), None)
            for partition in partitions
        ]
        if group_record and group.generation_id > 0:
            records.append((encode_group_key(group.group_id), None))
        if not records:
            return ErrorCode.NONE
        error = self.sink.append(group.group_id, records)
        return error if error is ErrorCode.NONE else group_store_error(error)

    # ------------------------------------------------------------ admin

    def describe_group(self, group_id: str) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, GroupState.DEAD, "", "", ())
        stable = group.is_(GroupState.STABLE)
        protocol = (group.protocol_name or "") if stable else ""
        members = tuple(
            MemberDescription(
                member.member_id,
                member.group_instance_id,
                member.client_id,
                member.client_host,
                member.metadata(protocol) if stable else b"",
                member.assignment if stable else b"",
            )
            for member in group.members.values()
        )
        return GroupDescription(group_id, group.state, group.protocol_type or "", protocol, members)

    def list_groups(self) -> list[GroupOverview]:
        return [
            GroupOverview(group.group_id, group.protocol_type or "", group.state)
            for group in self.groups.values()
        ]

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        """Delete Empty groups with all their offsets; tombstones make it durable."""
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_(GroupState.EMPTY):
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                error = self._write_tombstones(group, list(group.offsets), group_record=True)
                if error is ErrorCode.NONE:
                    self._forget(group)
                    log.info("group %s deleted", group_id)
                results[group_id] = error
        return results

    def _forget(self, group: Group) -> None:
        group.transition_to(GroupState.DEAD, self.wall_clock_ms())
        group.offsets.clear()
        del self.groups[group.group_id]

    def expire_offsets(self) -> int:
        """Remove offsets past ``offsets.retention.minutes``, and groups left with nothing.

        The clock of an Empty consumer group starts when it became Empty; a
        group that never had members (commits only) counts from each commit.
        Groups with members keep their offsets. Returns how many expired.
        """
        wall_ms = self.wall_clock_ms()
        removed = 0
        for group in list(self.groups.values()):
            expired = self._expired_offsets(group, wall_ms)
            remaining = len(group.offsets) - len(expired)
            dead = group.is_(GroupState.EMPTY) and remaining == 0 and not group.pending_members
            if not expired and not dead:
                continue
            error = self._write_tombstones(group, expired, group_record=dead)
            if error is not ErrorCode.NONE:
                log.warning("group %s: offset expiry failed with %s", group.group_id, error.name)
                continue
            for partition in expired:
                del group.offsets[partition]
            removed += len(expired)
            if dead:
                self._forget(group)
        return removed

    def remove_topic_offsets(self, topic: str) -> int:
        """Forget every committed offset of a deleted topic, durably; returns how many.

        A group left Empty with nothing committed is removed by the next expiry
        pass. A group whose tombstones cannot be written keeps its offsets.
        """
        removed = 0
        for group in list(self.groups.values()):
            doomed = [partition for partition in group.offsets if partition.topic == topic]
            if not doomed:
                continue
            error = self._write_tombstones(group, doomed, group_record=False)
            if error is not ErrorCode.NONE:
                log.warning("group %s: offset removal failed with %s", group.group_id, error.name)
                continue
            for partition in doomed:
                del group.offsets[partition]
            removed += len(doomed)
        return removed

    def _expired_offsets(self, group: Group, wall_ms: int) -> list[TopicPartition]:
        retention_ms = self.config.offsets_retention_ms
        if group.protocol_type is None:
            state_since_ms = None
        elif group.is_(GroupState.EMPTY):
            state_since_ms = group.current_state_timestamp_ms
        else:
            return []
        expired = []
        for partition, committed in group.offsets.items():
            if committed.expire_timestamp_ms >= 0:
                due = wall_ms >= committed.expire_timestamp_ms
            else:
                base_ms = (
                    committed.commit_timestamp_ms if state_since_ms is None else state_since_ms
                )
                due = base_ms + retention_ms <= wall_ms
            if due:
                expired.append(partition)
        return expired

    # ------------------------------------------------------------ loading and shutdown

    def load_group(
        self,
        group_id: str,
        record: GroupRecord | None,
        offsets: Mapping[TopicPartition, CommittedOffset],
        now_ms: int,
    ) -> None:
        """Install a group read back from ``__consumer_offsets``.

        Members come back with a fresh session: those whose clients are still
        running heartbeat on as before, the others expire and trigger a
        rebalance, exactly as if the broker had never stopped.
        """
        group = Group(group_id)
        group.offsets.update(offsets)
        if record is not None:
            _restore(group, record)
        self.groups[group_id] = group
        for member in group.all_members():
            self._arm_heartbeat(group, member, now_ms)
        if group.size > self.config.group_size_max:
            self._prepare_rebalance(group, now_ms)

    def shutdown(self) -> None:
        """Answer every held JoinGroup and SyncGroup with NOT_COORDINATOR and drop all state."""
        for group in self.groups.values():
            for member in group.all_members():
                group.invoke_join_callback(member, JoinResult(ErrorCode.NOT_COORDINATOR, ""))
                group.invoke_sync_callback(member, SyncResult(ErrorCode.NOT_COORDINATOR))
        self.groups.clear()
        self._timers.clear()

    def rebalance_timeout_ms(self, group_id: str) -> int:
        group = self.groups.get(group_id)
        return 0 if group is None else group.rebalance_timeout_ms


def _with_leader(result: JoinResult, leader_id: str) -> JoinResult:
    return JoinResult(
        result.error,
        result.member_id,
        result.generation_id,
        result.protocol_type,
        result.protocol_name,
        leader_id,
        result.members,
    )


def _restore(group: Group, record: GroupRecord) -> None:
    group.generation_id = record.generation
    group.protocol_type = record.protocol_type or None
    group.protocol_name = record.protocol
    timestamp_ms = record.current_state_timestamp_ms
    group.current_state_timestamp_ms = timestamp_ms if timestamp_ms >= 0 else None
    protocol = record.protocol or ""
    for stored in record.members:
        member = Member(
            member_id=stored.member_id,
            group_instance_id=stored.group_instance_id,
            client_id=stored.client_id,
            client_host=stored.client_host,
            rebalance_timeout_ms=(
                stored.rebalance_timeout_ms
                if stored.rebalance_timeout_ms > 0
                else stored.session_timeout_ms
            ),
            session_timeout_ms=stored.session_timeout_ms,
            protocol_type=record.protocol_type,
            protocols=((protocol, stored.subscription),),
            assignment=stored.assignment,
        )
        group.add(member, None)
    if record.leader is not None and group.has(record.leader):
        group.leader_id = record.leader
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    if group.members:
        require(record.protocol is not None, f"group {group.group_id} has members but no protocol")
