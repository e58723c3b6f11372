"""The classic group protocol as a sans-I/O state machine: Kafka's ``GroupCoordinator``.

``GroupCoordinatorCore`` owns every group of the broker and decides every
answer of JoinGroup, SyncGroup, Heartbeat and LeaveGroup, with Kafka's
error codes: who is a member, when a rebalance starts and completes, who
leads, what happens when a session or a rebalance times out. It reads no
clock and waits for nothing:

- Each call takes ``now_ms``, a monotonic time in milliseconds, and every
  timer is a deadline on that scale (session expiry, the new-member join
  timeout, the rebalance's join and sync deadlines, MEMBER_ID_REQUIRED
  members that never come back). ``next_deadline_ms`` says when the next
  one is due and ``advance(now_ms)`` fires every due one (the heap is
  :mod:`eventplatform.log.groups.timers`). The shell sleeps in between.
- JoinGroup and SyncGroup answers may be held: they are delivered through
  the callback passed in, now or by a later call (another member's join,
  the leader's SyncGroup, a timer).
- Group metadata is written to ``__consumer_offsets`` by its ``store``
  (:mod:`eventplatform.log.groups.store`) through the ``RecordSink`` port,
  which appends synchronously and reports a Kafka error code. Wall-clock
  timestamps for the records and the states come from ``wall_clock_ms``.

The core shares its registry of groups with ``offsets``
(:mod:`eventplatform.log.groups.offsets`: OffsetCommit and OffsetFetch,
which asks the core whether a committer is a member) and ``admin``
(:mod:`eventplatform.log.groups.admin`: DescribeGroups, ListGroups,
DeleteGroups, offset expiry). The shell,
:mod:`eventplatform.log.groups.coordinator`, calls all three.

Concurrency: exactly one caller (the coordinator's trio thread) calls every
method; each call runs to completion, so a group's state is never seen half
changed. Callbacks must not call back into the core.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence

from eventplatform.log.groups.admin import GroupAdmin
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
from eventplatform.log.groups.messages import (
    GroupConfig,
    JoinRequest,
    LeaveResult,
    MemberIdentity,
    RecordSink,
    SyncRequest,
)
from eventplatform.log.groups.offsets import GroupOffsets
from eventplatform.log.groups.records import CommittedOffset, GroupRecord, TopicPartition
from eventplatform.log.groups.store import GroupStore, restore_group
from eventplatform.log.groups.timers import GroupTimers
from eventplatform.log.invariants import require
from eventplatform.log.protocol import ErrorCode

log = logging.getLogger("eventplatform.groups")

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class GroupCoordinatorCore:
    """See the module docstring."""

    def __init__(
        self, config: GroupConfig, sink: RecordSink, wall_clock_ms: Callable[[], int]
    ) -> None:
        self.config = config
        self.wall_clock_ms = wall_clock_ms
        self.groups: dict[str, Group] = {}
        self.store = GroupStore(config, sink, wall_clock_ms)
        self.offsets = GroupOffsets(self.groups, self.store, self)
        self.admin = GroupAdmin(self.groups, self.store)
        self._timers = GroupTimers(self.groups, self._fire_timers)

    # ------------------------------------------------------------ timers

    def next_deadline_ms(self) -> int | None:
        """The earliest armed deadline (possibly one that has since moved later)."""
        return self._timers.next_deadline_ms()

    def advance(self, now_ms: int) -> None:
        """Fire every timer due at ``now_ms``."""
        self._timers.advance(now_ms)

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

    def arm_heartbeat(
        self, group: Group, member: Member, now_ms: int, timeout_ms: int | None = None
    ) -> None:
        """Kafka's ``completeAndScheduleNextHeartbeatExpiration``."""
        member.heartbeat_deadline_ms = now_ms + (
            member.session_timeout_ms if timeout_ms is None else timeout_ms
        )
        self._timers.schedule(group)

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
            self._timers.schedule(group)
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
        error = self.validate_member(group, member_id, request.group_instance_id)
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

    def validate_member(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
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
        self.arm_heartbeat(group, member, now_ms, NEW_MEMBER_JOIN_TIMEOUT_MS)
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
        self.arm_heartbeat(group, member, now_ms)
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
        error = self.store.store_group(group, assignment)
        if error is ErrorCode.NONE:
            result = self._current_generation(group, member.member_id, with_members=False)
            group.invoke_join_callback(member, dataclasses.replace(result, leader_id=leader_id))
            return
        member.join_callback = None
        member.protocols = old_protocols
        group.replace_static_member(member.group_instance_id, member.member_id, old_member_id)
        self.arm_heartbeat(group, member, now_ms)
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
        self._timers.schedule(group)
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
            self._timers.schedule(group)
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
            self._timers.schedule(group)
            return
        group.init_next_generation(self.wall_clock_ms())
        if group.is_(GroupState.EMPTY):
            log.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            self.store.store_group(group, {})
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
            self.arm_heartbeat(group, member, now_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms
        self._timers.schedule(group)

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
            self.arm_heartbeat(group, member, now_ms)

    def _validate_sync(self, group: Group, request: SyncRequest) -> ErrorCode:
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self.validate_member(group, request.member_id, request.group_instance_id)
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
        error = self.store.store_group(group, assignment)
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
                self.arm_heartbeat(group, member, now_ms)

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
        error = self.validate_member(group, member_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.arm_heartbeat(group, group.members[member_id], now_ms)
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
            error = self.validate_member(group, member_id, identity.group_instance_id)
            if error is not ErrorCode.NONE:
                return error
        log.info("member %s leaves group %s", member_id, group.group_id)
        self._remove_member_and_update_group(group, group.members[member_id], now_ms)
        return ErrorCode.NONE

    # ------------------------------------------------------------ loading and shutdown

    def load_group(
        self,
        group_id: str,
        record: GroupRecord | None,
        offsets: Mapping[TopicPartition, CommittedOffset],
        now_ms: int,
        pending: Mapping[int, Mapping[TopicPartition, CommittedOffset]] | None = None,
    ) -> None:
        """Install a group read back from ``__consumer_offsets``.

        Members come back with a fresh session: those whose clients are still
        running heartbeat on as before, the others expire and trigger a
        rebalance, exactly as if the broker had never stopped.
        """
        group = self.groups[group_id] = restore_group(group_id, record, offsets, pending)
        for member in group.all_members():
            self.arm_heartbeat(group, member, now_ms)
        if group.size > self.config.group_size_max:
            self._prepare_rebalance(group, now_ms)

    def shutdown(self) -> None:
        """Answer every held JoinGroup and SyncGroup with NOT_COORDINATOR and drop all state."""
        self.unload_groups(list(self.groups))
        self._timers.clear()

    def unload_groups(self, group_ids: Sequence[str]) -> None:
        """Drop these groups (another broker coordinates them now); their held JoinGroup
        and SyncGroup requests are answered NOT_COORDINATOR, and their timers lapse."""
        for group_id in group_ids:
            group = self.groups.pop(group_id, None)
            if group is None:
                continue
            for member in group.all_members():
                group.invoke_join_callback(member, JoinResult(ErrorCode.NOT_COORDINATOR, ""))
                group.invoke_sync_callback(member, SyncResult(ErrorCode.NOT_COORDINATOR))

    def rebalance_timeout_ms(self, group_id: str) -> int:
        group = self.groups.get(group_id)
        return 0 if group is None else group.rebalance_timeout_ms
