"""What compaction needs of transactions: which batches belong to aborted ones.

The cleaner never reads past the log's first unstable offset (see
:attr:`PartitionLog.first_unstable_offset`), so every transactional batch it
cleans belongs to a transaction whose marker is in the log, and the transaction
indexes (:mod:`~eventplatform.log.storage.txn_index`) name the aborted ones.
With them, as Kafka's ``CleanedTransactionMetadata`` does, :class:`AbortedBatches`
walks the batches in offset order and tells which data batches an abort
dropped: their records never enter the offset map (so they are never kept as
a key's latest value, and never hide an older committed one) and the clean
removes them. Committed transactional records are ordinary records to it.

Markers are all kept, with their offsets, so a cleaned segment's transaction
index holds the same entries as the segments it replaces
(:func:`entries_of`). Kafka also removes a marker once its transaction's
records are gone and ``delete.retention.ms`` has passed since; this cleaner
does not (a marker costs one small batch, and its index entry 34 bytes).

The indexes are read on the compaction job's thread through descriptors
duplicated when the job was prepared (:func:`txn_views`), as the segments
are. Memory: the aborted transactions of the range being mapped, then of one
group being cleaned, are held while it is processed, as in Kafka.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from eventplatform.log.storage.record_batch import BatchHeader
from eventplatform.log.storage.txn_index import AbortedTransaction, read_entries

if TYPE_CHECKING:
    from eventplatform.log.storage.partition_log import PartitionLog


class TxnIndexView(NamedTuple):
    """One segment's transaction index as a job reads it: a duplicate descriptor and the
    size it had when the job was prepared."""

    base_offset: int
    next_offset: int
    descriptor: int
    size_bytes: int
    path: Path

    def entries(self) -> Iterable[AbortedTransaction]:
        return read_entries(self.descriptor, self.size_bytes, self.path)


def txn_views(log: PartitionLog) -> list[TxnIndexView]:
    """Every segment's transaction index that has entries, the active one's too (its
    markers may close transactions the closed segments hold), in offset order."""
    views = []
    for segment in log.segments:
        opened = segment.txn_index.open_for_reading()
        if opened is not None:
            descriptor, size = opened
            path = segment.txn_index.path
            views.append(
                TxnIndexView(segment.base_offset, segment.next_offset, descriptor, size, path)
            )
    return views


def close_txn_views(views: Sequence[TxnIndexView]) -> None:
    for view in views:
        os.close(view.descriptor)


def collect_aborted(
    views: Sequence[TxnIndexView], start_offset: int, upper_bound_offset: int
) -> list[AbortedTransaction]:
    """The aborted transactions with records in ``[start_offset, upper_bound_offset)``, as
    :meth:`PartitionLog.collect_aborted_transactions` finds them."""
    found = []
    for view in views:
        if view.next_offset <= start_offset:
            continue
        for entry in view.entries():
            if entry.last_offset >= start_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found
    return found


def entries_of(views: Sequence[TxnIndexView], base_offsets: set[int]) -> list[AbortedTransaction]:
    """The entries of the segments at ``base_offsets``, in marker order: the index of the
    segment that replaces them."""
    return [entry for view in views if view.base_offset in base_offsets for entry in view.entries()]


class AbortedBatches:
    """Tells, batch after batch in offset order, whether a data batch belongs to one of
    the ``aborted`` transactions (see the module docstring)."""

    def __init__(self, aborted: Iterable[AbortedTransaction]) -> None:
        self._waiting = deque(sorted(aborted, key=lambda entry: entry.first_offset))
        self._reading: set[int] = set()
        """The producers whose aborted transaction the walk is inside."""

    def is_aborted(self, header: BatchHeader) -> bool:
        """Whether the batch is aborted data; a marker ends its producer's transaction."""
        waiting = self._waiting
        while waiting and waiting[0].first_offset <= header.last_offset:
            self._reading.add(waiting.popleft().producer_id)
        if header.is_control:
            self._reading.discard(header.producer_id)
            return False
        return header.is_transactional and header.producer_id in self._reading
