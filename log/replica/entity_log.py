"""Entity versions and the entity index of a partition log on disk: snapshots, runs, and
the rebuild from the log.

``entity.versions`` in the partition directory holds the versions as of an offset
(:func:`~eventplatform.log.replica.entity_versions.encode_snapshot`), and
``entity-index/`` the index's runs (:mod:`~eventplatform.log.replica.entity_index`). On
open the versions are the snapshot, when it is whole and its offset lies within the log,
plus the records after it, and the index is its chain of runs plus the batches after it;
otherwise a scan of the whole log. One scan of the log serves both. So nothing but the
log itself needs to be durable: after a crash, a torn tail or a truncation, both equal
what a scan of the records the log holds would build.

A partition whose topic does not keep entity versions keeps none of these files
(:func:`remove_entity_files`): they would be stale when the config is turned on again.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from eventplatform.log.replica.entity_index import INDEX_DIRECTORY, EntityIndex
from eventplatform.log.replica.entity_versions import (
    EntityVersions,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
)
from eventplatform.log.storage import PartitionLog
from eventplatform.log.storage.files import write_atomically
from eventplatform.log.storage.partition_log import READ_CHUNK_BYTES
from eventplatform.log.storage.record_batch import decode_record_set

SNAPSHOT_FILE = "entity.versions"


def load_entities(directory: Path, log: PartitionLog) -> tuple[EntityVersions, EntityIndex]:
    """The versions and the index of the records ``log`` holds, from one scan."""
    versions, versions_from = _snapshot_or_empty(directory, log)
    index = EntityIndex.open(directory, log.log_end_offset)
    offset = max(log.log_start_offset, min(versions_from, index.end))
    while offset < log.log_end_offset:
        chunk = log.read(offset, READ_CHUNK_BYTES)
        if chunk is None:
            break
        data = chunk.read_bytes()
        for batch in decode_record_set(data):
            header = batch.header
            offset = header.next_offset
            if header.is_control:
                continue
            keys = [record.key for record in batch.records]
            if header.base_offset >= versions_from:
                versions.apply(keys)
            if header.base_offset >= index.end:
                position = chunk.position + header.position
                index.add(header.base_offset, header.last_offset, keys, position, header.size_bytes)
    return versions, index


def _snapshot_or_empty(directory: Path, log: PartitionLog) -> tuple[EntityVersions, int]:
    """The snapshot and its offset when it is whole and within the log; else nothing,
    from the log start."""
    try:
        snapshot, offset = decode_snapshot((directory / SNAPSHOT_FILE).read_bytes())
    except (OSError, SnapshotError):
        return EntityVersions(), log.log_start_offset
    if log.log_start_offset <= offset <= log.log_end_offset:
        return snapshot, offset
    return EntityVersions(), log.log_start_offset


def write_entity_snapshot(directory: Path, versions: EntityVersions, offset: int) -> None:
    """Keep ``versions``, the count of the log up to ``offset``, for the next open."""
    write_atomically(directory / SNAPSHOT_FILE, encode_snapshot(versions, offset))


def remove_entity_files(directory: Path) -> None:
    """Remove the versions snapshot and the index runs, when there are any."""
    (directory / SNAPSHOT_FILE).unlink(missing_ok=True)
    shutil.rmtree(directory / INDEX_DIRECTORY, ignore_errors=True)
