"""LogLoader: bring a partition directory to a consistent state on open.

Steps, each idempotent so a crash during recovery is itself recoverable:

1. Remove leftovers: ``*.tmp``, ``*.cleaned`` (an unfinished clean) and
   ``*.deleted`` (a finished clean or retention whose unlink did not happen).
   A ``<base>.txnindex.swap`` with no ``.log.swap`` beside it is the transaction
   index of a swap whose log was installed already (a segment moves it into
   ``.swap`` before its log and out of it after, see :meth:`Segment.rename`):
   it is installed too, unless a ``<base>.log.cleaned`` shows the swap was
   still being made, and then it goes with the other leftovers.
2. Finish interrupted swaps: a ``<base>.log.swap`` is a complete, fsynced
   replacement. Every regular segment whose base offset lies in
   ``[base, swap's next offset)`` is deleted and the swap takes the plain name,
   with its transaction index. Its offset and time indexes are rebuilt, since
   their renames may not all have happened (the transaction index cannot be
   rebuilt from the segment alone, so it is always renamed in step).
3. Open the regular segments in base-offset order; index files (transaction
   indexes too) without a log are removed.
4. With a clean-shutdown marker, trust the indexes after a sanity check and
   a framing scan of each segment's tail. Without one, re-check every batch from
   the segment holding the recovery point by CRC, truncate at the first bad
   byte, rebuild the indexes, and delete every later segment. A checked segment
   that ends before the next one begins lost writes the next one kept (files
   reach the disk in any order); outside compacted logs every later segment
   is deleted then too.

Called only by :meth:`PartitionLog.open`, before anyone else sees the directory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from eventplatform.log.storage.config import LogConfig
from eventplatform.log.storage.errors import CorruptRecordError
from eventplatform.log.storage.files import (
    CLEAN_SHUTDOWN_FILE,
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TEMPORARY_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    fsync_directory,
    parse_base_offset,
    read_checkpoint,
    segment_path,
)
from eventplatform.log.storage.segment import Segment
from eventplatform.log.storage.segment_map import SegmentMap

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class LoadedLog:
    segments: SegmentMap
    log_start_offset: int
    recovery_point: int
    cleaner_offset: int
    was_clean: bool
    truncated_bytes: int


class LogLoader:
    def __init__(self, directory: Path, config: LogConfig) -> None:
        self.directory = directory
        self.config = config

    def load(self, *, sync_directory: bool = True) -> LoadedLog:
        """Open the segments, recovering them unless the log was closed cleanly.

        ``sync_directory=False`` leaves the fsync of the directory to the caller: a new
        log's first flush covers its first segment's entries."""
        self.directory.mkdir(parents=True, exist_ok=True)
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        was_clean = marker.exists()
        try:
            checkpoint = read_checkpoint(self.directory)
        except CorruptRecordError as exc:
            logger.warning("%s; recovering the whole log", exc)
            checkpoint, was_clean = None, False
        if checkpoint is None:
            checkpoint = {"log_start_offset": 0, "recovery_point": 0, "cleaner_offset": 0}
        self._remove_leftovers()
        self._finish_swaps()
        segments = self._open_segments()
        truncated = 0
        recovery_point = checkpoint["recovery_point"]
        if was_clean:
            truncated = self._load_clean(segments)
        else:
            truncated = self._recover(segments, recovery_point)
        if not len(segments):
            start = checkpoint["log_start_offset"]
            segment = Segment.open(self.directory, start, self.config)
            segment.next_offset = start
            segments.add(segment)
        log_end = segments.last.next_offset
        log_start = min(max(checkpoint["log_start_offset"], segments.first.base_offset), log_end)
        # The marker goes only after recovery, so a crash during recovery recovers again.
        marker.unlink(missing_ok=True)
        if sync_directory:
            fsync_directory(self.directory)
        return LoadedLog(
            segments=segments,
            log_start_offset=log_start,
            # After a crash the recovered tail may live only in the page cache: keep
            # the old recovery point so a later power loss is still caught.
            recovery_point=min(recovery_point, log_end),
            cleaner_offset=min(max(checkpoint["cleaner_offset"], log_start), log_end),
            was_clean=was_clean,
            truncated_bytes=truncated,
        )

    def _remove_leftovers(self) -> None:
        self._install_orphan_txn_swaps()
        for path in self.directory.iterdir():
            name = path.name
            if name.endswith((TEMPORARY_SUFFIX, CLEANED_SUFFIX, DELETED_SUFFIX)):
                logger.info("removing leftover %s", path)
                path.unlink(missing_ok=True)
            elif name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                # An index swap whose log swap is already installed: indexes are rebuilt.
                base = parse_base_offset(name)
                log_swap = (
                    base is not None
                    and segment_path(self.directory, base, LOG_SUFFIX, SWAP_SUFFIX).exists()
                )
                if not log_swap:
                    path.unlink(missing_ok=True)

    def _install_orphan_txn_swaps(self) -> None:
        """A ``.txnindex.swap`` whose ``.log.swap`` is gone belongs to the installed log (see
        step 1 of the module docstring); one whose log is still ``.cleaned`` does not."""
        suffix = TXN_INDEX_SUFFIX + SWAP_SUFFIX
        for path in list(self.directory.iterdir()):
            base = parse_base_offset(path.name)
            if base is None or not path.name.endswith(suffix):
                continue
            if segment_path(self.directory, base, LOG_SUFFIX, SWAP_SUFFIX).exists():
                continue  # the swap is finished below, this file with it
            if segment_path(self.directory, base, LOG_SUFFIX, CLEANED_SUFFIX).exists():
                path.unlink()
                continue
            logger.info("installing %s, the rest of its swap being in place", path.name)
            path.rename(segment_path(self.directory, base, TXN_INDEX_SUFFIX))

    def _finish_swaps(self) -> None:
        swaps = sorted(
            base
            for path in self.directory.iterdir()
            if path.name.endswith(LOG_SUFFIX + SWAP_SUFFIX)
            and (base := parse_base_offset(path.name)) is not None
        )
        for base in swaps:
            swap = Segment.open(self.directory, base, self.config, state=SWAP_SUFFIX)
            swap.recover(min_offset=base)
            replaced_end = max(swap.next_offset, base + 1)
            swap.close()
            for path in list(self.directory.iterdir()):
                other = parse_base_offset(path.name)
                if (
                    other is not None
                    and base <= other < replaced_end
                    and not path.name.endswith(SWAP_SUFFIX)
                ):
                    logger.info("swap %d replaces %s", base, path.name)
                    path.unlink()
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                segment_path(self.directory, base, suffix, SWAP_SUFFIX).unlink(missing_ok=True)
            segment_path(self.directory, base, LOG_SUFFIX, SWAP_SUFFIX).rename(
                segment_path(self.directory, base, LOG_SUFFIX)
            )
            txn_swap = segment_path(self.directory, base, TXN_INDEX_SUFFIX, SWAP_SUFFIX)
            if txn_swap.exists():
                txn_swap.rename(segment_path(self.directory, base, TXN_INDEX_SUFFIX))
        if swaps:
            fsync_directory(self.directory)

    def _open_segments(self) -> SegmentMap:
        segments = SegmentMap()
        logs = set()
        for path in self.directory.iterdir():
            base = parse_base_offset(path.name)
            if base is not None and path.name.endswith(LOG_SUFFIX):
                logs.add(base)
        for path in self.directory.iterdir():
            base = parse_base_offset(path.name)
            if (
                base is not None
                and path.name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX))
                and base not in logs
            ):
                path.unlink()
        for base in sorted(logs):
            segments.add(Segment.open(self.directory, base, self.config))
        return segments

    def _load_clean(self, segments: SegmentMap) -> int:
        truncated = 0
        previous_end = None
        for segment in list(segments):
            if previous_end is not None and segment.base_offset < previous_end:
                logger.warning("%s overlaps the previous segment; recovering it", segment.log_path)
                truncated += self._drop_from(segments, segment)
                break
            if not segment.load_tail():
                logger.warning("%s failed its sanity check; rebuilding", segment.log_path)
                bytes_cut = segment.recover(min_offset=previous_end or segment.base_offset)
                truncated += bytes_cut
                if bytes_cut:
                    truncated += self._drop_after(segments, segment)
                    break
            previous_end = segment.next_offset
        return truncated

    def _recover(self, segments: SegmentMap, recovery_point: int) -> int:
        truncated = 0
        previous_end: int | None = None
        holder = segments.floor(recovery_point)
        for segment in list(segments):
            if previous_end is not None and segment.base_offset < previous_end:
                truncated += self._drop_from(segments, segment)
                break
            needs_check = holder is None or segment.base_offset >= holder.base_offset
            if needs_check or not segment.load_tail():
                bytes_cut = segment.recover(min_offset=previous_end or segment.base_offset)
                if bytes_cut:
                    logger.warning("truncated %d bytes of %s", bytes_cut, segment.log_path)
                    truncated += bytes_cut + self._drop_after(segments, segment)
                    break
            following = segments.higher(segment.base_offset)
            if (
                needs_check
                and following is not None
                and not self.config.compact
                and segment.next_offset < following.base_offset
            ):
                # Writes of this segment were lost while later ones reached the disk (a
                # power cut flushes files in any order): nothing after the gap is the log.
                logger.warning(
                    "%s ends at offset %d but the next segment starts at %d",
                    segment.log_path,
                    segment.next_offset,
                    following.base_offset,
                )
                truncated += self._drop_after(segments, segment)
                break
            previous_end = segment.next_offset
        return truncated

    def _drop_after(self, segments: SegmentMap, segment: Segment) -> int:
        following = segments.higher(segment.base_offset)
        return 0 if following is None else self._drop_from(segments, following)

    def _drop_from(self, segments: SegmentMap, first: Segment) -> int:
        dropped = 0
        for segment in list(segments.from_offset(first.base_offset)):
            if segment.base_offset >= first.base_offset:
                logger.warning("deleting %s after a truncation before it", segment.log_path)
                dropped += segment.size_bytes
                segments.remove(segment)
                segment.delete_files()
        return dropped
