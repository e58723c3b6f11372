"""The share-group side of the group coordinator: membership and share-partition state.

A share group is coordinated where a classic group of the same id would be:
by the leader of its ``__consumer_offsets`` partition, so FindCoordinator,
the loading of a partition and the hand-over to a new leader are the group
coordinator's own (:mod:`.coordinator`). This shell adds:

- **membership**: ShareGroupHeartbeat and ShareGroupDescribe, answered by the
  :class:`~.share_group.ShareGroups` core; sessions that run out are expired
  by a timer task. Membership is kept in memory: a new coordinator answers
  UNKNOWN_MEMBER_ID, and the members join again (their records stay theirs
  until their locks run out).
- **the share coordinator's store**: every share-partition's state (what the
  group has settled of one partition, written by that partition's leader
  through WriteShareGroupState and read back through ReadShareGroupState) is
  a record in the group's ``__consumer_offsets`` partition (key version 32000,
  see :mod:`.records`), replicated as offset commits are before the write is
  answered, and loaded with the group's other records.

Group ids that name a classic group are refused here (GROUP_ID_NOT_FOUND, as
Kafka answers a heartbeat of the wrong group type), and a share group's id
is refused to JoinGroup by the classic core's caller.

Every method runs on the broker's trio thread.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import trio

from eventplatform.log.groups.messages import GroupOverview
from eventplatform.log.groups.records import (
    ShareStateKey,
    encode_share_state_key,
    encode_share_state_value,
    partition_for,
)
from eventplatform.log.groups.share_group import (
    ShareGroup,
    ShareGroups,
    ShareGroupSettings,
    ShareHeartbeat,
    ShareHeartbeatResult,
)
from eventplatform.log.groups.store import offset_store_error
from eventplatform.log.protocol import ErrorCode

if TYPE_CHECKING:
    from eventplatform.log.groups.coordinator import GroupCoordinator

log = logging.getLogger("eventplatform.groups")

SHARE_GROUP_TYPE = "share"
SHARE_TIMER_INTERVAL_S = 1.0
"""How often sessions that ran out are looked for."""


class ShareCoordinator:
    """See the module docstring."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        settings: Callable[[str], ShareGroupSettings],
    ) -> None:
        self.coordinator = coordinator
        self.settings = settings
        self.core = ShareGroups()
        self.states: dict[ShareStateKey, dict[str, Any]] = {}
        self.partition_counts: Callable[[], Mapping[str, int]] = dict

    # ------------------------------------------------------------ loading

    def load(self, group_id: str, states: Mapping[ShareStateKey, dict[str, Any]]) -> None:
        """Take in a group's kept share-partition states; a group that has some is a
        share group (Empty until members join)."""
        if states:
            self.states.update(states)
            self.core.groups.setdefault(group_id, ShareGroup(group_id))

    def unload(self, index: int, partitions: int) -> None:
        """Forget the groups of ``__consumer_offsets`` partition ``index``."""
        for key in [k for k in self.states if partition_for(k.group_id, partitions) == index]:
            del self.states[key]
        for group_id in [g for g in self.core.groups if partition_for(g, partitions) == index]:
            del self.core.groups[group_id]

    async def run_timers(self) -> None:
        while True:
            await trio.sleep(SHARE_TIMER_INTERVAL_S)
            for group_id, member_id in self.core.advance(_now_ms(), self.partition_counts()):
                log.info("share group %s: member %s's session ran out", group_id, member_id)

    # ------------------------------------------------------------ membership

    def _status(self, group_id: str) -> ErrorCode:
        return self.coordinator.status_error(group_id)

    def is_share_group(self, group_id: str) -> bool:
        return group_id in self.core.groups

    async def heartbeat(self, request: ShareHeartbeat) -> ShareHeartbeatResult:
        await trio.lowlevel.checkpoint()
        error = self._status(request.group_id)
        if error is not ErrorCode.NONE:
            return ShareHeartbeatResult(error)
        if request.group_id in self.coordinator.core.groups:
            return ShareHeartbeatResult(
                ErrorCode.GROUP_ID_NOT_FOUND, f"group {request.group_id} is not a share group"
            )
        return self.core.heartbeat(
            request, self.partition_counts(), self.settings(request.group_id), _now_ms()
        )

    async def describe(self, group_id: str) -> tuple[ErrorCode, ShareGroup | None]:
        await trio.lowlevel.checkpoint()
        error = self._status(group_id)
        if error is not ErrorCode.NONE:
            return error, None
        group = self.core.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, None
        return ErrorCode.NONE, group

    def list_groups(self, states: Sequence[str], types: Sequence[str]) -> list[GroupOverview]:
        """Share groups for ListGroups, filtered as classic ones are (case-insensitively)."""
        wanted_states = {state.lower() for state in states}
        if types and SHARE_GROUP_TYPE not in {kind.lower() for kind in types}:
            return []
        return [
            GroupOverview(group.group_id, SHARE_GROUP_TYPE, group.state, SHARE_GROUP_TYPE)
            for group in self.core.groups.values()
            if not wanted_states or group.state.lower() in wanted_states
        ]

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: an empty one goes with every share-partition
        state kept for it (tombstones, replicated before the answer)."""
        group = self.core.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        keys = [key for key in self.states if key.group_id == group_id]
        if not keys:
            return self.core.delete(group_id)
        topic = self.coordinator.offsets_topic
        with topic.receipts() as appended:
            error = topic.append(group_id, [(encode_share_state_key(k), None) for k in keys])
        if error is ErrorCode.NONE:
            error = await self.coordinator.wait_replicated(appended)
        if error is not ErrorCode.NONE:
            return offset_store_error(error)
        for key in keys:
            self.states.pop(key, None)
        return self.core.delete(group_id)

    # ------------------------------------------------------------ share-partition state

    async def read_state(self, key: ShareStateKey) -> tuple[ErrorCode, dict[str, Any] | None]:
        """The state last written for ``key`` (None: never written)."""
        await trio.lowlevel.checkpoint()
        error = self._status(key.group_id)
        if error is not ErrorCode.NONE:
            return error, None
        return ErrorCode.NONE, self.states.get(key)

    async def write_state(self, key: ShareStateKey, value: dict[str, Any]) -> ErrorCode:
        """Keep ``value`` (state_epoch, start_offset, state_batches) for ``key``, once the
        ISR of the group's partition holds it. A write of an older state epoch than the
        one kept is FENCED_STATE_EPOCH."""
        await trio.lowlevel.checkpoint()
        error = self._status(key.group_id)
        if error is not ErrorCode.NONE:
            return error
        kept = self.states.get(key)
        if kept is not None and value["state_epoch"] < kept["state_epoch"]:
            return ErrorCode.FENCED_STATE_EPOCH
        record = (encode_share_state_key(key), encode_share_state_value(value))
        topic = self.coordinator.offsets_topic
        with topic.receipts() as appended:
            error = topic.append(key.group_id, [record])
        if error is ErrorCode.NONE:
            error = await self.coordinator.wait_replicated(appended)
        if error is not ErrorCode.NONE:
            log.warning("share state of %s not kept: %s", key.group_id, error.name)
            return offset_store_error(error)
        self.states[key] = value
        return ErrorCode.NONE


def _now_ms() -> int:
    return math.floor(trio.current_time() * 1000)
