"""Producer state of one partition: idempotence (producer id, epoch, sequences) and
transactions (KIP-98).

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

Batches without a sequence (base sequence -1: transaction markers, and the
transactional offset commits the group coordinator writes) are checked for
their epoch only (``check(..., sequenced=False)``) and leave the sequences
alone; a client's batch always has one (the produce handler refuses it
otherwise, as Kafka's validator does).

Transactions, as Kafka's ``ProducerStateManager`` keeps them: a transactional
data batch (attribute bit 4) from a producer with no open transaction opens one
at its base offset; the producer's next marker (a control batch, see
:mod:`~eventplatform.log.storage.control_records`) closes it. An ABORT marker
that closes one yields its aborted-index entry (producer, first offset, the
marker's offset, and the last stable offset then: the first offset of the
earliest other open transaction, or the marker's offset + 1), which the
partition adds to the marker's segment's transaction index
(:mod:`~eventplatform.log.storage.txn_index`). A marker for a producer with no
open transaction changes its epochs only. A marker may carry a newer producer
epoch than the producer's (its coordinator bumped it): that becomes the
producer's epoch, with no sequence yet, so its next batch starts at sequence 0
and a batch of an older epoch is fenced. A non-transactional batch from a
producer whose transaction is open is INVALID_TXN_STATE. A leader refuses a
marker of an older producer epoch (INVALID_PRODUCER_EPOCH) or of an older
coordinator epoch than the last marker's (TRANSACTION_COORDINATOR_FENCED);
replicas and recovery apply whatever the log holds.

The first unstable offset is the first offset of the earliest open
transaction, or of a closed one whose marker the high watermark has not
passed yet (Kafka's unreplicated transactions: should the leader fail before
its followers have the marker, the transaction is open again on the next one).
The partition's last stable offset is the smaller of it and the high watermark.

Memory: per producer its entry (``BATCHES_RETAINED`` batches, its epochs and its
open transaction's first offset, so at most one open transaction each), and the
markers between the high watermark and the log end (after a rescan, those it met,
until the partition next learns its high watermark). Producers with an open
transaction never expire. The aborted transactions live in the segments'
transaction indexes, on disk, not here.

Persistence: ``producer.snapshot`` in the partition directory holds the state
as of an offset, open transactions included (JSON, version 2; version 1, from
before transactions, is still read). On open the state is rebuilt from the
snapshot (if it is not past the log end) plus the batches after it: their
headers, and the record of each control batch. The entries of the abort
markers after the snapshot are checked against the transaction indexes at the
same time and rewritten where they differ (:class:`_IndexRebuild`): those indexes
are written without an fsync, and a crash may have left an entry out or one of
a marker the log lost. The partition fsyncs the indexes before it writes a
snapshot, so the entries before one are durable. Nothing else needs to be. The
state is owned by its partition; only the partition's task calls it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import NamedTuple

import orjson

from eventplatform.log.storage import BatchHeader, OffsetOutOfRangeError, PartitionLog
from eventplatform.log.storage.control_records import TransactionMarker, read_marker
from eventplatform.log.storage.errors import CorruptRecordError
from eventplatform.log.storage.files import write_atomically
from eventplatform.log.storage.record_batch import NO_SEQUENCE, split_batches
from eventplatform.log.storage.segment import Segment
from eventplatform.log.storage.txn_index import AbortedTransaction

logger = logging.getLogger(__name__)

BATCHES_RETAINED = 5
NO_PRODUCER_ID = -1
NO_EPOCH = -1
NO_OFFSET = -1
SEQUENCE_MAX = 2**31 - 1
SNAPSHOT_FILE = "producer.snapshot"
SNAPSHOT_VERSION = 2
SNAPSHOT_VERSIONS_READ = (1, 2)
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
    coordinator_epoch: int = NO_EPOCH
    """The coordinator epoch of the producer's last marker."""
    transaction_first_offset: int = NO_OFFSET
    """Where the producer's open transaction began; NO_OFFSET when none is open."""

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
    INVALID_TXN_STATE = "invalid_txn_state"
    """A non-transactional batch from a producer whose transaction is open."""
    COORDINATOR_FENCED = "coordinator_fenced"
    """A marker from an older transaction coordinator than the last marker's."""


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
        self.ongoing: OrderedDict[int, int] = OrderedDict()
        """producer id → the first offset of its open transaction, in first-offset order."""
        self.unreplicated: OrderedDict[int, int] = OrderedDict()
        """The marker offset → the first offset of each closed transaction whose marker the
        high watermark has not passed yet, in marker order."""
        self.snapshot_offset = 0

    def check(self, header: BatchHeader, *, sequenced: bool = True) -> Check:
        """Decide what to do with a produced batch, before anything is appended. Without
        ``sequenced`` (a coordinator's batch, which carries no sequence) only the epoch and
        the transaction are checked, as Kafka checks appends of coordinator origin."""
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
        if sequenced:
            refused = self._check_sequence(header, entry)
            if refused is not None:
                return refused
        if entry.transaction_first_offset != NO_OFFSET and not header.is_transactional:
            return Check(
                Verdict.INVALID_TXN_STATE,
                message=f"producer {producer_id} has a transaction open since offset "
                f"{entry.transaction_first_offset}: its batches must be transactional",
            )
        return _APPEND

    def _check_sequence(self, header: BatchHeader, entry: ProducerEntry) -> Check | None:
        """A duplicate or out-of-order verdict for a batch of a known producer, or None."""
        if header.producer_epoch > entry.epoch or not entry.batches:
            # a new epoch, or the one a marker brought: it has no sequence yet
            if header.base_sequence != 0:
                return self._behind_refusal(header, 0) or Check(
                    Verdict.OUT_OF_ORDER,
                    message=f"epoch {header.producer_epoch} starts at {header.base_sequence}",
                )
            return None
        last_sequence = _last_sequence(header)
        for batch in entry.batches:
            if (
                batch.first_sequence == header.base_sequence
                and batch.last_sequence == last_sequence
            ):
                return Check(Verdict.DUPLICATE, duplicate_of=batch)
        if not _in_sequence(entry.last_sequence, header.base_sequence):
            expected = (entry.last_sequence + 1) % (SEQUENCE_MAX + 1)
            return self._behind_refusal(header, expected) or Check(
                Verdict.OUT_OF_ORDER,
                message=f"expected sequence {expected}, got {header.base_sequence}",
            )
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> Check:
        """Whether a leader may write a marker of ``producer_id`` (see the module docstring)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return _APPEND
        if producer_epoch < entry.epoch:
            return Check(
                Verdict.FENCED, message=f"epoch {producer_epoch} is older than {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            return Check(
                Verdict.COORDINATOR_FENCED,
                message=f"coordinator epoch {coordinator_epoch} is older than "
                f"{entry.coordinator_epoch}",
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
        """Record an appended (stamped) data batch."""
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self._entry_at(producer_id, header.producer_epoch, header.max_timestamp)
        if header.base_sequence != NO_SEQUENCE:
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
        if header.is_transactional and entry.transaction_first_offset == NO_OFFSET:
            entry.transaction_first_offset = header.base_offset
            self.ongoing[producer_id] = header.base_offset

    def complete(self, header: BatchHeader, marker: TransactionMarker) -> AbortedTransaction | None:
        """Record an appended (stamped) marker; the aborted-index entry it makes, if any
        (an ABORT that closes a transaction)."""
        producer_id = header.producer_id
        entry = self._entry_at(producer_id, header.producer_epoch, header.max_timestamp)
        entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
        first_offset = entry.transaction_first_offset
        if first_offset == NO_OFFSET:
            return None
        entry.transaction_first_offset = NO_OFFSET
        del self.ongoing[producer_id]
        self.unreplicated[header.base_offset] = first_offset
        if marker.commit:
            return None
        stable = next(iter(self.ongoing.values()), header.base_offset + 1)
        return AbortedTransaction(producer_id, first_offset, header.base_offset, stable)

    def _entry_at(self, producer_id: int, epoch: int, timestamp_ms: int) -> ProducerEntry:
        """The producer's entry, at ``epoch`` if that is newer (its sequences start over)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(epoch, timestamp_ms)
            self.producers[producer_id] = entry
        elif epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.last_timestamp_ms = max(entry.last_timestamp_ms, timestamp_ms)
        return entry

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """The first offset of the earliest transaction that is open, or whose marker is
        at or past ``high_watermark`` (markers below it are forgotten); None when none is."""
        if high_watermark is not None:
            self.forget_replicated(high_watermark)
        first = next(iter(self.ongoing.values()), None)
        if self.unreplicated:
            earliest = min(self.unreplicated.values())
            first = earliest if first is None else min(first, earliest)
        return first

    def forget_replicated(self, high_watermark: int) -> None:
        """The high watermark moved to ``high_watermark``: the markers below are replicated."""
        unreplicated = self.unreplicated
        while unreplicated and next(iter(unreplicated)) < high_watermark:
            unreplicated.popitem(last=False)

    def expire(self, now_ms: int, expiration_ms: int) -> None:
        """Forget producers silent for longer than ``producer.id.expiration.ms``, unless
        their transaction is open."""
        cutoff = now_ms - expiration_ms
        for producer_id in [
            key
            for key, entry in self.producers.items()
            if entry.last_timestamp_ms < cutoff and entry.transaction_first_offset == NO_OFFSET
        ]:
            del self.producers[producer_id]
            self.refusals.pop(producer_id, None)

    # ------------------------------------------------------------ persistence

    @classmethod
    def load(cls, directory: Path, log: PartitionLog) -> ProducerStates:
        """Rebuild from the snapshot (when usable) and the batches after it, bringing the
        transaction indexes of those batches' segments in line (see the module docstring)."""
        states = cls()
        start = log.log_start_offset
        snapshot = _read_snapshot(directory / SNAPSHOT_FILE)
        if snapshot is not None and start <= snapshot.snapshot_offset <= log.log_end_offset:
            states = snapshot
            start = snapshot.snapshot_offset
        rebuild = _IndexRebuild(log, start)
        for header, marker in iter_batches(log, start):
            if not header.is_control:
                states.update(header)
            elif marker is not None:
                rebuild.add(header, marker, states.complete(header, marker))
        rebuild.finish()
        states.snapshot_offset = log.log_end_offset
        return states

    def write_snapshot(self, directory: Path, offset: int) -> None:
        """Write the state as of ``offset``; the caller has made the transaction indexes
        before ``offset`` durable."""
        document = {
            "version": SNAPSHOT_VERSION,
            "offset": offset,
            "producers": [
                [
                    producer_id,
                    entry.epoch,
                    entry.last_timestamp_ms,
                    [list(b) for b in entry.batches],
                    entry.coordinator_epoch,
                    entry.transaction_first_offset,
                ]
                for producer_id, entry in self.producers.items()
            ],
        }
        write_atomically(directory / SNAPSHOT_FILE, orjson.dumps(document))
        self.snapshot_offset = offset


def _read_snapshot(path: Path) -> ProducerStates | None:
    """The snapshot at ``path``, or None when it is missing or unreadable (then rescan).
    A version 1 snapshot has no transaction fields: it comes from before transactions."""
    try:
        document = orjson.loads(path.read_bytes())
        version = document["version"]
        if version not in SNAPSHOT_VERSIONS_READ:
            return None
        states = ProducerStates()
        states.snapshot_offset = int(document["offset"])
        for fields in document["producers"]:
            if version == 1:
                producer_id, epoch, last_timestamp_ms, batches = fields
                coordinator_epoch, first_offset = NO_EPOCH, NO_OFFSET
            else:
                producer_id, epoch, last_timestamp_ms, batches, coordinator_epoch, first_offset = (
                    fields
                )
            entry = ProducerEntry(int(epoch), int(last_timestamp_ms))
            entry.batches.extend(BatchMetadata(*map(int, batch)) for batch in batches)
            entry.coordinator_epoch = int(coordinator_epoch)
            entry.transaction_first_offset = int(first_offset)
            states.producers[int(producer_id)] = entry
        open_transactions = sorted(
            (entry.transaction_first_offset, producer_id)
            for producer_id, entry in states.producers.items()
            if entry.transaction_first_offset != NO_OFFSET
        )
        for first_offset, producer_id in open_transactions:
            states.ongoing[producer_id] = first_offset
        return states
    except (OSError, ValueError, KeyError, TypeError):
        return None


class _IndexRebuild:
    """Makes the transaction index of each segment from ``start`` on hold exactly the
    entries of the abort markers the rescan met there, one segment at a time.

    A rescan that starts inside a transaction (no snapshot was usable, and retention
    removed the transaction's first batches) cannot see where it began: for its abort the
    index's own entry for that marker and producer stands, when the index has one that
    begins earlier (or the rescan found no open transaction at all). Entries before
    ``start`` are left alone; an index is rewritten only when it differs.
    """

    def __init__(self, log: PartitionLog, start: int) -> None:
        self.log = log
        self.start = start
        self.segment: Segment | None = None
        self.wanted: list[AbortedTransaction | tuple[int, int]] = []
        """This segment's entries, and the (marker offset, producer) of unexplained aborts."""
        self.visited: set[int] = set()

    def add(
        self, header: BatchHeader, marker: TransactionMarker, entry: AbortedTransaction | None
    ) -> None:
        segment = self.log.segments.floor(header.base_offset)
        if segment is not self.segment:
            self._settle()
            self.segment = segment
        if entry is not None:
            self.wanted.append(entry)
        elif not marker.commit:
            self.wanted.append((header.base_offset, header.producer_id))

    def finish(self) -> None:
        self._settle()
        for segment in self.log.segments.from_offset(self.start):
            if (
                segment.base_offset not in self.visited
                and segment.txn_index.last_offset >= self.start
            ):
                self.segment = segment
                self._settle()

    def _settle(self) -> None:
        segment = self.segment
        if segment is None:
            return
        self.visited.add(segment.base_offset)
        index = segment.txn_index
        held = [entry for entry in index.entries() if entry.last_offset >= self.start]
        by_marker = {entry.last_offset: entry for entry in held}
        entries = [
            entry for wanted in self.wanted if (entry := _reconciled(wanted, by_marker)) is not None
        ]
        if entries != held:
            logger.info(
                "%s: %d aborted transactions from offset %d rebuilt from the log",
                index.path,
                len(entries),
                self.start,
            )
            index.truncate_to(self.start)
            index.append_all(entries)
        self.segment = None
        self.wanted = []


def _reconciled(
    wanted: AbortedTransaction | tuple[int, int], held: dict[int, AbortedTransaction]
) -> AbortedTransaction | None:
    """The entry of one abort the rescan met: its own, unless the index ``held`` one for
    that marker and producer that begins earlier, or the rescan found nothing open."""
    if isinstance(wanted, AbortedTransaction):
        found: AbortedTransaction | None = wanted
        marker_offset, producer_id = wanted.last_offset, wanted.producer_id
    else:
        found = None
        marker_offset, producer_id = wanted
    kept = held.get(marker_offset)
    if kept is None or kept.producer_id != producer_id:
        return found
    if found is None or kept.first_offset < found.first_offset:
        return kept
    return found


def _chunks(log: PartitionLog, start_offset: int) -> Iterator[tuple[bytes, list[BatchHeader]]]:
    """The log from ``start_offset`` to its end as chunks of whole batches and their headers
    (positions relative to the chunk), without decoding records."""
    offset = start_offset
    while True:
        try:
            found = log.read(offset, SCAN_CHUNK_BYTES)
        except OffsetOutOfRangeError:
            return
        if found is None:
            return
        chunk = found.read_bytes()
        headers = split_batches(chunk, check_crc=False)
        if not headers:
            return
        yield chunk, [header for header in headers if header.last_offset >= offset]
        offset = headers[-1].next_offset


def iter_headers(log: PartitionLog, start_offset: int) -> Iterator[BatchHeader]:
    """Batch headers from ``start_offset`` to the log end, without decoding records."""
    for _, headers in _chunks(log, start_offset):
        yield from headers


def iter_batches(
    log: PartitionLog, start_offset: int
) -> Iterator[tuple[BatchHeader, TransactionMarker | None]]:
    """Batch headers from ``start_offset`` to the log end, each control batch with the
    transaction marker it carries (the only records read)."""
    for chunk, headers in _chunks(log, start_offset):
        for header in headers:
            yield header, marker_of(chunk, header) if header.is_control else None


def marker_of(
    buffer: bytes | bytearray | memoryview, header: BatchHeader
) -> TransactionMarker | None:
    """The marker of the control batch at ``header``; None, with a warning, for one whose
    record does not parse (the log holds it: it is skipped, not refused)."""
    try:
        return read_marker(buffer, header)
    except CorruptRecordError as exc:
        logger.warning("the control batch at offset %d is skipped: %s", header.base_offset, exc)
        return None
