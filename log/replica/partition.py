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

Consumers read below the high watermark only. With no transactions the last
stable offset equals it.

A storage error takes the partition's log offline (see
:mod:`eventplatform.log.storage.partition_log`): from then on produce, fetch,
ListOffsets and OffsetForLeaderEpoch answer ``KAFKA_STORAGE_ERROR`` for it,
until the broker restarts. The broker notices (:meth:`Broker.check_storage`)
and, on a cluster, moves its leaderships away.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from eventplatform.log.invariants import require
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.entity_index import EntityIndex
from eventplatform.log.replica.entity_log import batch_keys, load_entities, remove_entity_files
from eventplatform.log.replica.entity_versions import (
    VersionHeaderError,
    batch_conditions,
    record_keys,
)
from eventplatform.log.replica.erasures import ErasureLedger
from eventplatform.log.replica.isr import LeaderReplicas
from eventplatform.log.replica.producer_state import ProducerStates, Verdict, iter_headers
from eventplatform.log.replica.version_table import VersionTable
from eventplatform.log.storage import (
    BatchHeader,
    LogConfig,
    PartitionLog,
    SegmentSlice,
    StorageError,
)
from eventplatform.log.storage.errors import CorruptRecordError, RecordError
from eventplatform.log.storage.leader_epochs import UNDEFINED_EPOCH, EpochCache, EpochCacheError
from eventplatform.log.storage.partition_log import wall_clock_ms
from eventplatform.log.storage.record_batch import (
    HEADER_BYTES,
    parse_header,
    split_batches,
)

ACKS_ALL = -1
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class ReplicaSettings:
    """What a leader needs to judge its followers."""

    replica_lag_time_max_ms: int
    min_insync_replicas: int


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """One partition's produce outcome; ``record_errors`` names the refused records of a
    batch refused for some of its records (Produce v8+ answers them per record)."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None
    last_offset: int = -1
    record_errors: tuple[RecordError, ...] = ()

    @classmethod
    def refused(cls, exc: StorageError) -> ProduceResult:
        """The answer to a batch the log refused, with the records it named."""
        return cls(
            ErrorCode(exc.kafka_error_code), message=str(exc), record_errors=exc.record_errors
        )


def _holds(data: bytes, last_offset: int) -> bool:
    """Whether ``data`` is one whole batch whose last offset is ``last_offset``."""
    if len(data) < HEADER_BYTES:
        return False
    try:
        header = parse_header(data)
    except StorageError:
        return False
    return header.last_offset == last_offset and header.size_bytes == len(data)


def _invalid_record(message: str, record: int = 0) -> ProduceResult:
    """A batch refused whole for one of its records (INVALID_RECORD, named per record)."""
    return ProduceResult(
        ErrorCode.INVALID_RECORD, message=message, record_errors=(RecordError(record, message),)
    )


class Partition:
    """See the module docstring."""

    def __init__(self, topic: str, index: int, directory: Path, log: PartitionLog) -> None:
        self.topic = topic
        self.index = index
        self.directory = directory
        self.log = log
        self.leader_epoch = 0
        self.producers = ProducerStates.load(directory, log)
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
    def last_stable_offset(self) -> int:
        return self.high_watermark

    @property
    def readable_end(self) -> int:
        """Where reads of consumers stop: the high watermark, or before the first record
        an erasure committed for this partition has not yet emptied here."""
        return self._readable(self.high_watermark)

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
                    self.producers.update(header)
                self._apply_replicated_entities(record_set, appended.position)
            except OSError as exc:
                raise self.log.take_offline(exc) from exc
        self.follower_high_watermark = min(leader_high_watermark, self.log.log_end_offset)
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
        check = self.producers.check(header)
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
        stamped = header._replace(base_offset=info.base_offset)
        if info.append_time_ms >= 0:
            stamped = stamped._replace(max_timestamp=info.append_time_ms)
        self.producers.update(stamped)
        if self.log.active_segment.base_offset != active_base:
            try:
                self._write_snapshots()
            except OSError as exc:
                error = self.log.take_offline(exc)
                return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR, message=str(error))
        if self.replicas is not None and self.replicas.advance(self.log.log_end_offset):
            self._wake_replicated()
        self._wake()
        return ProduceResult(
            ErrorCode.NONE,
            info.base_offset,
            info.append_time_ms,
            info.log_start_offset,
            last_offset=info.last_offset,
        )

    # ------------------------------------------------------------ entity versions

    def _entity_versions(self) -> VersionTable | None:
        """The versions of this partition's entities when its topic keeps them, loaded on
        first use (at open, or when the topic's config turns them on)."""
        if not self.log.config.eventplatform_entity_versions_enable:
            if self.entities is not None:
                self._forget_entities()
        elif self.entities is None:
            self.entities, self.entity_index = load_entities(self.directory, self.log)
        return self.entities

    def _forget_entities(self) -> None:
        """The topic stopped keeping versions: drop them, on disk too (they would be stale
        if it kept them again, since nothing would follow the log meanwhile)."""
        if self.entity_index is not None:
            self.entity_index.close()
        if self.entities is not None:
            self.entities.close()
        self.entities = self.entity_index = None
        remove_entity_files(self.directory)

    def _check_entities(
        self, entities: VersionTable, buffer: bytes | bytearray | memoryview
    ) -> tuple[ProduceResult | None, list[bytes | None]]:
        """The refusal of a batch whose expected versions do not hold (INVALID_RECORD,
        naming the record), or None and the batch's keys, to count once it is appended."""
        try:
            conditions = batch_conditions(buffer)
        except VersionHeaderError as exc:
            return _invalid_record(str(exc), exc.record), []
        except CorruptRecordError as exc:  # records that do not frame: the CRC held
            return ProduceResult.refused(exc), []
        conflict = entities.check(conditions)
        if conflict is not None:
            return _invalid_record(conflict.message, conflict.record), []
        return None, [condition.key for condition in conditions]

    def _apply_replicated_entities(self, record_set: bytes, position: int) -> None:
        """Count and index the records a follower appended at ``position`` of its active
        segment, as the leader did."""
        entities = self._entity_versions()
        if entities is None:
            return
        assert self.entity_index is not None
        for header in split_batches(record_set, check_crc=False):
            if not header.is_control:
                keys = record_keys(record_set, header.position)
                entities.apply(keys, header.next_offset)
                self.entity_index.add(
                    header.base_offset,
                    header.last_offset,
                    keys,
                    position + header.position,
                    header.size_bytes,
                )

    def _take_back_entities(self, offset: int) -> None:
        """Before the log drops the records at ``offset`` and after: uncount them."""
        if self.entities is not None:
            batches = (
                (header.base_offset, keys) for header, _, keys in batch_keys(self.log, offset)
            )
            self.entities.take_back(batches, offset)

    def _truncate_entity_index(self) -> None:
        """After a truncation: forget the index entries past the new end (everything, when
        the log restarted past them)."""
        if self.entity_index is not None:
            end = self.log.log_end_offset
            if end < self.entity_index.end:
                self.entity_index.truncate(end)
            if self.log.log_start_offset >= self.entity_index.end:
                self.entity_index.reset(self.log.log_start_offset)

    def entity_batches(
        self, key: bytes, from_offset: int, max_bytes: int
    ) -> tuple[list[bytes], int]:
        """The batches below the high watermark that may hold records with ``key`` at
        ``from_offset`` or after, in offset order, whole, at most ``max_bytes`` of them
        (the first is returned whatever its size); and the offset to read on from, the
        high watermark once every such batch is in. Nothing when the topic keeps no
        entity versions. Each batch is read where the index says it lies, and checked to
        be the batch it names; one that is not (which would be a bug) is found through
        the offset index instead. Reads stop where consumers' do (:attr:`readable_end`)."""
        bound = self.readable_end
        if self._entity_versions() is None:
            return [], bound
        assert self.entity_index is not None
        start = max(from_offset, self.log.log_start_offset)
        found: list[bytes] = []
        total, found_last = 0, start - 1
        segments = self.log.segments
        for located in self.entity_index.batches_of(key, start):
            if located.last_offset >= bound:
                break
            if found and total + located.size > max_bytes:
                return found, found_last + 1
            segment = segments.floor(located.last_offset)
            data = b""
            if segment is not None and located.position + located.size <= segment.size_bytes:
                data = os.pread(segment.descriptor, located.size, located.position)
            if not _holds(data, located.last_offset):
                self.entity_index_misses += 1
                piece = self.log.read(max(start, located.last_offset), 0, max_offset=bound)
                if piece is None:
                    break
                data = piece.read_bytes()
            found.append(data)
            found_last = located.last_offset
            total += len(data)
        return found, bound

    def _write_snapshots(self) -> None:
        """The producer state, and the entity versions when kept, as of the log end."""
        end = self.log.log_end_offset
        self.producers.write_snapshot(self.directory, end)
        if self.entities is not None:
            self.entities.write()
            assert self.entity_index is not None
            self.entity_index.drop_before(self.log.log_start_offset)

    # ------------------------------------------------------------ fetch

    def read(self, offset: int, max_bytes: int) -> SegmentSlice | None:
        """Whole batches from ``offset`` below the high watermark; raises when out of range."""
        return self.log.read(offset, max_bytes, max_offset=self.readable_end)

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
            except OSError as exc:
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
