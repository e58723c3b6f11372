"""Drop a PartitionLog as a killed process would, for recovery tests."""

from __future__ import annotations

import os

from eventplatform.log.replica.partition import Partition
from eventplatform.log.storage import PartitionLog


def crash(log: PartitionLog) -> None:
    """Release the log's descriptors, mappings and directory lock, and nothing else.

    No flush, no index trim, no checkpoint, no clean-shutdown marker: the files
    stay exactly as the page cache holds them, as after a kill -9. The kernel
    drops a dead process's locks, so the lock goes too.
    """
    segments = list(log.segments) + [segment for _, segment in log._pending_deletes]
    for segment in segments:
        for index in (segment.offset_index, segment.time_index):
            if index._map is not None:
                index._map.close()
            index._closed = True
        if segment.descriptor >= 0:
            os.close(segment.descriptor)
            segment.descriptor = -1
    os.close(log._lock_descriptor)
    log._closed = True


def crash_partition(partition: Partition) -> None:
    """:func:`crash` for a partition's log, and its entity state dropped as a kill drops
    it: the versions' database keeps what it last committed (the kernel releases its
    lock), the index's runs are unmapped, and nothing in memory is written."""
    crash(partition.log)
    if partition.entities is not None:
        partition.entities.close()
    if partition.entity_index is not None:
        partition.entity_index.close()
    partition.closed = True
