"""The leader-epoch cache of a partition: where each leader epoch's records start.

Entries ``(epoch, start_offset)`` grow in both. A leader appends an entry
when it writes the first record of a new epoch; a follower when it appends
the first batch of an epoch it has not seen. :meth:`EpochCache.end_offset_for`
answers OffsetForLeaderEpoch (KIP-101, KIP-279): for a requested epoch,
the largest epoch at most it that this log knows, and the offset where that
epoch ends (the next epoch's start, or the log end for the latest). A
follower truncates to that offset when it became a follower, instead of to
its high watermark, which is what lets a log diverge silently.

The cache lives in ``leader-epoch-checkpoint`` in the partition directory:
a version line, a count line, then ``epoch start_offset`` per line, as
Kafka writes it, replaced atomically on every change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eventplatform.log.invariants import require
from eventplatform.log.storage.files import write_atomically

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class EpochCacheError(Exception):
    """The checkpoint file is not readable; the log's batches can rebuild it."""


@dataclass(frozen=True)
class EpochEntry:
    epoch: int
    start_offset: int


class EpochCache:
    """See the module docstring. One owner: the partition."""

    def __init__(self, directory: Path | None, entries: list[EpochEntry] | None = None) -> None:
        self.directory = directory
        self.entries: list[EpochEntry] = list(entries or [])

    @classmethod
    def load(cls, directory: Path) -> EpochCache:
        path = directory / CHECKPOINT_FILE
        try:
            lines = path.read_text().split("\n")
        except FileNotFoundError:
            return cls(directory)
        try:
            version, count = int(lines[0]), int(lines[1])
            if version != CHECKPOINT_VERSION:
                raise ValueError(f"version {version}")
            pairs = [line.split() for line in lines[2 : 2 + count]]
            entries = [EpochEntry(int(epoch), int(start)) for epoch, start in pairs]
        except (ValueError, IndexError) as exc:
            raise EpochCacheError(f"{path} is unreadable: {exc}") from exc
        return cls(directory, entries)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Records of ``epoch`` start at ``start_offset`` (a no-op for the latest epoch)."""
        if self.entries and self.entries[-1].epoch == epoch:
            return
        require(
            not self.entries
            or (epoch > self.entries[-1].epoch and start_offset >= self.entries[-1].start_offset),
            f"epoch {epoch} at {start_offset} does not follow {self.entries[-1:]}",
        )
        self.entries.append(EpochEntry(epoch, start_offset))
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch', end_offset)``: the largest known epoch at most ``epoch`` and where it
        ends; ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)`` when every known epoch is later."""
        for number in range(len(self.entries) - 1, -1, -1):
            entry = self.entries[number]
            if entry.epoch <= epoch:
                following = self.entries[number + 1 : number + 2]
                end = following[0].start_offset if following else log_end_offset
                return entry.epoch, end
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET

    def truncation_offset(self, leader_epoch: int, leader_end: int, log_end_offset: int) -> int:
        """Where a follower truncates after the leader answered OffsetForLeaderEpoch for its
        latest epoch with ``(leader_epoch, leader_end)``: the smaller of the leader's end
        and this log's end for that epoch (KIP-279). When the answer names an earlier epoch
        than asked, the follower asks again after truncating, until they agree."""
        if leader_epoch == UNDEFINED_EPOCH:
            return 0
        _, own_end = self.end_offset_for(leader_epoch, log_end_offset)
        if own_end == UNDEFINED_OFFSET:
            return 0
        return min(leader_end, own_end, log_end_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: forget the epochs that start at or after."""
        kept = [entry for entry in self.entries if entry.start_offset < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch holding it starts there."""
        earlier = [entry for entry in self.entries if entry.start_offset <= start_offset]
        later = [entry for entry in self.entries if entry.start_offset > start_offset]
        if not earlier:
            return
        kept = [EpochEntry(earlier[-1].epoch, start_offset), *later]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def _save(self) -> None:
        if self.directory is None:
            return
        lines = [str(CHECKPOINT_VERSION), str(len(self.entries))]
        lines += [f"{entry.epoch} {entry.start_offset}" for entry in self.entries]
        write_atomically(self.directory / CHECKPOINT_FILE, ("\n".join(lines) + "\n").encode())
