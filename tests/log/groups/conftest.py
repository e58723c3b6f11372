"""Fixtures for the group coordinator tests: a real coordinator on a real data directory.

``node`` runs a ``GroupCoordinator`` over a ``TopicRegistry`` in a temporary
directory, exactly as the broker does, and can stop it cleanly or crash it
(every log dropped as a killed process would leave it) and start it again
on the same files. ``client`` speaks to the running coordinator the way a
consumer would: JoinGroup (retrying once on MEMBER_ID_REQUIRED), SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch. Time is trio's virtual
clock (the tests request ``autojump_clock``), and the wall clock the records
carry follows it.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from crash_simulation import crash

from eventplatform.log.config import BrokerConfig
from eventplatform.log.groups.coordinator import GroupCoordinator
from eventplatform.log.groups.group import JoinResult, SyncResult
from eventplatform.log.groups.messages import (
    JoinRequest,
    LeaveResult,
    MemberIdentity,
    OffsetCommit,
    SyncRequest,
)
from eventplatform.log.groups.records import CommittedOffset, TopicPartition
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.topics import TopicRegistry
from eventplatform.log.storage import LogConfig

WALL_EPOCH_MS = 1_700_000_000_000
SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 30_000
RANGE = (("range", b"range-subscription"),)


def wall_clock_ms() -> int:
    """Wall-clock milliseconds that advance with trio's (virtual) clock."""
    return WALL_EPOCH_MS + math.floor(trio.current_time() * 1000)


@pytest.fixture
def broker_config(tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(
        data_dir=tmp_path / "data",
        group_min_session_timeout_ms=1_000,
        group_max_session_timeout_ms=120_000,
        group_initial_rebalance_delay_ms=0,
        offsets_topic_num_partitions=4,
        offsets_retention_minutes=60,
    )


class Node:
    """A coordinator and its topic registry, started, stopped and crashed on demand."""

    def __init__(self, config: BrokerConfig, nursery: trio.Nursery) -> None:
        self.config = config
        self.nursery = nursery
        self.topics: TopicRegistry | None = None
        self.coordinator: GroupCoordinator | None = None
        self._scope: trio.CancelScope | None = None
        self._stopped: trio.Event | None = None

    async def start(
        self, config: BrokerConfig | None = None, *, wait_loaded: bool = True
    ) -> GroupCoordinator:
        """Open the data directory and start the coordinator; by default, until it has loaded."""
        self.config = config or self.config
        self.topics = TopicRegistry.open(self.config.data_dir, LogConfig(), wall_clock_ms)
        self.coordinator = GroupCoordinator(self.config, self.topics, wall_clock_ms)
        self.coordinator.offsets_topic.ensure_created()  # as a broker on its own does
        await self.nursery.start(self._run, self.coordinator)
        if wait_loaded:
            with trio.fail_after(10):
                await self.coordinator.wait_loaded()
        return self.coordinator

    async def _run(
        self, coordinator: GroupCoordinator, *, task_status: trio.TaskStatus[None]
    ) -> None:
        self._stopped = trio.Event()
        try:
            with trio.CancelScope() as self._scope:
                await coordinator.run(task_status=task_status)
        finally:
            self._stopped.set()

    async def _cancel(self) -> None:
        assert self._scope is not None and self._stopped is not None
        self._scope.cancel()
        with trio.fail_after(10):
            await self._stopped.wait()

    async def stop(self) -> None:
        """A clean shutdown: the coordinator stops, then every log closes."""
        await self._cancel()
        assert self.topics is not None
        self.topics.close()
        self.topics = None

    async def crash(self) -> None:
        """As after kill -9: no close, no flush, no checkpoint of any log."""
        await self._cancel()
        assert self.topics is not None
        for partition in self.topics.partitions():
            crash(partition.log)
        self.topics = None

    async def restart(self, *, crashed: bool) -> GroupCoordinator:
        await (self.crash() if crashed else self.stop())
        return await self.start()


@pytest.fixture
async def node(broker_config: BrokerConfig, nursery: trio.Nursery) -> AsyncIterator[Node]:
    started = Node(broker_config, nursery)
    yield started
    if started.topics is not None:
        await started.stop()


@dataclass
class Client:
    """Requests as a consumer sends them; each call goes to ``node``'s current coordinator."""

    node: Node
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    rebalance_timeout_ms: int = REBALANCE_TIMEOUT_MS

    @property
    def coordinator(self) -> GroupCoordinator:
        assert self.node.coordinator is not None
        return self.node.coordinator

    async def join_once(
        self,
        group_id: str = "group",
        member_id: str = "",
        *,
        protocols: tuple[tuple[str, bytes], ...] = RANGE,
        instance_id: str | None = None,
        client_id: str = "client",
        session_timeout_ms: int = SESSION_TIMEOUT_MS,
        rebalance_timeout_ms: int = REBALANCE_TIMEOUT_MS,
        protocol_type: str = "consumer",
        require_known_member_id: bool = True,
    ) -> JoinResult:
        request = JoinRequest(
            group_id=group_id,
            member_id=member_id,
            group_instance_id=instance_id,
            client_id=client_id,
            client_host="/127.0.0.1",
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            require_known_member_id=require_known_member_id,
        )
        return await self.coordinator.join_group(request)

    async def join(
        self, group_id: str = "group", member_id: str = "", **options: Any
    ) -> JoinResult:
        """JoinGroup v4+ as clients do it: a MEMBER_ID_REQUIRED answer is retried with the id."""
        result = await self.join_once(group_id, member_id, **options)
        if result.error is ErrorCode.MEMBER_ID_REQUIRED:
            result = await self.join_once(group_id, result.member_id, **options)
        return result

    async def sync(
        self,
        joined: JoinResult,
        group_id: str = "group",
        assignments: Mapping[str, bytes] | None = None,
        *,
        instance_id: str | None = None,
        generation_id: int | None = None,
    ) -> SyncResult:
        request = SyncRequest(
            group_id=group_id,
            generation_id=joined.generation_id if generation_id is None else generation_id,
            member_id=joined.member_id,
            group_instance_id=instance_id,
            protocol_type=None,
            protocol_name=None,
            assignments=dict(assignments or {}),
        )
        return await self.coordinator.sync_group(request)

    async def heartbeat(
        self,
        joined: JoinResult,
        group_id: str = "group",
        *,
        instance_id: str | None = None,
        generation_id: int | None = None,
    ) -> ErrorCode:
        generation = joined.generation_id if generation_id is None else generation_id
        return await self.coordinator.heartbeat(group_id, joined.member_id, instance_id, generation)

    async def leave(self, group_id: str, *members: MemberIdentity) -> LeaveResult:
        return await self.coordinator.leave_group(group_id, list(members))

    async def commit(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int],
        *,
        member_id: str = "",
        generation_id: int = -1,
        instance_id: str | None = None,
        metadata: str | None = "",
    ) -> dict[TopicPartition, int]:
        return await self.coordinator.commit_offsets(
            group_id,
            member_id=member_id,
            group_instance_id=instance_id,
            generation_id=generation_id,
            offsets={
                partition: OffsetCommit(offset, -1, metadata)
                for partition, offset in offsets.items()
            },
        )

    async def committed(
        self, group_id: str, partitions: list[TopicPartition] | None = None
    ) -> dict[TopicPartition, int | None]:
        error, offsets = await self.coordinator.fetch_offsets(group_id, partitions)
        assert error is ErrorCode.NONE
        return {partition: _offset(committed) for partition, committed in offsets.items()}


def _offset(committed: CommittedOffset | None) -> int | None:
    return None if committed is None else committed.offset


@pytest.fixture
def client(node: Node) -> Client:
    return Client(node)
