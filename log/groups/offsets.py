"""OffsetCommit and OffsetFetch: committed offsets, checked against the group's membership.

``GroupOffsets`` decides who may commit: a current member of the group's
generation, or, in an Empty group, a client that names no member and no
generation (commits only, as admin tools and standalone consumers make
them). While the group waits for its leader's assignment a commit is
refused with REBALANCE_IN_PROGRESS; a member's accepted commit counts as a
heartbeat. The
accepted offsets are written and kept by the store
(:mod:`eventplatform.log.groups.store`). OffsetFetch reads what the group
has committed.

Whether a member is current and when its session ends belong to the
membership protocol: ``GroupCoordinatorCore`` answers through the
``Membership`` port, creates this object with its registry of groups, and
exposes it as ``core.offsets`` to the coordinator shell. A commit to a
group nobody has joined creates that group; a group left unused is removed.

Concurrency: called only from the coordinator's trio thread, never while a
core call is running, so a group is never seen half changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from eventplatform.log.groups.group import Group, GroupState, Member
from eventplatform.log.groups.messages import OffsetCommit
from eventplatform.log.groups.records import CommittedOffset, TopicPartition
from eventplatform.log.groups.store import GroupStore
from eventplatform.log.protocol import ErrorCode


class Membership(Protocol):
    """What the offset path asks of the membership protocol."""

    def validate_member(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
        """UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID unless ``member_id`` is a current member."""
        ...

    def arm_heartbeat(self, group: Group, member: Member, now_ms: int) -> None:
        """The member was heard from at ``now_ms``: its session starts over."""
        ...


class GroupOffsets:
    """See the module docstring."""

    def __init__(self, groups: dict[str, Group], store: GroupStore, membership: Membership) -> None:
        self.groups = groups
        self.store = store
        self.membership = membership

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
                self.membership.arm_heartbeat(group, group.members[member_id], now_ms)
            results = self.store.store_offsets(group, offsets)
        if group.is_unused():
            del self.groups[group_id]
        return results

    def commit_transactional(
        self,
        group_id: str,
        producer: tuple[int, int],
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommit],
    ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit: offsets of a transaction, pending until its marker. A
        committer that names a member and generation (v3+) must be a current member,
        as for OffsetCommit; one that names none may commit in any state."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        error = ErrorCode.NONE
        if generation_id >= 0 or member_id:
            error = self._validate_commit(group, member_id, group_instance_id, generation_id)
        results: dict[TopicPartition, int] = (
            dict.fromkeys(offsets, error)
            if error is not ErrorCode.NONE
            else self.store.store_offsets(group, offsets, producer)
        )
        if group.is_unused():
            del self.groups[group_id]
        return results

    def complete_transaction(
        self, group_ids: Sequence[str], producer_id: int, commit: bool
    ) -> None:
        """A transaction's marker reached these groups' partition: its offsets become
        committed, or are dropped."""
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                continue
            waiting = group.pending_offsets.pop(producer_id, None)
            if waiting and commit:
                group.offsets.update(waiting)
            if group.is_unused():
                del self.groups[group_id]

    def has_pending(self, group_id: str, partitions: Sequence[TopicPartition] | None) -> bool:
        """Whether an unfinished transaction holds offsets of these partitions (all: None)."""
        group = self.groups.get(group_id)
        if group is None:
            return False
        wanted = None if partitions is None else set(partitions)
        return any(
            wanted is None or wanted & waiting.keys() for waiting in group.pending_offsets.values()
        )

    def _validate_commit(
        self, group: Group, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id >= 0 or member_id != "" or instance_id is not None:
            error = self.membership.validate_member(group, member_id, instance_id)
            if error is not ErrorCode.NONE:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
            return ErrorCode.NONE
        if not group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """Committed offsets of the group; all of them when ``partitions`` is None."""
        group = self.groups.get(group_id)
        committed = {} if group is None else group.offsets
        if partitions is None:
            return dict(sorted(committed.items()))
        return {partition: committed.get(partition) for partition in partitions}
