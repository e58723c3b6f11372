"""Describing, listing and removing groups and their offsets, outside the membership protocol.

``GroupAdmin`` answers DescribeGroups, ListGroups, DeleteGroups and
OffsetDelete, expires
committed offsets past retention, and drops the offsets of deleted topics
(Kafka's ``handleDeletedPartitions``). None of it joins, fences or times a
member: it reads the groups, and removes offsets and whole groups once the
store (:mod:`eventplatform.log.groups.store`) has written their tombstones.

It shares the registry of groups with ``GroupCoordinatorCore``, which
creates it and exposes it as ``core.admin``; the coordinator shell calls it.
A group removed here may keep an entry in the timer heap
(:mod:`eventplatform.log.groups.timers`), which is skipped when it comes up.

Concurrency: called only from the coordinator's trio thread, never while a
core call is running, so a group is never seen half changed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from eventplatform.log.groups.group import Group, GroupState
from eventplatform.log.groups.messages import GroupDescription, GroupOverview, MemberDescription
from eventplatform.log.groups.records import TopicPartition
from eventplatform.log.groups.store import GroupStore
from eventplatform.log.groups.subscriptions import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from eventplatform.log.protocol import ErrorCode

log = logging.getLogger("eventplatform.groups")

CLASSIC_GROUP_TYPE = "classic"
"""The type of every group this coordinator runs, as ListGroups v5 names it."""


class GroupAdmin:
    """See the module docstring."""

    def __init__(self, groups: dict[str, Group], store: GroupStore) -> None:
        self.groups = groups
        self.store = store

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

    def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> list[GroupOverview]:
        """Every group, or those whose state and type are among ``states`` and ``types``
        (ListGroups v4/v5). Names match case-insensitively, as Kafka's; an empty filter
        takes every group. Every group here is a classic one (the JoinGroup protocol)."""
        wanted_states = {state.lower() for state in states}
        wanted_types = {kind.lower() for kind in types}
        if wanted_types and CLASSIC_GROUP_TYPE not in wanted_types:
            return []
        return [
            GroupOverview(group.group_id, group.protocol_type or "", group.state)
            for group in self.groups.values()
            if not wanted_states or str(group.state).lower() in wanted_states
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
                error = self.store.write_tombstones(group, list(group.offsets), group_record=True)
                if error is ErrorCode.NONE:
                    self._forget(group)
                    log.info("group %s deleted", group_id)
                results[group_id] = error
        return results

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """Delete a group's committed offsets of topics no member subscribes to (KIP-496).

        The group error is GROUP_ID_NOT_FOUND for an unknown group, and
        NON_EMPTY_GROUP for an active group whose subscriptions cannot be known
        (its protocol type is not ``consumer``). Otherwise each partition of a
        subscribed topic gets GROUP_SUBSCRIBED_TO_TOPIC and keeps its offset;
        the others' offsets are deleted through tombstones (a partition with
        no offset committed is answered NONE, as in Kafka). A failed tombstone
        write answers its error for those partitions and deletes nothing.
        """
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if not group.is_(GroupState.EMPTY) and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.NON_EMPTY_GROUP, {}
        subscribed = subscribed_topics(group)
        errors: dict[TopicPartition, ErrorCode] = {}
        doomed: list[TopicPartition] = []
        for partition in partitions:
            if subscribed is None or partition.topic in subscribed:
                errors[partition] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                errors[partition] = ErrorCode.NONE
                if partition in group.offsets:
                    doomed.append(partition)
        if doomed:
            error = self.store.write_tombstones(group, doomed, group_record=False)
            if error is not ErrorCode.NONE:
                errors.update(dict.fromkeys(doomed, error))
                return ErrorCode.NONE, errors
            for partition in doomed:
                del group.offsets[partition]
            log.info("group %s: %d committed offsets deleted", group_id, len(doomed))
        return ErrorCode.NONE, errors

    def _forget(self, group: Group) -> None:
        group.transition_to(GroupState.DEAD, self.store.wall_clock_ms())
        group.offsets.clear()
        del self.groups[group.group_id]

    def expire_offsets(self) -> int:
        """Remove offsets past ``offsets.retention.minutes``, and groups left with nothing.

        Which offsets are due is the store's ``expired_offsets``. An Empty
        group with no offset left and no pending member is deleted with them.
        Returns how many offsets expired.
        """
        wall_ms = self.store.wall_clock_ms()
        removed = 0
        for group in list(self.groups.values()):
            expired = self.store.expired_offsets(group, wall_ms)
            remaining = len(group.offsets) - len(expired)
            dead = group.is_(GroupState.EMPTY) and remaining == 0 and not group.pending_members
            if not expired and not dead:
                continue
            if not self._drop_offsets(group, expired, group_record=dead, action="expiry"):
                continue
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
            if self._drop_offsets(group, doomed, group_record=False, action="removal"):
                removed += len(doomed)
        return removed

    def _drop_offsets(
        self, group: Group, partitions: list[TopicPartition], *, group_record: bool, action: str
    ) -> bool:
        """Write the tombstones, then forget the offsets; False, logged, if the write failed."""
        error = self.store.write_tombstones(group, partitions, group_record=group_record)
        if error is not ErrorCode.NONE:
            log.warning("group %s: offset %s failed with %s", group.group_id, action, error.name)
            return False
        for partition in partitions:
            del group.offsets[partition]
        return True
