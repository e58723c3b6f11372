"""One partition as the broker serves it: its log, producer state and fetch waiters.

The partition is the single owner of its ``PartitionLog``: every append and
read happens through it on the broker's trio thread, so there is no lock.
Appends wake long-polling fetches through ``trio.Event``s registered with
``add_waiter``; nobody polls.

A standalone broker leads every partition: the high watermark is the log
end offset. In a cluster (:meth:`Partition.join_cluster`) the metadata makes
each replica a leader or a follower:

* the **leader** takes produces, tracks its followers' fetches in a
  :class:`~eventplatform.log.replica.isr.LeaderReplicas`, and moves the high
  watermark as the ISR catches up; acks=all appends wait for it
  (:meth:`wait_replicated`);
* a **follower** appends what it fetched from the leader with the leader's
  offsets and epochs (:meth:`append_replicated`), truncating first where
  its log diverged (:meth:`truncate_to`);
* both keep the leader-epoch cache, which answers OffsetForLeaderEpoch.

Consumers read below the high watermark only; read_committed ones below the
last stable offset (:attr:`Partition.last_stable_offset`): the high watermark,
or the first offset of the earliest transaction whose marker is not in (or not
replicated yet), whichever is smaller. The leader appends each transaction's
commit or abort marker (:meth:`Partition.write_marker`); leader, followers and
recovery keep the same producer state from the log (see
:mod:`~eventplatform.log.replica.producer_state`), so each replica's aborted
transactions (:meth:`Partition.aborted_transactions`, read from the segments'
transaction indexes) and last stable offset are the same.

A storage error takes the partition's log offline (see
:mod:`eventplatform.log.storage.partition_log`): from then on produce, fetch,
ListOffsets and OffsetForLeaderEpoch answer ``KAFKA_STORAGE_ERROR`` for it,
until the broker restarts. The broker notices (:meth:`Broker.check_storage`)
and, on a cluster, moves its leaderships away.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from eventplatform.log.invariants import require
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.entity_index import EntityIndex
from eventplatform.log.replica.entity_log import remove_entity_files
from eventplatform.log.replica.erasures import ErasureLedger
from eventplatform.log.replica.isr import LeaderReplicas
from eventplatform.log.replica.partition_entities import EntityVersionsMixin
from eventplatform.log.replica.produce_result import ProduceResult as ProduceResult
from eventplatform.log.replica.producer_state import (
    ProducerStates,
    Verdict,
    iter_headers,
    marker_of,
)
from eventplatform.log.replica.version_table import VersionTable
from eventplatform.log.storage import (
    AppendInfo,
    BatchHeader,
    KafkaStorageError,
    LogConfig,
    PartitionLog,
    SegmentSlice,
    StorageError,
)
from eventplatform.log.storage.control_records import TransactionMarker, encode_marker
from eventplatform.log.storage.leader_epochs import UNDEFINED_EPOCH, EpochCache, EpochCacheError
from eventplatform.log.storage.partition_log import wall_clock_ms
from eventplatform.log.storage.record_batch import NO_SEQUENCE, parse_header, split_batches

ACKS_ALL = -1
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class ReplicaSettings:
    """What a leader needs to judge its followers."""

    replica_lag_time_max_ms: int
    min_insync_replicas: int


def _stamped(header: BatchHeader, info: AppendInfo) -> BatchHeader:
    """A produced batch's header as the log appended it: its offset, and its time when the
    topic stamps LogAppendTime."""
    stamped = header._replace(base_offset=info.base_offset)
    if info.append_time_ms >= 0:
        stamped = stamped._replace(max_timestamp=info.append_time_ms)
    return stamped


class Partition(EntityVersionsMixin):
    """See the module docstring."""

    def __init__(self, topic: str, index: int, directory: Path, log: PartitionLog) -> None:
        self.topic = topic
        self.index = index
        self.directory = directory
        self.log = log
        self.leader_epoch = 0
        self.producers = ProducerStates.load(directory, log)
        log.first_unstable_offset = self._first_unstable_offset
        self.entities: VersionTable | None = None
        self.entity_index: EntityIndex | None = None
        self.entity_index_misses = 0
        """Entity reads that did not find their batch where the index said (a bug)."""
        if not self.log.config.eventplatform_entity_versions_enable:
            remove_entity_files(directory)
        self._entity_versions()
        self._waiters: set[trio.Event] = set()
        self.erasures = ErasureLedger()
        # replication (cluster mode); a partition of a broker on its own leads alone
        self.clustered = False
        self.node_id = NO_LEADER
        self.is_leader = True
        self.leader_id = NO_LEADER
        self.partition_epoch = 0
        self.replica_set: tuple[int, ...] = ()
        self.replicas: LeaderReplicas | None = None
        self.follower_high_watermark = 0
        self.epochs = EpochCache(None)
        self._replicated = trio.Event()
        self.closed = False

    @classmethod
    def open(
        cls,
        topic: str,
        index: int,
        directory: Path,
        config: LogConfig,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> Partition:
        return cls(topic, index, directory, PartitionLog.open(directory, config, clock_ms=clock_ms))

    @property
    def high_watermark(self) -> int:
        if not self.clustered:
            return self.log.log_end_offset
        if self.replicas is not None:
            return self.replicas.high_watermark
        return min(self.follower_high_watermark, self.log.log_end_offset)

    @property
    def high_watermark_behind_epoch(self) -> bool:
        """A leader whose high watermark has not yet reached the start of its epoch: it
        was elected before it heard of the old leader's, which acknowledged up to there
        at most, so the offsets it would answer could be below those already answered."""
        replicas = self.replicas
        return replicas is not None and replicas.high_watermark < replicas.epoch_start_offset

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or the first offset of the earliest transaction whose marker
        is not in or not replicated yet (never below the log start), whichever is smaller."""
        high_watermark = self.high_watermark
        first = self.producers.first_unstable_offset(high_watermark)
        if first is None:
            return high_watermark
        return min(high_watermark, max(first, self.log.log_start_offset))

    def _first_unstable_offset(self) -> int | None:
        return self.producers.first_unstable_offset()

    @property
    def readable_end(self) -> int:
        """Where reads of consumers stop: the high watermark, or before the first record
        an erasure committed for this partition has not yet emptied here."""
        return self._readable(self.high_watermark)

    @property
    def readable_committed_end(self) -> int:
        """Where read_committed reads stop: :attr:`last_stable_offset`, or the erasure bound
        of :attr:`readable_end` when that is lower."""
        return self._readable(self.last_stable_offset)

    def aborted_transactions(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> list[tuple[int, int]]:
        """(producer id, first offset) of every aborted transaction with records in
        ``[fetch_offset, upper_bound_offset)``: its marker at or after ``fetch_offset``, its
        first offset before ``upper_bound_offset`` (Kafka's ``collectAbortedTransactions``).
        Read from the transaction indexes; raises KafkaStorageError when the log is offline."""
        return [
            (entry.producer_id, entry.first_offset)
            for entry in self.log.collect_aborted_transactions(fetch_offset, upper_bound_offset)
        ]

    def _readable(self, end: int) -> int:
        bound = self.erasures.read_bound()
        return end if bound is None else min(end, bound)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def check_leader_epoch(self, epoch: int) -> ErrorCode:
        """A client's ``current_leader_epoch`` against ours (-1 skips the check)."""
        if epoch < 0 or epoch == self.leader_epoch:
            return ErrorCode.NONE
        if epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    @property
    def offline(self) -> bool:
        """A storage error took the log offline."""
        return self.log.offline

    def check_leader(self, epoch: int = -1) -> ErrorCode:
        """Whether this replica may serve clients as the leader at ``epoch``."""
        if self.log.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return self.check_leader_epoch(epoch)

    def check_replica(self, epoch: int = -1) -> ErrorCode:
        """Whether this replica may serve a consumer's reads at ``epoch``: as the leader, or
        as a follower in the partition's replica set (KIP-392), below its high watermark."""
        if self.log.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if not self.is_leader and self.node_id not in self.replica_set:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return self.check_leader_epoch(epoch)

    # ------------------------------------------------------------ roles

    def join_cluster(self, node_id: int) -> None:
        """From now on the metadata decides this replica's role; it starts as a follower of
        nobody, with its high watermark unknown (zero) and its epoch cache loaded."""
        self.clustered = True
        self.is_leader = False
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.node_id = node_id
        try:
            self.epochs = EpochCache.load(self.directory)
        except EpochCacheError:
            self.epochs = EpochCache(self.directory)
            self._rebuild_epochs()

    def _rebuild_epochs(self) -> None:
        for header in iter_headers(self.log, self.log.log_start_offset):
            self._note_epoch(header)

    def _note_epoch(self, header: BatchHeader) -> None:
        epoch = header.partition_leader_epoch
        if epoch > self.epochs.latest_epoch:
            self.epochs.assign(epoch, header.base_offset)

    def become_leader(
        self,
        epoch: int,
        partition_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        settings: ReplicaSettings,
        now_ms: int,
    ) -> None:
        """Lead at ``epoch`` (again, with a new ISR, when the epoch is the one we lead)."""
        end = self.log.log_end_offset
        if self.is_leader and self.replicas is not None and epoch == self.leader_epoch:
            if replicas != self.replica_set:
                self.replicas = self._leader_replicas(replicas, isr, settings, now_ms)
            else:
                self.replicas.min_insync_replicas = settings.min_insync_replicas
                self.replicas.set_isr(isr, end)
        else:
            if epoch > self.epochs.latest_epoch:
                self.epochs.assign(epoch, end)
            self.leader_epoch = epoch
            self.replicas = self._leader_replicas(replicas, isr, settings, now_ms)
        self.is_leader = True
        self.leader_id = self.node_id
        self.partition_epoch = partition_epoch
        self.replica_set = replicas
        self.replicas.advance(end)
        self._wake_replicated()
        self._wake()

    def _leader_replicas(
        self, replicas: tuple[int, ...], isr: tuple[int, ...], settings: ReplicaSettings, now: int
    ) -> LeaderReplicas:
        return LeaderReplicas(
            self.node_id,
            replicas,
            isr,
            high_watermark=self.high_watermark,
            epoch_start_offset=self._epoch_start(),
            now_ms=now,
            replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
            min_insync_replicas=settings.min_insync_replicas,
        )

    def _epoch_start(self) -> int:
        for entry in reversed(self.epochs.entries):
            if entry.epoch == self.leader_epoch:
                return entry.start_offset
        return self.log.log_end_offset

    def become_follower(
        self, leader: int, epoch: int, partition_epoch: int, replicas: tuple[int, ...]
    ) -> None:
        """Follow ``leader`` at ``epoch`` (``NO_LEADER``: wait for one)."""
        self.follower_high_watermark = self.high_watermark
        self.replicas = None
        self.is_leader = False
        self.leader_id = leader
        self.leader_epoch = epoch
        self.partition_epoch = partition_epoch
        self.replica_set = replicas
        self._wake_replicated()
        self._wake()

    def append_replicated(self, record_set: bytes, leader_high_watermark: int) -> bool:
        """Append batches fetched from the leader, with its offsets and epochs; a storage
        error (of the log or of the epoch checkpoint) raises KafkaStorageError. True if
        they hold records a committed erasure names (now pending here)."""
        erasures_due = False
        if record_set:
            first = self.log.log_end_offset
            appended = self.log.append_as_follower(record_set)
            erasures_due = self.erasures.appended(first, self.log.log_end_offset)
            try:
                for header in split_batches(record_set, check_crc=False):
                    self._note_epoch(header)
                    if not header.is_control:
                        self.producers.update(header)
                    elif (marker := marker_of(record_set, header)) is not None:
                        self._complete(header, marker)
                self._apply_replicated_entities(record_set, appended.position)
            except OSError as exc:
                raise self.log.take_offline(exc) from exc
        self.follower_high_watermark = min(leader_high_watermark, self.log.log_end_offset)
        self.producers.forget_replicated(self.high_watermark)
        self._wake_replicated()
        self._wake()
        return erasures_due

    def truncate_to(self, offset: int) -> None:
        """Drop every record at or after ``offset`` (a follower whose log diverged)."""
        if offset >= self.log.log_end_offset:
            return
        try:
            self._take_back_entities(offset)
        except OSError as exc:
            raise self.log.take_offline(exc) from exc
        self.log.truncate_to(offset)
        try:
            self.epochs.truncate_from_end(self.log.log_end_offset)
            self.producers = ProducerStates.load(self.directory, self.log)
            self._truncate_entity_index()
            # snapshots past the new end would count truncated records at the next open
            self._write_snapshots()
        except OSError as exc:
            raise self.log.take_offline(exc) from exc
        self.follower_high_watermark = min(self.follower_high_watermark, self.log.log_end_offset)
        self._wake_replicated()

    def restart_at(self, offset: int) -> None:
        """Empty the log and start it at ``offset`` (the leader's log start is past ours)."""
        self.log.truncate_fully_and_start_at(offset)
        try:
            self.epochs.truncate_from_end(0)
            self.producers = ProducerStates.load(self.directory, self.log)
            if self.entities is not None:
                self.entities.reset(offset)
            self._truncate_entity_index()
            # snapshots past the new end would count truncated records at the next open
            self._write_snapshots()
        except OSError as exc:
            raise self.log.take_offline(exc) from exc
        self.follower_high_watermark = offset
        self._wake_replicated()

    def replication_epoch(self, last_offset: int) -> int | None:
        """The epoch an acks=all answer for the append ending at ``last_offset`` waits on
        (:meth:`wait_replicated`); None when the append is already all the replication it
        gets (the partition of a broker on its own: its ISR is itself)."""
        return self.epoch_of(last_offset) if self.clustered else None

    def end_offset_for(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: the largest epoch up to ``leader_epoch`` this log holds,
        and the offset where it ends; (-1, -1) when there is none. A broker on its own has
        led since epoch 0 with no history to consult."""
        if self.clustered:
            return self.epochs.end_offset_for(leader_epoch, self.log.log_end_offset)
        if leader_epoch <= self.leader_epoch:
            return self.leader_epoch, self.log.log_end_offset
        return -1, -1

    def on_follower_fetch(
        self, replica: int, broker_epoch_current: bool, fetch_offset: int, now_ms: int
    ) -> ErrorCode:
        """A fetch of ``replica`` (whose registration's epoch matches the request's when
        ``broker_epoch_current``): NONE when believed (:meth:`on_replica_fetch`) or when
        there are no followers to believe (a broker on its own), else why not."""
        if not self.clustered:
            return ErrorCode.NONE
        error = self.check_follower(replica)
        if error != ErrorCode.NONE:
            return error
        if not broker_epoch_current:
            return ErrorCode.STALE_BROKER_EPOCH
        return self.on_replica_fetch(replica, fetch_offset, now_ms)

    def check_follower(self, replica: int) -> ErrorCode:
        """Whether ``replica`` is another replica of this partition, whose fetches count."""
        if replica == self.node_id or replica not in self.replica_set:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def on_replica_fetch(self, replica: int, fetch_offset: int, now_ms: int) -> ErrorCode:
        """A follower fetched from ``fetch_offset``: it has everything before. Believed only
        from another replica of this partition (NOT_LEADER_OR_FOLLOWER) and never past the
        log end (OFFSET_OUT_OF_RANGE: a follower cannot hold what was never written here);
        a refused fetch changes nothing. The caller has checked the broker's epoch."""
        error = self.check_follower(replica)
        if error != ErrorCode.NONE:
            return error
        if fetch_offset > self.log.log_end_offset:
            return ErrorCode.OFFSET_OUT_OF_RANGE
        if self.replicas is not None and self.replicas.on_fetch(
            replica, fetch_offset, self.log.log_end_offset, now_ms
        ):
            self._wake_replicated()
            self._wake()
        return ErrorCode.NONE

    def _wake_replicated(self) -> None:
        """The high watermark may have moved: wake the acks=all waits, and forget the
        markers it passed."""
        self.producers.forget_replicated(self.high_watermark)
        self._replicated.set()
        self._replicated = trio.Event()

    def epoch_of(self, offset: int) -> int:
        """The leader epoch in which the record at ``offset`` of this log was written, from
        the leader-epoch cache; ``UNDEFINED_EPOCH`` when the log does not hold ``offset``.
        One leader writes each epoch, and each offset once in it, so while this answer
        stays the same the record at ``offset`` is the one written then."""
        if not self.log.log_start_offset <= offset < self.log.log_end_offset:
            return UNDEFINED_EPOCH
        for entry in reversed(self.epochs.entries):
            if entry.start_offset <= offset:
                return entry.epoch
        return UNDEFINED_EPOCH

    async def wait_replicated(self, last_offset: int, epoch: int, deadline: float) -> ErrorCode:
        """Wait for the fate of a batch this replica appended as leader, ending at
        ``last_offset`` and written in ``epoch`` (:meth:`epoch_of`), for an acks=all answer.

        NONE once a high watermark passed it with the batch still in this log: this
        node's as the leader, at any epoch (an ISR change or a fence-and-re-elect moves
        the epoch, not the batch), or the new leader's as a follower (the batch survived
        the failover). NOT_ENOUGH_REPLICAS_AFTER_APPEND when the leader's ISR got it but
        is below ``min.insync.replicas`` and fewer than that many replicas are known to
        hold it (with that many, acks=all's promise is kept, and an error would make a
        client resend what the log holds: an idempotent librdkafka producer may resend
        it under a new producer epoch, as a second copy). NOT_LEADER_OR_FOLLOWER, which
        clients take as "not persisted", only once the batch is gone from this log
        (truncated by a new leader that never had it). REQUEST_TIMED_OUT, "possibly
        persisted", when the deadline passes first, the partition closes or its log start
        passes the batch: its fate is unknown, and a retry with the same producer sequence
        is answered as a duplicate wherever it survived.
        """
        while True:
            if self.closed or last_offset < self.log.log_start_offset:
                return ErrorCode.REQUEST_TIMED_OUT  # closed, or deleted: the fate is unknown
            if self.epoch_of(last_offset) != epoch:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
            replicas = self.replicas
            if self.is_leader and replicas is not None:
                if replicas.acknowledged(last_offset):
                    if not replicas.enough_replicas() and not replicas.held_by_enough(last_offset):
                        return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                    return ErrorCode.NONE
            elif self.high_watermark > last_offset:
                return ErrorCode.NONE
            if trio.current_time() >= deadline:
                return ErrorCode.REQUEST_TIMED_OUT
            with trio.move_on_at(deadline):
                await self._replicated.wait()

    # ------------------------------------------------------------ produce

    def _note_refused(self, record_set: bytes | bytearray, error: ErrorCode) -> None:
        """Remember an idempotent batch refused before validation (this replica is not the
        leader yet), so a batch behind it gets the same answer once it is: see
        :mod:`producer_state`. A batch whose header does not parse is not remembered."""
        try:
            header = parse_header(record_set)
        except StorageError:
            return
        self.producers.note_refused(header, error)

    def append(self, record_set: bytes | bytearray, *, acks: int = 1) -> ProduceResult:
        """Validate and append one produced batch; errors are answered, not raised.

        The retry of a batch the log holds is answered with its original offsets before
        anything else is judged: refusing it (NOT_ENOUGH_REPLICAS while the ISR is small)
        would tell the client "not persisted" about a batch that is, and an idempotent
        librdkafka producer may then send it again under a new producer epoch."""
        if self.log.offline:
            return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(self.log.failure))
        if not self.is_leader:
            self._note_refused(record_set, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return ProduceResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        try:
            buffer, headers = self.log.validate(record_set)
        except StorageError as exc:
            return ProduceResult.refused(exc)
        if len(headers) != 1:
            message = "a produce request carries exactly one record batch per partition"
            return ProduceResult(ErrorCode.INVALID_RECORD, message=message)
        header = headers[0]
        # a batch without a sequence is a coordinator's: the produce handler refuses clients'
        check = self.producers.check(header, sequenced=header.base_sequence != NO_SEQUENCE)
        if check.verdict is Verdict.DUPLICATE:
            require(check.duplicate_of is not None, "a duplicate names its batch")
            assert check.duplicate_of is not None
            # answered with the original's offsets, and (acks=all) only once the ISR has it
            original = check.duplicate_of
            return ProduceResult(
                ErrorCode.NONE,
                original.first_offset,
                -1,
                self.log_start_offset,
                last_offset=original.last_offset,
            )
        if acks == ACKS_ALL and self.replicas is not None and not self.replicas.enough_replicas():
            message = (
                f"the ISR has {len(self.replicas.isr)} replicas; "
                f"min.insync.replicas is {self.replicas.min_insync_replicas}"
            )
            if check.verdict is Verdict.APPEND:
                self.producers.note_refused(header, ErrorCode.NOT_ENOUGH_REPLICAS)
            return ProduceResult(ErrorCode.NOT_ENOUGH_REPLICAS, message=message)
        if check.verdict is Verdict.FENCED:
            return ProduceResult(ErrorCode.INVALID_PRODUCER_EPOCH, message=check.message)
        if check.verdict is Verdict.BEHIND_REFUSED:
            assert check.refusal is not None
            return ProduceResult(ErrorCode(check.refusal.error), message=check.message)
        if check.verdict is Verdict.OUT_OF_ORDER:
            return ProduceResult(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, message=check.message)
        if check.verdict is Verdict.INVALID_TXN_STATE:
            return ProduceResult(ErrorCode.INVALID_TXN_STATE, message=check.message)
        try:
            entities = self._entity_versions()
            keys: list[bytes | None] = []
            if entities is not None:
                refused, keys = self._check_entities(entities, buffer)
                if refused is not None:
                    return refused
        except OSError as exc:
            error = self.log.take_offline(exc)
            return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(error))
        active_base = self.log.active_segment.base_offset
        try:
            info = self.log.append(buffer, leader_epoch=self.leader_epoch, validated=headers)
        except StorageError as exc:
            return ProduceResult.refused(exc)
        if entities is not None:
            assert self.entity_index is not None
            self.entity_index.add(
                info.base_offset, info.last_offset, keys, info.position, len(buffer)
            )
            try:
                entities.apply(keys, info.last_offset + 1)
            except OSError as exc:
                error = self.log.take_offline(exc)
                return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(error))
        self.producers.update(_stamped(header, info))
        return self._appended(info, active_base)

    def write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> ProduceResult:
        """Append a transaction's commit or abort marker as this partition's leader
        (WriteTxnMarkers); errors are answered, not raised.

        Appended as an acks=all produce is: NOT_ENOUGH_REPLICAS while the ISR is below
        ``min.insync.replicas``, and the caller waits for the ISR as for any acks=all append
        (:meth:`replication_epoch`, :meth:`wait_replicated` on ``last_offset``).
        INVALID_PRODUCER_EPOCH for an epoch older than the producer's, and
        TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than the producer's
        last marker's. A marker for a producer with no open transaction here is appended
        all the same: it moves the producer's epochs only. See
        :mod:`~eventplatform.log.storage.control_records` for the batch."""
        if self.log.offline:
            return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(self.log.failure))
        if not self.is_leader:
            return ProduceResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if self.replicas is not None and not self.replicas.enough_replicas():
            message = (
                f"the ISR has {len(self.replicas.isr)} replicas; "
                f"min.insync.replicas is {self.replicas.min_insync_replicas}"
            )
            return ProduceResult(ErrorCode.NOT_ENOUGH_REPLICAS, message=message)
        check = self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if check.verdict is Verdict.FENCED:
            return ProduceResult(ErrorCode.INVALID_PRODUCER_EPOCH, message=check.message)
        if check.verdict is Verdict.COORDINATOR_FENCED:
            return ProduceResult(ErrorCode.TRANSACTION_COORDINATOR_FENCED, message=check.message)
        batch = bytearray(
            encode_marker(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                commit=commit,
                coordinator_epoch=coordinator_epoch,
                timestamp_ms=self.log.clock_ms(),
            )
        )
        headers = split_batches(batch, check_crc=False)
        active_base = self.log.active_segment.base_offset
        try:
            info = self.log.append(batch, leader_epoch=self.leader_epoch, validated=headers)
            self._complete(_stamped(headers[0], info), TransactionMarker(commit, coordinator_epoch))
        except StorageError as exc:
            return ProduceResult.refused(exc)
        return self._appended(info, active_base)

    def _complete(self, header: BatchHeader, marker: TransactionMarker) -> None:
        """Record an appended marker, and its aborted transaction in the index of its segment
        (an OSError takes the log offline: KafkaStorageError)."""
        aborted = self.producers.complete(header, marker)
        if aborted is not None:
            self.log.append_aborted_transaction(aborted)

    def _appended(self, info: AppendInfo, active_base: int) -> ProduceResult:
        """After a leader's append: the snapshots when the log rolled, the high watermark,
        the waiting fetches, and the answer."""
        if self.log.active_segment.base_offset != active_base:
            try:
                self._write_snapshots()
            except (OSError, KafkaStorageError) as exc:
                error = self.log.take_offline(exc)
                return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(error))
        if self.replicas is not None and self.replicas.advance(self.log.log_end_offset):
            self._wake_replicated()
        else:
            self.producers.forget_replicated(self.high_watermark)
        self._wake()
        return ProduceResult(
            ErrorCode.NONE,
            info.base_offset,
            info.append_time_ms,
            info.log_start_offset,
            last_offset=info.last_offset,
        )

    def _write_snapshots(self) -> None:
        """The producer state, and the entity versions when kept, as of the log end. The
        transaction indexes are made durable first: the snapshot counts on them."""
        end = self.log.log_end_offset
        self.log.flush_transaction_indexes()
        self.producers.write_snapshot(self.directory, end)
        if self.entities is not None:
            self.entities.write()
            assert self.entity_index is not None
            self.entity_index.drop_before(self.log.log_start_offset)

    # ------------------------------------------------------------ fetch

    def read(self, offset: int, max_bytes: int, *, committed: bool = False) -> SegmentSlice | None:
        """Whole batches from ``offset`` below the high watermark (:attr:`readable_end`), or
        below the last stable offset when ``committed`` (:attr:`readable_committed_end`);
        raises when out of range."""
        end = self.readable_committed_end if committed else self.readable_end
        return self.log.read(offset, max_bytes, max_offset=end)

    def read_for_replica(self, offset: int, max_bytes: int) -> SegmentSlice | None:
        """Whole batches from ``offset`` up to the log end, for a follower."""
        return self.log.read(offset, max_bytes, max_offset=self._readable(self.log.log_end_offset))

    def add_waiter(self, event: trio.Event) -> None:
        """Set ``event`` at the next append (fetch long polling)."""
        self._waiters.add(event)

    def remove_waiter(self, event: trio.Event) -> None:
        self._waiters.discard(event)

    def _wake(self) -> None:
        if self._waiters:
            for event in self._waiters:
                event.set()
            self._waiters.clear()

    def wake_all(self) -> None:
        """Wake every waiter, as when the partition goes away."""
        self._wake()

    # ------------------------------------------------------------ lifecycle

    def close(self) -> None:
        if not self.log.offline:  # an offline log's state is rebuilt by the next start
            try:
                self._write_snapshots()
            except (OSError, KafkaStorageError) as exc:
                self.log.take_offline(exc)
        if self.entity_index is not None:
            self.entity_index.close()
        if self.entities is not None:
            self.entities.close()
        self.log.close()
        self.closed = True
        self.is_leader = False
        self._wake_replicated()
        self._wake()
