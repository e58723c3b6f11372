"""The share-partition leader: ShareFetch and ShareAcknowledge for the partitions
this broker leads (KIP-932).

For each (share group, partition) it leads and a member has fetched, the
broker holds a :class:`~eventplatform.log.groups.share_partition.SharePartition`,
loaded at its first use under the partition's current leader epoch:

- from the state the group's share coordinator keeps (ReadShareGroupState:
  the group coordinator of :mod:`~eventplatform.log.groups.share_coordinator`,
  on this broker or reached over the inter-broker listener), records past
  its start offset that the log no longer holds settled as archived;
- or, for a group that never read the partition, at the log start
  (``share.auto.offset.reset=earliest``) or the high watermark (``latest``,
  the default);

and then written back at once with the leader epoch as its state epoch, so
the coordinator refuses (FENCED_STATE_EPOCH) the writes of a leader that has
since lost the partition, and a ``latest`` start is fixed where it was first
taken. Every acknowledgement is written before it is answered, so a record
acknowledged is never delivered again, by this leader or the next; records
released by a lock that ran out or a session that ended are written in the
background (losing that write means only that they are delivered again).

A share partition whose leadership this broker lost, or whose leader epoch
moved, is dropped, and loaded again from the store at its next use.

Locks: a timer task releases records whose lock ran out and wakes the
fetches waiting for records; a connection that closes ends its share
sessions (:mod:`~eventplatform.log.groups.share_sessions`) and releases what
their members hold.

Every method runs on the broker's trio thread.
"""

from __future__ import annotations

import logging
import math
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from eventplatform.log.cluster.peer import PeerError
from eventplatform.log.groups.records import ShareStateKey, partition_for
from eventplatform.log.groups.share_partition import (
    AckBatch,
    Acquired,
    RecordState,
    SharePartition,
    Snapshot,
    StateBatch,
)
from eventplatform.log.groups.share_sessions import ShareSessions
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import READ_SHARE_GROUP_STATE, WRITE_SHARE_GROUP_STATE
from eventplatform.log.storage import KafkaStorageError, OffsetOutOfRangeError, SegmentSlice

if TYPE_CHECKING:
    from eventplatform.log.broker.broker import Broker
    from eventplatform.log.replica.partition import Partition

log = logging.getLogger("eventplatform.share")

STATE_RPC_TIMEOUT_S = 10.0
"""How long a share-partition leader waits for the share coordinator's answer."""
LOCK_CHECK_INTERVAL_S = 1.0
"""The longest the lock timer sleeps without looking."""
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_POSITION = 23
_LOG_OVERHEAD = 12

ShareKey = tuple[str, str, int]
"""(group, topic, partition)."""


@dataclass(slots=True)
class _Held:
    state: SharePartition
    topic_id: bytes
    leader_epoch: int
    writes: trio.Lock = field(default_factory=trio.Lock)


@dataclass(slots=True)
class PartitionFetch:
    """One partition's outcome of a ShareFetch."""

    error: ErrorCode = ErrorCode.NONE
    acknowledge_error: ErrorCode | None = None
    data: SegmentSlice | None = None
    acquired: list[Acquired] = field(default_factory=list)


class ShareService:
    """See the module docstring."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.sessions = ShareSessions(broker.config.group_share_max_share_sessions)
        self._held: dict[ShareKey, _Held] = {}
        self._loading: dict[ShareKey, trio.Event] = {}
        self._released = trio.Event()
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                await trio.sleep(self._next_wake_s())
                self._prune()
                now_ms = _now_ms()
                for key, held in list(self._held.items()):
                    deadline = held.state.next_deadline_ms()
                    if deadline is not None and deadline <= now_ms and held.state.advance(now_ms):
                        self._wake()
                        self._persist_later(key, held)

    def _prune(self) -> None:
        """Drop the share partitions of partitions this broker no longer leads (or that
        are gone); they are loaded from the store again if it leads them again."""
        topics = self.broker.topics
        for key, held in list(self._held.items()):
            partition = topics.partition(key[1], key[2])
            if partition is None or not partition.is_leader:
                del self._held[key]
                continue
            if held.leader_epoch != partition.leader_epoch:
                del self._held[key]

    def _next_wake_s(self) -> float:
        deadlines = [
            d for h in self._held.values() if (d := h.state.next_deadline_ms()) is not None
        ]
        if not deadlines:
            return LOCK_CHECK_INTERVAL_S
        return min(
            max((min(deadlines) + 1) / 1000 - trio.current_time(), 0.01), LOCK_CHECK_INTERVAL_S
        )

    def _wake(self) -> None:
        self._released.set()
        self._released = trio.Event()

    # ------------------------------------------------------------ sessions

    def connection_closed(self, connection: int) -> None:
        for session in self.sessions.connection_closed(connection):
            self.release(session.group_id, session.member_id, session.partitions)

    def release(self, group_id: str, member_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Release what ``member_id`` holds of ``partitions``; written in the background."""
        for topic, index in partitions:
            key = (group_id, topic, index)
            held = self._held.get(key)
            if held is not None and held.state.release_member(member_id):
                self._wake()
                self._persist_later(key, held)

    # ------------------------------------------------------------ share partitions

    def _current(self, key: ShareKey, partition: Partition, topic_id: bytes) -> _Held | None:
        """The share partition held for ``key``, unless this broker lost the partition's
        leadership, its leader epoch moved, or the topic was deleted and made again
        under the same name (a new topic id: its share state starts afresh)."""
        held = self._held.get(key)
        if held is None:
            return None
        if (
            not partition.is_leader
            or held.leader_epoch != partition.leader_epoch
            or held.topic_id != topic_id
        ):
            del self._held[key]
            return None
        return held

    async def share_partition(
        self, group_id: str, partition: Partition, topic_id: bytes
    ) -> _Held | None:
        """The share partition of ``group_id`` on ``partition`` (this broker leads it), loaded
        if need be; None when its state cannot be had now (the coordinator is moving)."""
        key = (group_id, partition.topic, partition.index)
        while True:
            held = self._current(key, partition, topic_id)
            if held is not None:
                return held
            loading = self._loading.get(key)
            if loading is None:
                break
            await loading.wait()
        done = self._loading[key] = trio.Event()
        try:
            return await self._load(key, partition, topic_id)
        finally:
            del self._loading[key]
            done.set()

    async def _load(self, key: ShareKey, partition: Partition, topic_id: bytes) -> _Held | None:
        group_id = key[0]
        epoch = partition.leader_epoch
        state_key = ShareStateKey(group_id, topic_id, partition.index)
        error, kept = await self._read_state(state_key, epoch)
        if error is not ErrorCode.NONE:
            log.warning(
                "share group %s on %s-%d: state not read: %s", group_id, *key[1:], error.name
            )
            return None
        if kept is None:
            reset = self.broker.group_configs.get(group_id, "share.auto.offset.reset")
            start = partition.log_start_offset if reset == "earliest" else partition.high_watermark
            state = SharePartition(start, state_epoch=epoch, **self._bounds())
        else:
            state = SharePartition.restore(_snapshot(kept, epoch), **self._bounds())
            state.move_log_start(partition.log_start_offset)
        if not partition.is_leader or partition.leader_epoch != epoch:
            return None
        held = _Held(state, topic_id, epoch)
        error = await self._write_state(key, held)
        if error is not ErrorCode.NONE:
            log.warning(
                "share group %s on %s-%d: state not kept: %s", group_id, *key[1:], error.name
            )
            return None
        if not partition.is_leader or partition.leader_epoch != epoch:
            return None
        self._held[key] = held
        log.info(
            "share group %s reads %s-%d from offset %d",
            group_id,
            key[1],
            key[2],
            state.start_offset,
        )
        return held

    def _bounds(self) -> dict[str, int]:
        config = self.broker.config
        return {
            "delivery_count_limit": config.group_share_delivery_count_limit,
            "max_in_flight": config.group_share_partition_max_record_locks,
        }

    async def acknowledge(
        self, group_id: str, member_id: str, held: _Held, key: ShareKey, batches: list[AckBatch]
    ) -> ErrorCode:
        """Apply ``batches`` and keep the result before answering."""
        error = held.state.acknowledge(member_id, batches)
        if error is not ErrorCode.NONE:
            return error
        if any(2 in batch.types for batch in batches):
            self._wake()  # released records are available to the others at once
        return await self._write_state(key, held)

    def acquire(
        self,
        group_id: str,
        member_id: str,
        held: _Held,
        partition: Partition,
        *,
        max_records: int,
        max_bytes: int,
    ) -> PartitionFetch:
        """Read and acquire what is available of ``partition`` for ``member_id`` of
        ``group_id``."""
        outcome = PartitionFetch()
        held.state.move_log_start(partition.log_start_offset)
        offset = held.state.next_acquirable(partition.readable_end)
        if offset is None or max_bytes <= 0:
            return outcome
        try:
            data = partition.read(offset, max_bytes)
        except OffsetOutOfRangeError:
            return outcome
        except KafkaStorageError:
            outcome.error = ErrorCode.KAFKA_STORAGE_ERROR
            return outcome
        if data is None:
            return outcome
        lock_ms = self.lock_duration_ms(group_id)
        outcome.acquired = held.state.acquire(
            member_id,
            offset,
            _last_offset(data),
            max_records=max_records,
            now_ms=_now_ms(),
            lock_duration_ms=lock_ms,
        )
        if outcome.acquired:
            outcome.data = data
        return outcome

    def lock_duration_ms(self, group_id: str | None = None) -> int:
        """``share.record.lock.duration.ms`` of ``group_id``."""
        if group_id is None:
            return self.broker.config.group_share_record_lock_duration_ms
        return self.broker.group_configs.get_int(group_id, "share.record.lock.duration.ms")

    async def wait_for_records(self, partitions: list[Partition], deadline: float) -> None:
        """Until an append to one of ``partitions``, a release, or ``deadline``."""
        event = trio.Event()
        for partition in partitions:
            partition.add_waiter(event)
        released = self._released
        try:
            with trio.move_on_at(deadline):
                async with trio.open_nursery() as nursery:

                    async def watch(waited: trio.Event) -> None:
                        await waited.wait()
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(watch, event)
                    nursery.start_soon(watch, released)
        finally:
            for partition in partitions:
                partition.remove_waiter(event)

    # ------------------------------------------------------------ the state store

    def _persist_later(self, key: ShareKey, held: _Held) -> None:
        """Write in the background; not at all once the broker stops (the records that
        release would have made available are delivered again, which is allowed)."""
        if self._nursery is None:
            return
        try:
            self._nursery.start_soon(self._write_state, key, held)
        except RuntimeError:  # the service's nursery closed: the broker is stopping
            self._nursery = None

    async def _write_state(self, key: ShareKey, held: _Held) -> ErrorCode:
        """Write the share partition's state as it is once the write's turn comes, so
        writes of one partition are kept in order, each newer than the last."""
        async with held.writes:
            snapshot = held.state.snapshot()
            value = {
                "state_epoch": snapshot.state_epoch,
                "start_offset": snapshot.start_offset,
                "state_batches": [
                    {
                        "first_offset": b.first_offset,
                        "last_offset": b.last_offset,
                        "delivery_state": int(b.state),
                        "delivery_count": b.delivery_count,
                    }
                    for b in snapshot.batches
                ],
            }
            state_key = ShareStateKey(key[0], held.topic_id, key[2])
            coordinator = self._coordinator_of(key[0])
            if coordinator is None:
                groups = self.broker.groups
                assert groups is not None
                return await groups.shares.write_state(state_key, value)
            body = {
                "group_id": key[0],
                "topics": [
                    {
                        "topic_id": held.topic_id,
                        "partitions": [
                            {"partition": key[2], "leader_epoch": held.leader_epoch, **value}
                        ],
                    }
                ],
            }
            answer = await self._ask(coordinator, WRITE_SHARE_GROUP_STATE, body)
            if answer is None:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
            return ErrorCode(answer["results"][0]["partitions"][0]["error_code"])

    async def _read_state(
        self, key: ShareStateKey, leader_epoch: int
    ) -> tuple[ErrorCode, dict[str, Any] | None]:
        coordinator = self._coordinator_of(key.group_id)
        if coordinator is None:
            groups = self.broker.groups
            if groups is None:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
            return await groups.shares.read_state(key)
        body = {
            "group_id": key.group_id,
            "topics": [
                {
                    "topic_id": key.topic_id,
                    "partitions": [{"partition": key.partition, "leader_epoch": leader_epoch}],
                }
            ],
        }
        answer = await self._ask(coordinator, READ_SHARE_GROUP_STATE, body)
        if answer is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        result = answer["results"][0]["partitions"][0]
        error = ErrorCode(result["error_code"])
        if error is not ErrorCode.NONE:
            return error, None
        if result["state_epoch"] < 0:
            return ErrorCode.NONE, None  # never written
        return ErrorCode.NONE, result

    def _coordinator_of(self, group_id: str) -> int | None:
        """The broker coordinating ``group_id``, or None when it is this one (or unknown:
        the local coordinator then answers why not)."""
        groups = self.broker.groups
        if groups is None:
            return None
        partitions = groups.offsets_topic.partitions()
        if not partitions:
            return None
        partition = partitions[partition_for(group_id, len(partitions))]
        if partition.is_leader or partition.leader_id < 0:
            return None
        return partition.leader_id

    async def _ask(self, broker_id: int, api: Any, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return await self.broker.peers.request(
                broker_id, api, 0, body, timeout_s=STATE_RPC_TIMEOUT_S
            )
        except PeerError as exc:
            log.warning("share state at broker %d: %s", broker_id, exc)
            return None


def _snapshot(kept: dict[str, Any], leader_epoch: int) -> Snapshot:
    return Snapshot(
        leader_epoch,
        kept["start_offset"],
        tuple(
            StateBatch(
                b["first_offset"],
                b["last_offset"],
                RecordState(b["delivery_state"]),
                b["delivery_count"],
            )
            for b in kept["state_batches"]
        ),
    )


def _last_offset(data: SegmentSlice) -> int:
    """The last offset of the whole batches in ``data``, from their headers alone."""
    position, end, last = data.position, data.position + data.length, data.first_offset
    while position + _LAST_OFFSET_DELTA_POSITION + _LAST_OFFSET_DELTA.size <= end:
        head = os.pread(data.descriptor, _LAST_OFFSET_DELTA_POSITION + 4, position)
        base, length = _BATCH_HEAD.unpack_from(head)
        last = base + _LAST_OFFSET_DELTA.unpack_from(head, _LAST_OFFSET_DELTA_POSITION)[0]
        position += _LOG_OVERHEAD + length
    return last


def _now_ms() -> int:
    return math.floor(trio.current_time() * 1000)
