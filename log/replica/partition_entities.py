"""The entity-version side of a :class:`~eventplatform.log.replica.partition.Partition`:
expected versions checked on produce, counted on every append, and the entity index
that finds a key's batches (see :mod:`~eventplatform.log.replica.entity_versions`).

A mixin, so the partition stays one object with one owner task; it reads the
partition's log and directory and keeps ``entities`` and ``entity_index``.
"""

from __future__ import annotations

import os
from pathlib import Path

from eventplatform.log.replica.entity_index import EntityIndex
from eventplatform.log.replica.entity_log import batch_keys, load_entities, remove_entity_files
from eventplatform.log.replica.entity_versions import (
    VersionHeaderError,
    batch_conditions,
    record_keys,
)
from eventplatform.log.replica.produce_result import ProduceResult, invalid_record
from eventplatform.log.replica.version_table import VersionTable
from eventplatform.log.storage import PartitionLog, StorageError
from eventplatform.log.storage.errors import CorruptRecordError
from eventplatform.log.storage.record_batch import HEADER_BYTES, parse_header, split_batches


def _holds(data: bytes, last_offset: int) -> bool:
    """Whether ``data`` is one whole batch whose last offset is ``last_offset``."""
    if len(data) < HEADER_BYTES:
        return False
    try:
        header = parse_header(data)
    except StorageError:
        return False
    return header.last_offset == last_offset and header.size_bytes == len(data)


class EntityVersionsMixin:
    """See the module docstring."""

    directory: Path
    log: PartitionLog
    entities: VersionTable | None
    entity_index: EntityIndex | None
    entity_index_misses: int

    @property
    def readable_end(self) -> int:
        raise NotImplementedError

    def _entity_versions(self) -> VersionTable | None:
        """The versions of this partition's entities when its topic keeps them, loaded on
        first use (at open, or when the topic's config turns them on)."""
        if not self.log.config.eventplatform_entity_versions_enable:
            if self.entities is not None:
                self._forget_entities()
        elif self.entities is None:
            self.entities, self.entity_index = load_entities(self.directory, self.log)
        return self.entities

    def _forget_entities(self) -> None:
        """The topic stopped keeping versions: drop them, on disk too (they would be stale
        if it kept them again, since nothing would follow the log meanwhile)."""
        if self.entity_index is not None:
            self.entity_index.close()
        if self.entities is not None:
            self.entities.close()
        self.entities = self.entity_index = None
        remove_entity_files(self.directory)

    def _check_entities(
        self, entities: VersionTable, buffer: bytes | bytearray | memoryview
    ) -> tuple[ProduceResult | None, list[bytes | None]]:
        """The refusal of a batch whose expected versions do not hold (INVALID_RECORD,
        naming the record), or None and the batch's keys, to count once it is appended."""
        try:
            conditions = batch_conditions(buffer)
        except VersionHeaderError as exc:
            return invalid_record(str(exc), exc.record), []
        except CorruptRecordError as exc:  # records that do not frame: the CRC held
            return ProduceResult.refused(exc), []
        conflict = entities.check(conditions)
        if conflict is not None:
            return invalid_record(conflict.message, conflict.record), []
        return None, [condition.key for condition in conditions]

    def _apply_replicated_entities(self, record_set: bytes, position: int) -> None:
        """Count and index the records a follower appended at ``position`` of its active
        segment, as the leader did."""
        entities = self._entity_versions()
        if entities is None:
            return
        assert self.entity_index is not None
        for header in split_batches(record_set, check_crc=False):
            if not header.is_control:
                keys = record_keys(record_set, header.position)
                entities.apply(keys, header.next_offset)
                self.entity_index.add(
                    header.base_offset,
                    header.last_offset,
                    keys,
                    position + header.position,
                    header.size_bytes,
                )

    def _take_back_entities(self, offset: int) -> None:
        """Before the log drops the records at ``offset`` and after: uncount them."""
        if self.entities is not None:
            batches = (
                (header.base_offset, keys) for header, _, keys in batch_keys(self.log, offset)
            )
            self.entities.take_back(batches, offset)

    def _truncate_entity_index(self) -> None:
        """After a truncation: forget the index entries past the new end (everything, when
        the log restarted past them)."""
        if self.entity_index is not None:
            end = self.log.log_end_offset
            if end < self.entity_index.end:
                self.entity_index.truncate(end)
            if self.log.log_start_offset >= self.entity_index.end:
                self.entity_index.reset(self.log.log_start_offset)

    def entity_batches(
        self, key: bytes, from_offset: int, max_bytes: int
    ) -> tuple[list[bytes], int]:
        """The batches below the high watermark that may hold records with ``key`` at
        ``from_offset`` or after, in offset order, whole, at most ``max_bytes`` of them
        (the first is returned whatever its size); and the offset to read on from, the
        high watermark once every such batch is in. Nothing when the topic keeps no
        entity versions. Each batch is read where the index says it lies, and checked to
        be the batch it names; one that is not (which would be a bug) is found through
        the offset index instead. Reads stop where consumers' do (:attr:`readable_end`)."""
        bound = self.readable_end
        if self._entity_versions() is None:
            return [], bound
        assert self.entity_index is not None
        start = max(from_offset, self.log.log_start_offset)
        found: list[bytes] = []
        total, found_last = 0, start - 1
        segments = self.log.segments
        for located in self.entity_index.batches_of(key, start):
            if located.last_offset >= bound:
                break
            if found and total + located.size > max_bytes:
                return found, found_last + 1
            segment = segments.floor(located.last_offset)
            data = b""
            if segment is not None and located.position + located.size <= segment.size_bytes:
                data = os.pread(segment.descriptor, located.size, located.position)
            if not _holds(data, located.last_offset):
                self.entity_index_misses += 1
                piece = self.log.read(max(start, located.last_offset), 0, max_offset=bound)
                if piece is None:
                    break
                data = piece.read_bytes()
            found.append(data)
            found_last = located.last_offset
            total += len(data)
        return found, bound
