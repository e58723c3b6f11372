"""A voter's durable state: the metadata log in the project's segment format, and the vote.

:class:`SegmentQuorumStorage` keeps the Raft log as a
:class:`~eventplatform.log.storage.partition_log.PartitionLog` in
``<directory>/log``: one single-record batch per entry, whose
``partitionLeaderEpoch`` is the entry's epoch and whose value is its payload.
So recovery after a crash is the partition log's own (CRC-checked batches,
indexes rebuilt, a torn tail truncated), and the tools that read partition
logs read the metadata log too. Every append and truncation is flushed
before it returns.

The epoch and the vote live in ``<directory>/quorum-state``, a small JSON
file replaced atomically (temporary file, ``fsync``, rename, directory
``fsync``).

Snapshots live beside it, one file each (:mod:`.snapshot_file`). Writing one
keeps the newest :data:`~.raft.SNAPSHOTS_KEPT`, moves the log start to the
oldest of them and deletes the segments wholly below it. On open, a ``.tmp``
left by a crash mid-write is removed, every snapshot is checked, and an
unreadable one is logged by name, renamed ``.corrupt`` and left out: an
older valid snapshot that the log still reaches from takes its place, and
with none the storage refuses to open (:class:`~.raft.SnapshotError`), as
the metadata before the log start would be lost. A snapshot past the log's
end (a crash while installing one from the leader) restarts the log there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from eventplatform.log.cluster import snapshot_file
from eventplatform.log.cluster.raft import (
    LOG_START,
    SNAPSHOTS_KEPT,
    Entry,
    SnapshotError,
    SnapshotId,
)
from eventplatform.log.invariants import require
from eventplatform.log.storage.config import LogConfig
from eventplatform.log.storage.files import TEMPORARY_SUFFIX, fsync_directory, write_atomically
from eventplatform.log.storage.partition_log import PartitionLog
from eventplatform.log.storage.record_batch import Record, encode_batch

log = logging.getLogger(__name__)

STATE_FILE = "quorum-state"
LOG_DIRECTORY = "log"
STATE_VERSION = 1
CORRUPT_SUFFIX = ".corrupt"
SEGMENT_BYTES_DEFAULT = 8 * 1024 * 1024
"""The metadata log's segment size: the log is deleted below a snapshot by whole
segments, so they are smaller than a topic's."""


class QuorumStateError(Exception):
    """The quorum-state file exists but cannot be read: refuse to start rather than vote
    twice."""


class SegmentQuorumStorage:
    """A :class:`~eventplatform.log.cluster.raft.QuorumStorage` on disk; see the module."""

    def __init__(self, directory: Path, *, segment_bytes: int = SEGMENT_BYTES_DEFAULT) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        config = LogConfig(segment_bytes=segment_bytes, file_delete_delay_ms=0)
        self._snapshots = self._check_snapshots()
        self.log = PartitionLog.open(directory / LOG_DIRECTORY, config)
        try:
            self._start = self._find_start()
        except SnapshotError:
            self.log.close()
            raise

    def close(self) -> None:
        self.log.close()

    def load_state(self) -> tuple[int, int | None]:
        path = self.directory / STATE_FILE
        try:
            document = json.loads(path.read_text())
            if document["version"] != STATE_VERSION:
                raise ValueError("unknown quorum-state version")
            return int(document["epoch"]), document["voted_for"]
        except FileNotFoundError:
            return 0, None
        except (ValueError, KeyError, TypeError) as exc:
            raise QuorumStateError(f"{path} is unreadable: {exc}") from exc

    def save_state(self, epoch: int, voted_for: int | None) -> None:
        document = {"version": STATE_VERSION, "epoch": epoch, "voted_for": voted_for}
        write_atomically(self.directory / STATE_FILE, json.dumps(document).encode())

    def log_start(self) -> SnapshotId:
        return self._start

    def entries(self) -> list[Entry]:
        return [
            Entry(batch.header.partition_leader_epoch, batch.records[0].value or b"")
            for batch in self.log.iter_batches(self._start.end_offset)
        ]

    def append(self, entries: Sequence[Entry]) -> None:
        """Append ``entries``, in record sets that each fit a segment, and flush."""
        offset = self.log.log_end_offset
        batches = bytearray()
        for number, entry in enumerate(entries):
            record = Record(offset + number, 0, None, entry.payload)
            batch = encode_batch([record], partition_leader_epoch=entry.epoch)
            if batches and len(batches) + len(batch) > self.log.config.segment_bytes:
                self.log.append_as_follower(batches)
                batches = bytearray()
            batches += batch
        if batches:
            self.log.append_as_follower(batches)
        if entries:
            self.log.flush()

    def truncate(self, end_offset: int) -> None:
        self.log.truncate_to(end_offset)
        self.log.flush()

    # ------------------------------------------------------------ snapshots

    def snapshots(self) -> list[SnapshotId]:
        return list(self._snapshots)

    def snapshot_path(self, snapshot: SnapshotId) -> Path:
        return self.directory / snapshot_file.file_name(snapshot)

    def read_snapshot(self, snapshot: SnapshotId) -> bytes:
        path = self.snapshot_path(snapshot)
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise SnapshotError(f"snapshot {path} cannot be read: {exc}") from exc
        return snapshot_file.decode(content, snapshot, str(path))

    def write_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        require(
            snapshot.end_offset <= self.log.log_end_offset,
            f"a snapshot at {snapshot.end_offset} past the log end {self.log.log_end_offset}",
        )
        write_atomically(self.snapshot_path(snapshot), snapshot_file.encode(snapshot, data))
        kept = sorted({*self._snapshots, snapshot})
        doomed, kept = kept[:-SNAPSHOTS_KEPT], kept[-SNAPSHOTS_KEPT:]
        self._snapshots = kept
        if kept[0].end_offset > self._start.end_offset:
            self._advance_start(kept[0])
        self._remove(doomed)

    def install_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        write_atomically(self.snapshot_path(snapshot), snapshot_file.encode(snapshot, data))
        self.log.truncate_fully_and_start_at(snapshot.end_offset)
        self.log.flush()
        self.log.delete_expired_files(force=True)
        doomed = [old for old in self._snapshots if old != snapshot]
        self._snapshots, self._start = [snapshot], snapshot
        self._remove(doomed)

    def _advance_start(self, start: SnapshotId) -> None:
        """Start the log at ``start`` and delete the segments wholly below it."""
        self.log.advance_log_start_offset(start.end_offset)
        doomed = []
        for segment in self.log.segments:
            if segment is self.log.active_segment or segment.next_offset > start.end_offset:
                break
            doomed.append(segment)
        if doomed:
            self.log.delete_segments(doomed)
        self.log.delete_expired_files(force=True)
        self._start = start

    def _remove(self, doomed: Sequence[SnapshotId]) -> None:
        for snapshot in doomed:
            self.snapshot_path(snapshot).unlink(missing_ok=True)
        if doomed:
            fsync_directory(self.directory)

    def _check_snapshots(self) -> list[SnapshotId]:
        """The readable snapshots, oldest first; removes what a crash mid-write left, and
        sets aside (``.corrupt``) what cannot be read."""
        valid = []
        for path in sorted(self.directory.iterdir()):
            if path.name.endswith(snapshot_file.SUFFIX + TEMPORARY_SUFFIX):
                log.warning("removing %s: a snapshot whose writing did not finish", path)
                path.unlink()
                continue
            snapshot = snapshot_file.parse_file_name(path.name)
            if snapshot is None:
                continue
            try:
                self.read_snapshot(snapshot)
            except SnapshotError as exc:
                log.error("%s; setting it aside as %s", exc, path.name + CORRUPT_SUFFIX)
                path.replace(path.with_name(path.name + CORRUPT_SUFFIX))
                continue
            valid.append(snapshot)
        return valid

    def _find_start(self) -> SnapshotId:
        """Where the log starts, by the snapshots that are readable (see the module)."""
        log_start = self.log.log_start_offset
        newest = self._snapshots[-1] if self._snapshots else None
        if newest is not None and newest.end_offset > self.log.log_end_offset:
            log.warning("the log ends before snapshot %s: restarting it there", newest)
            self.log.truncate_fully_and_start_at(newest.end_offset)
            self.log.flush()
            self._remove(self._snapshots[:-1])
            self._snapshots = [newest]
            return newest
        if log_start == 0:
            return LOG_START
        reaching = [s for s in self._snapshots if s.end_offset >= log_start]
        if not reaching:
            raise SnapshotError(
                f"the metadata log in {self.directory} starts at offset {log_start} and no "
                f"readable snapshot covers what lies before it (see the .corrupt files there)"
            )
        start = reaching[0]
        if start.end_offset > log_start:
            self.log.advance_log_start_offset(start.end_offset)
        return start
