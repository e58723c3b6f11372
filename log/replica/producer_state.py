"""Idempotent-producer state of one partition: (producer id, epoch, sequences).

For every producer id the partition keeps its epoch and the metadata of its
last ``BATCHES_RETAINED`` batches (first and last sequence, first and last
offset), as Kafka does, so that a retried batch is recognised and answered
with its original offsets instead of being appended again.

Rules (Kafka's): a batch from an older epoch is fenced
(INVALID_PRODUCER_EPOCH); a new epoch must start at sequence 0 unless the
producer is unknown (its state may have gone with retention); within an epoch
the first sequence must follow the last one, wrapping after 2**31-1, or the
batch is OUT_OF_ORDER_SEQUENCE_NUMBER.

One exception to the last rule: a batch sent behind one this replica refused
with a retriable "not persisted" answer (NOT_ENOUGH_REPLICAS while the ISR was
small, NOT_LEADER_OR_FOLLOWER just before it became leader) gets that same
answer, not OUT_OF_ORDER_SEQUENCE_NUMBER. A client pipelines several batches
per partition; when the first is refused and the ISR grows or leadership
arrives before the next one is read, OUT_OF_ORDER would be true but harmful:
librdkafka answers it by bumping its producer epoch and renumbering every
unacknowledged message of every partition, and a message that was appended
but not yet acknowledged elsewhere (its answer lost with a killed leader) is
then written twice. With the refusal's answer both batches are retried in
order. The refused batch is remembered per producer (the earliest one of its
epoch, ``REFUSALS_RETAINED`` producers per partition) until a batch at or
past its sequence is appended.

Persistence: ``producer.snapshot`` in the partition directory holds the state
as of an offset; on open the state is rebuilt from the snapshot (if it is not
past the log end) plus the batch headers after it, so nothing but the log
itself needs to be durable. The state is owned by its partition; only the
partition's task calls it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import NamedTuple

import orjson

from eventplatform.log.storage import BatchHeader, OffsetOutOfRangeError, PartitionLog
from eventplatform.log.storage.files import write_atomically
from eventplatform.log.storage.record_batch import split_batches

BATCHES_RETAINED = 5
NO_PRODUCER_ID = -1
NO_EPOCH = -1
SEQUENCE_MAX = 2**31 - 1
SNAPSHOT_FILE = "producer.snapshot"
SNAPSHOT_VERSION = 1
SCAN_CHUNK_BYTES = 1024 * 1024
REFUSALS_RETAINED = 1024
"""How many producers' refused batches one partition remembers; the oldest goes first."""


class BatchMetadata(NamedTuple):
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    last_timestamp_ms: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_RETAINED))

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


class Refusal(NamedTuple):
    """A batch this replica refused with a retriable "not persisted" answer."""

    epoch: int
    first_sequence: int
    error: int
    """The error code it was answered with."""


class Verdict(Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    FENCED = "fenced"
    OUT_OF_ORDER = "out_of_order"
    BEHIND_REFUSED = "behind_refused"
    """Out of order only because the batch before it was refused here: answer the same."""


@dataclass(frozen=True, slots=True)
class Check:
    verdict: Verdict
    duplicate_of: BatchMetadata | None = None
    message: str = ""
    refusal: Refusal | None = None


_APPEND = Check(Verdict.APPEND)


def _in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == SEQUENCE_MAX)


def _last_sequence(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % (SEQUENCE_MAX + 1)


def _after(earlier: int, later: int) -> bool:
    """Whether sequence ``later`` comes after ``earlier``, across the wrap after 2**31-1."""
    return 0 < (later - earlier) % (SEQUENCE_MAX + 1) <= SEQUENCE_MAX // 2


class ProducerStates:
    """See the module docstring."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.refusals: dict[int, Refusal] = {}
        """producer id → the earliest batch of its epoch refused here; kept in memory only."""
        self.snapshot_offset = 0

    def check(self, header: BatchHeader) -> Check:
        """Decide what to do with a produced batch, before anything is appended."""
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID:
            return _APPEND
        entry = self.producers.get(producer_id)
        if entry is None:
            return _APPEND
        if header.producer_epoch < entry.epoch:
            return Check(
                Verdict.FENCED,
                message=f"epoch {header.producer_epoch} is older than {entry.epoch}",
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                return self._behind_refusal(header, 0) or Check(
                    Verdict.OUT_OF_ORDER,
                    message=f"new epoch {header.producer_epoch} starts at {header.base_sequence}",
                )
            return _APPEND
        last_sequence = _last_sequence(header)
        for batch in entry.batches:
            if (
                batch.first_sequence == header.base_sequence
                and batch.last_sequence == last_sequence
            ):
                return Check(Verdict.DUPLICATE, duplicate_of=batch)
        if entry.batches and not _in_sequence(entry.last_sequence, header.base_sequence):
            expected = (entry.last_sequence + 1) % (SEQUENCE_MAX + 1)
            return self._behind_refusal(header, expected) or Check(
                Verdict.OUT_OF_ORDER,
                message=f"expected sequence {expected}, got {header.base_sequence}",
            )
        return _APPEND

    def _behind_refusal(self, header: BatchHeader, expected: int) -> Check | None:
        """BEHIND_REFUSED when the batch this one skipped, at ``expected``, was refused here."""
        refusal = self.refusals.get(header.producer_id)
        if (
            refusal is None
            or refusal.epoch != header.producer_epoch
            or refusal.first_sequence != expected
            or not _after(expected, header.base_sequence)
        ):
            return None
        return Check(
            Verdict.BEHIND_REFUSED,
            message=f"the batch at sequence {expected}, before this one at "
            f"{header.base_sequence}, was refused and must be appended first",
            refusal=refusal,
        )

    def note_refused(self, header: BatchHeader, error: int) -> None:
        """Remember that the batch ``header`` was refused with the retriable ``error`` (see
        the module docstring). An earlier refused batch of the same epoch is kept: the
        client resends that one first."""
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID:
            return
        known = self.refusals.pop(producer_id, None)
        if (
            known is not None
            and known.epoch == header.producer_epoch
            and _after(known.first_sequence, header.base_sequence)
        ):
            self.refusals[producer_id] = known
            return
        self.refusals[producer_id] = Refusal(header.producer_epoch, header.base_sequence, error)
        if len(self.refusals) > REFUSALS_RETAINED:
            del self.refusals[next(iter(self.refusals))]

    def update(self, header: BatchHeader) -> None:
        """Record an appended (stamped) batch."""
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_epoch, header.max_timestamp)
            self.producers[producer_id] = entry
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, header.max_timestamp)
        refusal = self.refusals.get(producer_id)
        if refusal is not None and (
            header.producer_epoch > refusal.epoch
            or (
                header.producer_epoch == refusal.epoch
                and not _after(_last_sequence(header), refusal.first_sequence)
            )
        ):
            del self.refusals[producer_id]  # the refused batch, or one past it, is in
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                _last_sequence(header),
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            )
        )

    def expire(self, now_ms: int, expiration_ms: int) -> None:
        """Forget producers silent for longer than ``producer.id.expiration.ms``."""
        cutoff = now_ms - expiration_ms
        for producer_id in [
            key for key, entry in self.producers.items() if entry.last_timestamp_ms < cutoff
        ]:
            del self.producers[producer_id]
            self.refusals.pop(producer_id, None)

    # ------------------------------------------------------------ persistence

    @classmethod
    def load(cls, directory: Path, log: PartitionLog) -> ProducerStates:
        """Rebuild from the snapshot (when usable) and the batch headers after it."""
        states = cls()
        start = log.log_start_offset
        snapshot = _read_snapshot(directory / SNAPSHOT_FILE)
        if snapshot is not None and start <= snapshot.snapshot_offset <= log.log_end_offset:
            states = snapshot
            start = snapshot.snapshot_offset
        for header in iter_headers(log, start):
            states.update(header)
        states.snapshot_offset = log.log_end_offset
        return states

    def write_snapshot(self, directory: Path, offset: int) -> None:
        document = {
            "version": SNAPSHOT_VERSION,
            "offset": offset,
            "producers": [
                [
                    producer_id,
                    entry.epoch,
                    entry.last_timestamp_ms,
                    [list(b) for b in entry.batches],
                ]
                for producer_id, entry in self.producers.items()
            ],
        }
        write_atomically(directory / SNAPSHOT_FILE, orjson.dumps(document))
        self.snapshot_offset = offset


def _read_snapshot(path: Path) -> ProducerStates | None:
    """The snapshot at ``path``, or None when it is missing or unreadable (then rescan)."""
    try:
        document = orjson.loads(path.read_bytes())
        if document["version"] != SNAPSHOT_VERSION:
            return None
        states = ProducerStates()
        states.snapshot_offset = int(document["offset"])
        for producer_id, epoch, last_timestamp_ms, batches in document["producers"]:
            entry = ProducerEntry(int(epoch), int(last_timestamp_ms))
            entry.batches.extend(BatchMetadata(*map(int, batch)) for batch in batches)
            states.producers[int(producer_id)] = entry
        return states
    except (OSError, ValueError, KeyError, TypeError):
        return None


def iter_headers(log: PartitionLog, start_offset: int) -> Iterator[BatchHeader]:
    """Batch headers from ``start_offset`` to the log end, without decoding records."""
    offset = start_offset
    while True:
        try:
            found = log.read(offset, SCAN_CHUNK_BYTES)
        except OffsetOutOfRangeError:
            return
        if found is None:
            return
        headers = split_batches(found.read_bytes(), check_crc=False)
        if not headers:
            return
        for header in headers:
            if header.last_offset >= offset:
                yield header
        offset = headers[-1].next_offset
