"""The group coordinator service: the trio shell around ``GroupCoordinatorCore``.

Membership requests go to the core, OffsetCommit and OffsetFetch to its
``offsets``, and DescribeGroups, ListGroups, DeleteGroups, offset expiry
and deleted topics to its ``admin``; all three share the core's groups.

``GroupCoordinator.run`` is a trio task. A node coordinates the groups of
the ``__consumer_offsets`` partitions it leads (all of them, on a broker on its
own): as it comes to lead one (:meth:`GroupCoordinator.leadership_changed`) it
replays the partition into the core, and meanwhile that partition's groups are
answered COORDINATOR_LOAD_IN_PROGRESS, as Kafka does (heartbeats are answered
NONE and SyncGroup REBALANCE_IN_PROGRESS so clients simply carry on); the
groups of a partition it does not lead are NOT_COORDINATOR. Before ``run`` and
after ``close`` every group request gets COORDINATOR_NOT_AVAILABLE. The topic
itself is created by the node's membership: at the first start of a broker on
its own, through the controller at a cluster's first FindCoordinator.

One timer task sleeps until the core's next deadline and then calls
``advance``; every request that may move a deadline earlier wakes it. A
second task expires offsets every ``OFFSETS_RETENTION_CHECK_INTERVAL_S``.
Handlers call the ``async`` methods here. A JoinGroup or SyncGroup the core
holds is awaited through a ``Reply`` with a deadline past the longest time
the core may hold it (the group's rebalance timeout, or the new-member join
timeout, plus the initial rebalance delay); the core always answers first,
the deadline only bounds a bug.

Every method runs on the broker's trio thread, the one owner of all group
state.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Generic, TypeVar

import trio

from eventplatform.log.groups.core import NEW_MEMBER_JOIN_TIMEOUT_MS, GroupCoordinatorCore
from eventplatform.log.groups.group import GroupState, JoinResult, SyncResult
from eventplatform.log.groups.messages import (
    GroupConfig,
    GroupDescription,
    GroupOverview,
    JoinRequest,
    LeaveResult,
    MemberIdentity,
    OffsetCommit,
    SyncRequest,
)
from eventplatform.log.groups.offsets_topic import (
    OffsetsReplay,
    OffsetsTopic,
    Unreplicated,
    wait_replicated,
)
from eventplatform.log.groups.ownership import PartitionOwnership
from eventplatform.log.groups.records import (
    OFFSETS_TOPIC,
    CommittedOffset,
    TopicPartition,
    partition_for,
)
from eventplatform.log.groups.share_coordinator import ShareCoordinator
from eventplatform.log.groups.share_group import ShareGroupSettings
from eventplatform.log.groups.store import offset_store_error
from eventplatform.log.protocol import ErrorCode

if TYPE_CHECKING:
    from eventplatform.log.config import BrokerConfig
    from eventplatform.log.replica.topics import TopicRegistry

log = logging.getLogger("eventplatform.groups")

REPLY_MARGIN_MS = 5_000
"""How much longer than the core's own bound a handler waits for a held answer."""
OFFSETS_RETENTION_CHECK_INTERVAL_S = 600.0

T = TypeVar("T")


class Status(Enum):
    STARTING = "starting"
    ACTIVE = "active"
    CLOSED = "closed"


class Reply(Generic[T]):
    """One held answer: the core delivers it once, one handler awaits it."""

    __slots__ = ("_event", "_value")

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: T | None = None

    def deliver(self, value: T) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    async def wait(self, timeout_s: float) -> T | None:
        """The answer, or None if none came within ``timeout_s``."""
        with trio.move_on_after(timeout_s):
            await self._event.wait()
        return self._value


def group_config(config: BrokerConfig) -> GroupConfig:
    return GroupConfig(
        session_timeout_ms_min=config.group_min_session_timeout_ms,
        session_timeout_ms_max=config.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        group_size_max=config.group_max_size,
        offsets_retention_ms=config.offsets_retention_minutes * 60_000,
    )


class GroupCoordinator:
    """See the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicRegistry,
        clock_ms: Callable[[], int],
    ) -> None:
        self.offsets_topic = OffsetsTopic(
            topics,
            partitions=config.offsets_topic_num_partitions,
            segment_bytes=config.offsets_topic_segment_bytes,
            clock_ms=clock_ms,
        )
        self.core = GroupCoordinatorCore(group_config(config), self.offsets_topic, clock_ms)
        self.shares = ShareCoordinator(self, lambda group_id: ShareGroupSettings())
        self._commit_timeout_s = config.offsets_commit_timeout_ms / 1000
        self.status = Status.STARTING
        self._progress = trio.Event()
        self._timer_changed = trio.Event()
        self._timer_wake_s = math.inf
        self.ownership = PartitionOwnership(self.offsets_topic)
        self._nursery: trio.Nursery | None = None

    # ------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled, loading the groups of every ``__consumer_offsets``
        partition this node leads now, and of each it comes to lead."""
        self.status = Status.ACTIVE
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._run_timers)
                task_status.started()
                nursery.start_soon(self._expire_offsets_periodically)
                nursery.start_soon(self.shares.run_timers)
                self.leadership_changed()
                self._progressed()
        finally:
            self.close()

    async def wait_loaded(self) -> None:
        """Until the coordinator runs and has loaded every partition it leads."""
        while self.status is Status.STARTING or self.ownership.loading:
            await self._progress.wait()

    def _progressed(self) -> None:
        self._progress.set()
        self._progress = trio.Event()

    def close(self) -> None:
        """Stop serving: held requests are answered NOT_COORDINATOR, later ones NOT_AVAILABLE."""
        if self.status is Status.CLOSED:
            return
        self.status = Status.CLOSED
        self.core.shutdown()
        self._progressed()

    # ------------------------------------------------------------ cluster ownership

    def leadership_changed(self) -> None:
        """Load the groups of offsets partitions this broker now leads; drop those of
        partitions it no longer leads (their clients find the new coordinator)."""
        if self._nursery is None or self.status is not Status.ACTIVE:
            return
        self.ownership.changed(self._nursery, OffsetsReplay, self._install, self._unload)

    def _unload(self, index: int) -> None:
        count = len(self.offsets_topic.partitions())
        self.core.unload_groups([g for g in self.core.groups if partition_for(g, count) == index])
        self.shares.unload(index, count)

    def _install(self, index: int, replay: OffsetsReplay) -> None:
        count = len(self.offsets_topic.partitions())
        now_ms = self._now_ms()
        loaded = 0
        for group_id, group in replay.groups():
            if partition_for(group_id, count) == index:
                if group.record is not None or group.offsets or group.pending_offsets:
                    self.core.load_group(
                        group_id, group.record, group.offsets, now_ms, group.pending_offsets
                    )
                self.shares.load(group_id, group.share_states)
                loaded += 1
        self._poke()
        self._progressed()
        epoch = self.ownership.owned[index]
        log.info("coordinating %d groups of %s-%d (epoch %d)", loaded, OFFSETS_TOPIC, index, epoch)

    # ------------------------------------------------------------ timers

    @staticmethod
    def _now_ms() -> int:
        return math.floor(trio.current_time() * 1000)

    async def _run_timers(self) -> None:
        while True:
            deadline_ms = self.core.next_deadline_ms()
            # Half a millisecond late, so the floored clock reads at least the deadline.
            self._timer_wake_s = math.inf if deadline_ms is None else (deadline_ms + 0.5) / 1000
            self._timer_changed = trio.Event()
            with trio.move_on_at(self._timer_wake_s):
                await self._timer_changed.wait()
            if self.status is Status.CLOSED:
                return
            self.core.advance(self._now_ms())

    def _poke(self) -> None:
        """Wake the timer task when the core's next deadline moved earlier."""
        deadline_ms = self.core.next_deadline_ms()
        if deadline_ms is not None and (deadline_ms + 0.5) / 1000 < self._timer_wake_s:
            self._timer_changed.set()

    async def _expire_offsets_periodically(self) -> None:
        while True:
            await trio.sleep(OFFSETS_RETENTION_CHECK_INTERVAL_S)
            if self.status is not Status.ACTIVE:
                continue
            removed = self.core.admin.expire_offsets()
            if removed:
                log.info("expired %d committed offsets", removed)
            self._poke()

    # ------------------------------------------------------------ status

    def _status_error(self, group_id: str | None, *, allow_empty_id: bool) -> ErrorCode:
        """Kafka's ``validateGroupStatus``: this node coordinates the group once it has
        loaded the ``__consumer_offsets`` partition it leads that holds the group."""
        if group_id is None or (not group_id and not allow_empty_id):
            return ErrorCode.INVALID_GROUP_ID
        if self.status is not Status.ACTIVE:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return self.ownership.status(group_id)

    def status_error(self, group_id: str) -> ErrorCode:
        """Whether this node coordinates ``group_id`` now (NONE), or why not."""
        return self._status_error(group_id, allow_empty_id=False)

    @property
    def is_available(self) -> bool:
        """Whether FindCoordinator may name this broker (loading counts: clients retry)."""
        return self.status is Status.ACTIVE

    def _hold_bound_s(self, group_id: str, *, rebalance_timeout_ms: int, join: bool) -> float:
        longest_ms = max(self.core.rebalance_timeout_ms(group_id), rebalance_timeout_ms)
        if join:
            longest_ms = max(longest_ms, NEW_MEMBER_JOIN_TIMEOUT_MS)
            longest_ms += self.core.config.initial_rebalance_delay_ms
        return (longest_ms + REPLY_MARGIN_MS) / 1000

    # ------------------------------------------------------------ membership

    async def join_group(self, request: JoinRequest) -> JoinResult:
        error = self._status_error(request.group_id, allow_empty_id=False)
        if error is not ErrorCode.NONE:
            await trio.lowlevel.checkpoint()
            return JoinResult(error, request.member_id)
        reply: Reply[JoinResult] = Reply()
        self.core.join_group(request, self._now_ms(), reply.deliver)
        self._poke()
        bound_s = self._hold_bound_s(
            request.group_id, rebalance_timeout_ms=request.rebalance_timeout_ms, join=True
        )
        result = await reply.wait(bound_s)
        if result is None:
            log.error("JoinGroup of group %s held past %.0f s", request.group_id, bound_s)
            return JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, request.member_id)
        return result

    async def sync_group(self, request: SyncRequest) -> SyncResult:
        error = self._status_error(request.group_id, allow_empty_id=False)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance in flight is lost with the restart; rejoining starts a new one.
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not ErrorCode.NONE:
            await trio.lowlevel.checkpoint()
            return SyncResult(error)
        reply: Reply[SyncResult] = Reply()
        self.core.sync_group(request, self._now_ms(), reply.deliver)
        self._poke()
        bound_s = self._hold_bound_s(request.group_id, rebalance_timeout_ms=0, join=False)
        result = await reply.wait(bound_s)
        if result is None:
            log.error("SyncGroup of group %s held past %.0f s", request.group_id, bound_s)
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        return result

    async def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        await trio.lowlevel.checkpoint()
        error = self._status_error(group_id, allow_empty_id=False)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE
        if error is not ErrorCode.NONE:
            return error
        error = self.core.heartbeat(
            group_id, member_id, group_instance_id, generation_id, self._now_ms()
        )
        self._poke()
        return error

    async def leave_group(self, group_id: str, members: Sequence[MemberIdentity]) -> LeaveResult:
        await trio.lowlevel.checkpoint()
        error = self._status_error(group_id, allow_empty_id=False)
        if error is not ErrorCode.NONE:
            return LeaveResult(error)
        result = self.core.leave_group(group_id, members, self._now_ms())
        self._poke()
        return result

    # ------------------------------------------------------------ offsets

    async def commit_offsets(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommit],
    ) -> dict[TopicPartition, int]:
        await trio.lowlevel.checkpoint()
        error = self._status_error(group_id, allow_empty_id=True)
        if error is not ErrorCode.NONE:
            return dict.fromkeys(offsets, error)
        with self.offsets_topic.receipts() as appended:
            results = self.core.offsets.commit_offsets(
                group_id, member_id, group_instance_id, generation_id, offsets, self._now_ms()
            )
        self._poke()
        error = await self.wait_replicated(appended)
        if error is ErrorCode.NONE:
            return results
        log.warning("group %s: offset commit not replicated: %s", group_id, error.name)
        failed = offset_store_error(error)
        return {p: failed if code == ErrorCode.NONE else code for p, code in results.items()}

    async def wait_replicated(self, appended: Sequence[Unreplicated]) -> ErrorCode:
        """Until the ISR holds every append, within ``offsets.commit.timeout.ms``."""
        return await wait_replicated(appended, self._commit_timeout_s)

    async def commit_transactional_offsets(
        self,
        group_id: str,
        producer: tuple[int, int],
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommit],
    ) -> dict[TopicPartition, int]:
        """TxnOffsetCommit: kept pending until the transaction's marker, once the ISR
        holds the records (see ``GroupOffsets.commit_transactional``)."""
        await trio.lowlevel.checkpoint()
        error = self._status_error(group_id, allow_empty_id=False)
        if error is not ErrorCode.NONE:
            return dict.fromkeys(offsets, error)
        with self.offsets_topic.receipts() as appended:
            results = self.core.offsets.commit_transactional(
                group_id, producer, member_id, group_instance_id, generation_id, offsets
            )
        error = await self.wait_replicated(appended)
        if error is ErrorCode.NONE:
            return results
        failed = offset_store_error(error)
        return {p: failed if code == ErrorCode.NONE else code for p, code in results.items()}

    def unstable_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> set[TopicPartition]:
        """The partitions among ``partitions`` whose offsets an unfinished transaction
        committed (KIP-447's unstable offsets)."""
        return {p for p in partitions if self.core.offsets.has_pending(group_id, [p])}

    def complete_transaction(self, index: int, producer_id: int, commit: bool) -> None:
        """A marker of ``producer_id`` was written on ``__consumer_offsets`` partition
        ``index``: its pending offsets in that partition's groups commit or go."""
        count = len(self.offsets_topic.partitions())
        if not count:
            return
        groups = [g for g in self.core.groups if partition_for(g, count) == index]
        self.core.offsets.complete_transaction(groups, producer_id, commit)

    async def fetch_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, CommittedOffset | None]]:
        await trio.lowlevel.checkpoint()
        error = self._status_error(group_id, allow_empty_id=True)
        if error is not ErrorCode.NONE:
            return error, {}
        return ErrorCode.NONE, self.core.offsets.fetch_offsets(group_id, partitions)

    def topic_deleted(self, topic: str) -> None:
        """Drop the committed offsets of a deleted topic (Kafka's ``handleDeletedPartitions``).

        Synchronous, for the DeleteTopics handler to call after the topic is gone.
        """
        if self.status is not Status.ACTIVE:
            return
        removed = self.core.admin.remove_topic_offsets(topic)
        if removed:
            log.info("removed %d committed offsets of deleted topic %s", removed, topic)

    # ------------------------------------------------------------ admin

    async def describe_groups(
        self, group_ids: Sequence[str]
    ) -> list[tuple[ErrorCode, GroupDescription]]:
        await trio.lowlevel.checkpoint()
        described: list[tuple[ErrorCode, GroupDescription]] = []
        for group_id in group_ids:
            error = self._status_error(group_id, allow_empty_id=True)
            if error is not ErrorCode.NONE:
                described.append((error, GroupDescription(group_id, GroupState.DEAD, "", "", ())))
                continue
            described.append((ErrorCode.NONE, self.core.admin.describe_group(group_id)))
        return described

    async def list_groups(
        self, states: Sequence[str] = (), types: Sequence[str] = ()
    ) -> tuple[ErrorCode, list[GroupOverview]]:
        await trio.lowlevel.checkpoint()
        if self.status is not Status.ACTIVE:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        groups = self.core.admin.list_groups(states, types)
        groups += self.shares.list_groups(states, types)
        if self.ownership.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, groups
        return ErrorCode.NONE, groups

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: the group error, and each partition's (see ``GroupAdmin``)."""
        await trio.lowlevel.checkpoint()
        error = self._status_error(group_id, allow_empty_id=False)
        if error is not ErrorCode.NONE:
            return error, {}
        result = self.core.admin.delete_offsets(group_id, partitions)
        self._poke()
        return result

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        await trio.lowlevel.checkpoint()
        results: dict[str, ErrorCode] = {}
        deletable = []
        for group_id in group_ids:
            error = self._status_error(group_id, allow_empty_id=True)
            if error is ErrorCode.NONE and self.shares.is_share_group(group_id):
                results[group_id] = await self.shares.delete(group_id)
            elif error is ErrorCode.NONE:
                deletable.append(group_id)
            else:
                results[group_id] = error
        results.update(self.core.admin.delete_groups(deletable))
        self._poke()
        return {group_id: results[group_id] for group_id in group_ids}
