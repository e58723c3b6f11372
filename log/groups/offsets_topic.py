"""``__consumer_offsets`` as the coordinator uses it: creation, appends and replay.

(``OffsetsTopic`` serves the transaction coordinator's ``__transaction_state`` the
same way, under that name.)

``OffsetsTopic`` creates the compacted internal topic when it is missing
(``offsets.topic.num.partitions`` partitions, ``cleanup.policy=compact``,
``segment.bytes=offsets.topic.segment.bytes``) and appends the records of
one group as one batch to the group's partition; it is the store's
``RecordSink``. On a cluster it appends as an acks=all producer does (refused
while the ISR is below ``min.insync.replicas``); inside :meth:`OffsetsTopic.receipts`
it also notes each append as an :class:`Unreplicated` receipt, and the
coordinator shell answers the request only once the ISR holds them, so a
commit a client was told of survives its leader.

``OffsetsReplay`` folds the records of the log, oldest first, into what each
group had at the end: the last metadata record and the last committed offset
of each partition, tombstones removing either.

Concurrency: the coordinator's trio thread is the only writer of the topic;
everything here runs on that thread.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from eventplatform.log.groups.records import (
    OFFSETS_TOPIC,
    CommittedOffset,
    GroupKey,
    GroupRecord,
    OffsetKey,
    RecordFormatError,
    ShareStateKey,
    TopicPartition,
    decode_group_value,
    decode_key,
    decode_offset_value,
    decode_share_state_value,
    partition_for,
)
from eventplatform.log.invariants import require
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.partition import ACKS_ALL, Partition
from eventplatform.log.replica.topics import Topic, TopicRegistry
from eventplatform.log.storage.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    DecodedBatch,
    Record,
    encode_batch,
)

log = logging.getLogger("eventplatform.groups")


@dataclass(frozen=True, slots=True)
class Unreplicated:
    """An append to a replicated partition that its ISR may not hold yet."""

    partition: Partition
    last_offset: int
    leader_epoch: int


class OffsetsTopic:
    """See the module docstring."""

    def __init__(
        self,
        topics: TopicRegistry,
        *,
        partitions: int,
        segment_bytes: int,
        clock_ms: Callable[[], int],
        name: str = OFFSETS_TOPIC,
    ) -> None:
        self.name = name
        self.topics = topics
        self.partitions_wanted = partitions
        self.segment_bytes = segment_bytes
        self.clock_ms = clock_ms
        self._receipts: list[Unreplicated] | None = None

    def ensure_created(self) -> Topic:
        """The topic, created with its configs on first start."""
        topic = self.topics.get(self.name)
        if topic is None:
            configs = {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes)}
            topic = self.topics.create(self.name, self.partitions_wanted, configs, internal=True)
            log.info("created %s with %d partitions", self.name, self.partitions_wanted)
        return topic

    def partitions(self) -> list[Partition]:
        topic = self.topics.get(self.name)
        if topic is None:
            return []
        held = [partition for partition in topic.partitions if partition is not None]
        # internal topics are never reassigned: every broker holds every partition
        require(len(held) == len(topic.partitions), f"a broker holds all of {self.name}")
        return held

    def partition_of(self, group_id: str) -> Partition | None:
        """The partition holding ``group_id``; the topic's real count decides, as in Kafka."""
        partitions = self.partitions()
        if not partitions:
            return None
        return partitions[partition_for(group_id, len(partitions))]

    def append(
        self,
        group_id: str,
        records: Sequence[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode:
        """Append ``records`` (key, value or None for a tombstone) as one batch; with
        ``producer`` (id, epoch), a transactional batch of that producer, which its
        transaction's marker commits or aborts."""
        partition = self.partition_of(group_id)
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        wall_ms = self.clock_ms()
        producer_id, producer_epoch = producer or (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        batch = encode_batch(
            [Record(index, wall_ms, key, value) for index, (key, value) in enumerate(records)],
            base_offset=0,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=producer is not None,
        )
        try:
            result = partition.append(batch, acks=ACKS_ALL)
        except OSError:
            # The disk failed under the log; the group keeps its state in memory.
            log.exception("append to %s-%d failed", self.name, partition.index)
            return ErrorCode.KAFKA_STORAGE_ERROR
        if result.error is not ErrorCode.NONE:
            log.warning(
                "append to %s-%d failed: %s %s",
                self.name,
                partition.index,
                result.error.name,
                result.message or "",
            )
        elif self._receipts is not None:
            epoch = partition.replication_epoch(result.last_offset)
            if epoch is not None:
                self._receipts.append(Unreplicated(partition, result.last_offset, epoch))
        return result.error

    @contextmanager
    def receipts(self) -> Iterator[list[Unreplicated]]:
        """Collects the appends to replicated partitions made inside the block."""
        collected: list[Unreplicated] = []
        self._receipts = collected
        try:
            yield collected
        finally:
            self._receipts = None


async def wait_replicated(appended: Sequence[Unreplicated], timeout_s: float) -> ErrorCode:
    """Until the ISR holds every append, within ``timeout_s``; the first error
    (leadership moved, the ISR shrank below its minimum, the time ran out)."""
    deadline = trio.current_time() + timeout_s
    for receipt in appended:
        error = await receipt.partition.wait_replicated(
            receipt.last_offset, receipt.leader_epoch, deadline
        )
        if error is not ErrorCode.NONE:
            return error
    return ErrorCode.NONE


@dataclass(slots=True)
class LoadedGroup:
    record: GroupRecord | None = None
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    pending_offsets: dict[int, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    """Offsets of transactions with no marker yet, by producer id."""
    share_states: dict[ShareStateKey, dict[str, Any]] = field(default_factory=dict)
    """Share-partition states, in WriteShareGroupState's layout."""


class OffsetsReplay:
    """Folds ``__consumer_offsets`` records into each group's latest state. Records of a
    transactional batch wait for their producer's marker: a commit applies them, an
    abort drops them; those still waiting at the end are pending transactional offsets."""

    def __init__(self) -> None:
        self._groups: dict[str, LoadedGroup] = {}
        self._transactional: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        self.skipped = 0

    def apply_batch(self, batch: DecodedBatch) -> None:
        header = batch.header
        if header.is_control:
            waiting = self._transactional.pop(header.producer_id, [])
            if batch.records and is_commit_marker(batch.records[0].key):
                for key, value in waiting:
                    self.apply(key, value)
            return
        if header.is_transactional:
            self._transactional.setdefault(header.producer_id, []).extend(
                (record.key, record.value) for record in batch.records
            )
            return
        for record in batch.records:
            self.apply(record.key, record.value)

    def _pending(self) -> None:
        """Note the offsets of transactions with no marker as their groups' pending ones."""
        for producer_id, waiting in self._transactional.items():
            for key, value in waiting:
                if key is None or value is None:
                    continue
                try:
                    decoded = decode_key(key)
                    if isinstance(decoded, OffsetKey):
                        entry = self._groups.setdefault(decoded.group_id, LoadedGroup())
                        pending = entry.pending_offsets.setdefault(producer_id, {})
                        partition = TopicPartition(decoded.topic, decoded.partition)
                        pending[partition] = decode_offset_value(value)
                except RecordFormatError as exc:
                    log.warning("skipping a %s record: %s", OFFSETS_TOPIC, exc)
        self._transactional.clear()

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one record; one that does not decode is counted and skipped."""
        if key is None:
            self.skipped += 1
            return
        try:
            decoded = decode_key(key)
            if isinstance(decoded, OffsetKey):
                self._apply_offset(decoded, value)
            elif isinstance(decoded, GroupKey):
                entry = self._groups.setdefault(decoded.group_id, LoadedGroup())
                entry.record = None if value is None else decode_group_value(value)
            elif isinstance(decoded, ShareStateKey):
                entry = self._groups.setdefault(decoded.group_id, LoadedGroup())
                if value is None:
                    entry.share_states.pop(decoded, None)
                else:
                    entry.share_states[decoded] = decode_share_state_value(value)
            else:
                self.skipped += 1
        except RecordFormatError as exc:
            log.warning("skipping a %s record: %s", OFFSETS_TOPIC, exc)
            self.skipped += 1

    def _apply_offset(self, key: OffsetKey, value: bytes | None) -> None:
        partition = TopicPartition(key.topic, key.partition)
        if value is None:
            entry = self._groups.get(key.group_id)
            if entry is not None:
                entry.offsets.pop(partition, None)
            return
        committed = decode_offset_value(value)
        self._groups.setdefault(key.group_id, LoadedGroup()).offsets[partition] = committed

    def groups(self) -> Iterator[tuple[str, LoadedGroup]]:
        """Every group that still has a metadata record or an offset (or offsets of a
        transaction not ended yet)."""
        self._pending()
        for group_id, entry in self._groups.items():
            if (
                entry.record is not None
                or entry.offsets
                or entry.share_states
                or entry.pending_offsets
            ):
                yield group_id, entry


COMMIT_MARKER = 1
_MARKER_KEY = struct.Struct(">hh")


def is_commit_marker(key: bytes | None) -> bool:
    """Whether a control record's key (int16 version, int16 type) is a COMMIT marker."""
    if key is None or len(key) < _MARKER_KEY.size:
        return False
    return bool(_MARKER_KEY.unpack_from(key)[1] == COMMIT_MARKER)
