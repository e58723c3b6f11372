"""The transaction coordinator service: the trio shell around ``TransactionCoordinatorCore``.

A broker coordinates the transactional ids of the ``__transaction_state``
partitions it leads (the partition of an id is ``abs(hashCode(id)) % partitions``,
as Kafka computes it). The topic is created at the first FindCoordinator for a
transactional id (``transaction.state.log.num.partitions`` partitions, compacted,
on a cluster through the controller with ``transaction.state.log.replication.factor``
replicas). As this broker comes to lead a partition (:meth:`leadership_changed`)
it replays it into the core, answering COORDINATOR_LOAD_IN_PROGRESS for its ids
meanwhile; ids of partitions it does not lead are NOT_COORDINATOR.

Each move the core decides is appended to the id's partition and answered only
once the partition's ISR holds it (``offsets.commit.timeout.ms``), so a
coordinator that dies loses nothing it answered. A move into PrepareCommit or
PrepareAbort is followed by the markers
(:mod:`~eventplatform.log.broker.transaction_markers`): each partition's
leader writes a commit or abort marker, this broker's own partitions directly and
the others' through WriteTxnMarkers, retried until every partition has one or
the partition is gone; then the Complete record is written. A new leader of the
state partition finds a prepared transaction at load and writes its markers
again (a marker written twice changes nothing).

A timer task aborts transactions older than their timeout (every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``) and drops ids
idle past ``transactional.id.expiration.ms`` (a tombstone each).

Every method runs on the broker's trio thread.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

import trio

from eventplatform.log.groups.offsets_topic import OffsetsTopic, wait_replicated
from eventplatform.log.groups.ownership import PartitionOwnership
from eventplatform.log.groups.records import partition_for
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.transactions.core import Markers, Step, TransactionCoordinatorCore
from eventplatform.log.transactions.records import (
    TRANSACTION_STATE_TOPIC,
    RecordFormatError,
    TransactionRecord,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

if TYPE_CHECKING:
    from eventplatform.log.config import BrokerConfig
    from eventplatform.log.replica.topics import TopicRegistry
    from eventplatform.log.storage.record_batch import DecodedBatch

log = logging.getLogger("eventplatform.transactions")

RETRY_S = 0.5

MarkerWriter = Callable[[Markers, int], Awaitable[bool]]
"""Writes a transaction's markers at a coordinator epoch; False: this broker no longer
coordinates the transaction (its new coordinator writes them)."""


class TransactionCoordinator:
    """See the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicRegistry,
        wall_clock_ms: Callable[[], int],
    ) -> None:
        self.config = config
        self.topic = OffsetsTopic(
            topics,
            partitions=config.transaction_state_log_num_partitions,
            segment_bytes=config.transaction_state_log_segment_bytes,
            clock_ms=wall_clock_ms,
            name=TRANSACTION_STATE_TOPIC,
        )
        self.core = TransactionCoordinatorCore(
            max_timeout_ms=config.transaction_max_timeout_ms,
            id_expiration_ms=config.transactional_id_expiration_ms,
        )
        self.wall_clock_ms = wall_clock_ms
        self.write_markers: MarkerWriter | None = None
        self.allocate_producer_id: Callable[[], Awaitable[int]] | None = None
        self._timeout_s = config.offsets_commit_timeout_ms / 1000
        self.ownership = PartitionOwnership(self.topic)
        self._nursery: trio.Nursery | None = None
        self._running = False

    # ------------------------------------------------------------ lifecycle

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._running = True
            task_status.started()
            self.leadership_changed()
            try:
                while True:
                    interval_ms = (
                        self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms
                    )
                    await trio.sleep(interval_ms / 1000)
                    await self._expire()
            finally:
                self._running = False

    def leadership_changed(self) -> None:
        """Load the ids of state partitions this broker now leads; drop the others'."""
        if self._nursery is None or not self._running:
            return
        self.ownership.changed(self._nursery, TransactionReplay, self._install, self._unload)

    def _unload(self, index: int) -> None:
        count = len(self.topic.partitions())
        self.core.unload([t for t in self.core.transactions if partition_for(t, count) == index])

    def _install(self, index: int, replay: TransactionReplay) -> None:
        prepared = [
            markers
            for tid, record in replay.found.items()
            if (markers := self.core.load(tid, record)) is not None
        ]
        log.info(
            "coordinating %d transactional ids of %s-%d (epoch %d)",
            len(replay.found),
            TRANSACTION_STATE_TOPIC,
            index,
            self.ownership.owned[index],
        )
        for markers in prepared:
            self._start_markers(markers)

    # ------------------------------------------------------------ status

    def status(self, transactional_id: str) -> ErrorCode:
        """Whether this broker coordinates ``transactional_id`` now, or why not."""
        if not self._running:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return self.ownership.status(transactional_id)

    def coordinator_epoch(self, transactional_id: str) -> int:
        partitions = self.topic.partitions()
        return partitions[partition_for(transactional_id, len(partitions))].leader_epoch

    # ------------------------------------------------------------ the APIs

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[ErrorCode, int, int]:
        await trio.lowlevel.checkpoint()
        error = self.status(transactional_id)
        if error is not ErrorCode.NONE:
            return error, -1, -1
        fresh = None
        if self.core.needs_producer_id(transactional_id):
            assert self.allocate_producer_id is not None
            fresh = await self.allocate_producer_id()
            if self.status(transactional_id) is not ErrorCode.NONE:
                return ErrorCode.NOT_COORDINATOR, -1, -1
        step = self.core.init_producer_id(
            transactional_id,
            timeout_ms,
            self.wall_clock_ms(),
            fresh_producer_id=fresh,
            expected=expected,
        )
        error = await self._keep(transactional_id, step)
        if error is not ErrorCode.NONE or step.error is not ErrorCode.NONE:
            return (step.error if error is ErrorCode.NONE else error), -1, -1
        return ErrorCode.NONE, *self.core.answer(transactional_id)

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> ErrorCode:
        await trio.lowlevel.checkpoint()
        error = self.status(transactional_id)
        if error is not ErrorCode.NONE:
            return error
        step = self.core.add_partitions(
            transactional_id, producer_id, producer_epoch, partitions, self.wall_clock_ms()
        )
        return await self._answer(transactional_id, step)

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        await trio.lowlevel.checkpoint()
        error = self.status(transactional_id)
        if error is not ErrorCode.NONE:
            return error
        step = self.core.end_transaction(
            transactional_id, producer_id, producer_epoch, commit, self.wall_clock_ms()
        )
        return await self._answer(transactional_id, step)

    async def _answer(self, transactional_id: str, step: Step) -> ErrorCode:
        if step.error is not ErrorCode.NONE:
            return step.error
        return await self._keep(transactional_id, step)

    # ------------------------------------------------------------ keeping moves

    async def _keep(self, transactional_id: str, step: Step) -> ErrorCode:
        """Write ``step``'s record (if any) and wait for the ISR; then apply it."""
        if step.write is None:
            await trio.lowlevel.checkpoint()
            return ErrorCode.NONE
        record = (encode_key(transactional_id), encode_value(step.write))
        with self.topic.receipts() as appended:
            error = self.topic.append(transactional_id, [record])
        if error is ErrorCode.NONE:
            error = await wait_replicated(appended, self._timeout_s)
        markers = self.core.finish(transactional_id, written=error is ErrorCode.NONE)
        if error is not ErrorCode.NONE:
            log.warning("transaction %s: a move was not kept: %s", transactional_id, error.name)
            return _retriable(error)
        if markers is not None:
            self._start_markers(markers)
        return ErrorCode.NONE

    def _start_markers(self, markers: Markers) -> None:
        if self._nursery is not None and self._running:
            self._nursery.start_soon(self._complete, markers)

    async def _complete(self, markers: Markers) -> None:
        """Have every partition's leader write the markers, then write Complete."""
        tid = markers.transactional_id
        if self.status(tid) is not ErrorCode.NONE or self.write_markers is None:
            return
        if not await self.write_markers(markers, self.coordinator_epoch(tid)):
            return
        while self.status(tid) is ErrorCode.NONE:
            step = self.core.markers_written(markers, self.wall_clock_ms())
            if step.error is ErrorCode.CONCURRENT_TRANSACTIONS:
                await trio.sleep(0.05)
                continue
            if await self._keep(tid, step) is ErrorCode.NONE:
                return
            await trio.sleep(RETRY_S)

    async def _expire(self) -> None:
        now_ms = self.wall_clock_ms()
        for tid, step in self.core.expire(now_ms):
            log.info("transaction %s timed out: aborting it", tid)
            await self._keep(tid, step)
        for tid in self.core.expired_ids(now_ms):
            if self.status(tid) is not ErrorCode.NONE:
                continue
            with self.topic.receipts() as appended:
                error = self.topic.append(tid, [(encode_key(tid), None)])
            if error is ErrorCode.NONE:
                error = await wait_replicated(appended, self._timeout_s)
            if error is ErrorCode.NONE:
                self.core.forget(tid)


class TransactionReplay:
    """Folds ``__transaction_state`` records into each id's latest metadata (None: a
    tombstone); a record that does not decode is logged and skipped."""

    def __init__(self) -> None:
        self.found: dict[str, TransactionRecord | None] = {}

    def apply_batch(self, batch: DecodedBatch) -> None:
        if batch.header.is_control:
            return
        for record in batch.records:
            if record.key is None:
                continue
            try:
                tid = decode_key(record.key)
                self.found[tid] = None if record.value is None else decode_value(record.value)
            except RecordFormatError as exc:
                log.warning("skipping a %s record: %s", TRANSACTION_STATE_TOPIC, exc)


def _retriable(error: ErrorCode) -> ErrorCode:
    """What a client is told when a move could not be kept: it retries on another
    coordinator when this one lost its partition, here otherwise."""
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.NOT_COORDINATOR
    return ErrorCode.COORDINATOR_NOT_AVAILABLE
