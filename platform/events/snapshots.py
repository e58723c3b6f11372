"""Snapshots of entities' states, so a repository folds only the events after them.

A :class:`Snapshot` holds an entity's state after its first ``version`` records, and the
offset to read on from. It is a cache: the log alone decides, and an entity loads the
same with its snapshots or without them. The repository takes one every
``snapshot_every`` events and ignores one that

- was taken by another version of the code (its ``fingerprint`` differs), or
- a correction after it amends an event before it (the corrected history's state then
  differs from the state it holds).

It also keeps, for the last ``command_window`` commands that changed the entity, where
their events are (:class:`CommandMark`), so a command sent again after its answer was
lost is still recognised once its events lie before the snapshot.

:class:`MemorySnapshots` keeps them in this process, the most recently used
``capacity`` entities. Any object with ``get`` and ``put`` serves as a store.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

S = TypeVar("S")

CAPACITY_DEFAULT = 10_000
"""Entities whose snapshots a :class:`MemorySnapshots` keeps."""


@dataclass(frozen=True)
class CommandMark:
    """Where a command's events are: ``count`` of them from ``offset``, the first at
    ``version``."""

    command_id: uuid.UUID
    offset: int
    version: int
    count: int


@dataclass(frozen=True)
class Snapshot(Generic[S]):
    """An entity's ``state`` after its first ``version`` records; its events after them
    start at ``offset``."""

    topic: str
    key: str
    version: int
    offset: int
    state: S
    commands: tuple[CommandMark, ...]
    fingerprint: str

    def mark_of(self, command_id: uuid.UUID) -> CommandMark | None:
        for mark in self.commands:
            if mark.command_id == command_id:
                return mark
        return None


class SnapshotStore(Protocol):
    def get(self, topic: str, key: str) -> Snapshot[Any] | None: ...

    def put(self, snapshot: Snapshot[Any]) -> None: ...


class MemorySnapshots:
    """Snapshots in this process, the ``capacity`` most recently used. Thread-safe."""

    def __init__(self, capacity: int = CAPACITY_DEFAULT) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self._snapshots: OrderedDict[tuple[str, str], Snapshot[Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, topic: str, key: str) -> Snapshot[Any] | None:
        with self._lock:
            found = self._snapshots.get((topic, key))
            if found is not None:
                self._snapshots.move_to_end((topic, key))
            return found

    def put(self, snapshot: Snapshot[Any]) -> None:
        with self._lock:
            entry = (snapshot.topic, snapshot.key)
            known = self._snapshots.get(entry)
            if known is not None and known.version >= snapshot.version:
                return  # never replace a snapshot with an older one
            self._snapshots[entry] = snapshot
            self._snapshots.move_to_end(entry)
            while len(self._snapshots) > self.capacity:
                self._snapshots.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._snapshots.clear()

    def __len__(self) -> int:
        return len(self._snapshots)
