"""Entity versions of a partition log on disk: the snapshot and the rebuild from the log.

``entity.versions`` in the partition directory holds the versions as of an offset
(:func:`~eventplatform.log.replica.entity_versions.encode_snapshot`). On open the state
is the snapshot, when it is whole and its offset lies within the log, plus the records
after it; otherwise a scan of the whole log. So nothing but the log itself needs to be
durable: after a crash, a torn tail or a truncation, the versions equal a count of the
records the log holds.
"""

from __future__ import annotations

from pathlib import Path

from eventplatform.log.replica.entity_versions import (
    EntityVersions,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
)
from eventplatform.log.storage import PartitionLog
from eventplatform.log.storage.files import write_atomically

SNAPSHOT_FILE = "entity.versions"


def load_entity_versions(directory: Path, log: PartitionLog) -> EntityVersions:
    """The versions of the records ``log`` holds (see the module docstring)."""
    versions, start = EntityVersions(), log.log_start_offset
    try:
        snapshot, offset = decode_snapshot((directory / SNAPSHOT_FILE).read_bytes())
    except (OSError, SnapshotError):
        pass
    else:
        if start <= offset <= log.log_end_offset:
            versions, start = snapshot, offset
    for batch in log.iter_batches(start, log.log_end_offset):
        if not batch.header.is_control:
            versions.apply(record.key for record in batch.records)
    return versions


def write_entity_snapshot(directory: Path, versions: EntityVersions, offset: int) -> None:
    """Keep ``versions``, the count of the log up to ``offset``, for the next open."""
    write_atomically(directory / SNAPSHOT_FILE, encode_snapshot(versions, offset))
