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
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from eventplatform.log.cluster.raft import Entry
from eventplatform.log.invariants import require
from eventplatform.log.storage.files import write_atomically
from eventplatform.log.storage.partition_log import PartitionLog
from eventplatform.log.storage.record_batch import Record, encode_batch

STATE_FILE = "quorum-state"
LOG_DIRECTORY = "log"
STATE_VERSION = 1


class QuorumStateError(Exception):
    """The quorum-state file exists but cannot be read: refuse to start rather than vote
    twice."""


class SegmentQuorumStorage:
    """A :class:`~eventplatform.log.cluster.raft.QuorumStorage` on disk; see the module."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.log = PartitionLog.open(directory / LOG_DIRECTORY)

    def close(self) -> None:
        self.log.close()

    def load_state(self) -> tuple[int, int | None]:
        path = self.directory / STATE_FILE
        try:
            document = json.loads(path.read_text())
            require(document["version"] == STATE_VERSION, "unknown quorum-state version")
            return int(document["epoch"]), document["voted_for"]
        except FileNotFoundError:
            return 0, None
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            raise QuorumStateError(f"{path} is unreadable: {exc}") from exc

    def save_state(self, epoch: int, voted_for: int | None) -> None:
        document = {"version": STATE_VERSION, "epoch": epoch, "voted_for": voted_for}
        write_atomically(self.directory / STATE_FILE, json.dumps(document).encode())

    def entries(self) -> list[Entry]:
        return [
            Entry(batch.header.partition_leader_epoch, batch.records[0].value or b"")
            for batch in self.log.iter_batches()
        ]

    def append(self, entries: Sequence[Entry]) -> None:
        offset = self.log.log_end_offset
        batches = bytearray()
        for number, entry in enumerate(entries):
            record = Record(offset + number, 0, None, entry.payload)
            batches += encode_batch([record], partition_leader_epoch=entry.epoch)
        if batches:
            self.log.append_as_follower(batches)
            self.log.flush()

    def truncate(self, end_offset: int) -> None:
        self.log.truncate_to(end_offset)
        self.log.flush()
