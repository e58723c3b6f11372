"""Entity versions and the entity index of a partition log on disk: open, recovery and
truncation.

``entity-versions.db`` in the partition directory holds the versions as of an offset
(:mod:`~eventplatform.log.replica.version_table`), and ``entity-index/`` the index's runs
(:mod:`~eventplatform.log.replica.entity_index`). On open the versions are the table,
when its offset lies within the log, plus the records after it, and the index is its
chain of runs plus the batches after it; otherwise a count of the whole log. One scan
of the log serves both. So nothing but the log itself needs to be durable: after a
crash, a torn tail or a truncation, both equal what a scan of the records the log holds
would build.

A partition whose topic does not keep entity versions keeps none of these files
(:func:`remove_entity_files`): they would be stale when the config is turned on again.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

from eventplatform.log.replica.entity_index import INDEX_DIRECTORY, EntityIndex
from eventplatform.log.replica.entity_versions import record_keys
from eventplatform.log.replica.version_table import VersionTable, remove_table_files
from eventplatform.log.storage import PartitionLog
from eventplatform.log.storage.partition_log import READ_CHUNK_BYTES
from eventplatform.log.storage.record_batch import BatchHeader, split_batches

OLD_SNAPSHOT_FILE = "entity.versions"
"""Where versions were kept before the table: removed when found."""

Keys = list[bytes | None]


def batch_keys(log: PartitionLog, from_offset: int) -> Iterator[tuple[BatchHeader, int, Keys]]:
    """Each data batch of ``log`` from ``from_offset`` to its end: its header, its position
    in its segment's file, and its records' keys (:func:`record_keys`)."""
    offset = max(from_offset, log.log_start_offset)
    while offset < log.log_end_offset:
        chunk = log.read(offset, READ_CHUNK_BYTES)
        if chunk is None:
            return
        data = chunk.read_bytes()
        headers = split_batches(data, check_crc=False)
        if not headers:
            return
        for header in headers:
            offset = header.next_offset
            if not header.is_control:
                keys = record_keys(data, header.position)
                yield header, chunk.position + header.position, keys


def load_entities(directory: Path, log: PartitionLog) -> tuple[VersionTable, EntityIndex]:
    """The versions and the index of the records ``log`` holds, from one scan."""
    (directory / OLD_SNAPSHOT_FILE).unlink(missing_ok=True)
    versions = VersionTable.open(directory)
    if not log.log_start_offset <= versions.end <= log.log_end_offset:
        versions.reset(log.log_start_offset)
    index = EntityIndex.open(directory, log.log_end_offset)
    for header, position, keys in batch_keys(log, min(versions.end, index.end)):
        if header.base_offset >= versions.end:
            versions.apply(keys, header.next_offset)
        if header.base_offset >= index.end:
            index.add(header.base_offset, header.last_offset, keys, position, header.size_bytes)
    return versions, index


def remove_entity_files(directory: Path) -> None:
    """Remove the versions and the index runs, when there are any."""
    (directory / OLD_SNAPSHOT_FILE).unlink(missing_ok=True)
    remove_table_files(directory)
    shutil.rmtree(directory / INDEX_DIRECTORY, ignore_errors=True)
