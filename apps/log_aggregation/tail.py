"""Following log files as they grow, through rotations and restarts.

A :class:`FileTail` reads the complete lines appended to one path. It knows
the file by its identity (device and inode), not its name, so it handles
both ways logs rotate:

* **rename** (``app.log`` becomes ``app.log.1`` and a new ``app.log``
  starts): the tail reads the old file to its end, a last line without a
  newline included, then opens the new one from its start;
* **copy and truncate** (the file shrinks below the tail's offset): it reads
  the file again from the start.

The position (identity and offset after the last line taken) is saved in a
small JSON state file, written atomically (a temporary file, ``fsync``,
``rename``). :func:`follow` saves it only after the log has acknowledged
the lines it covers, so a stopped tail that starts again on the same state
resumes after the last line appended: no line is lost or appended twice.
When the file rotated while the tail was stopped, it finds the old file by
its identity among the files of the same directory and finishes it first.
(A process killed between the log's acknowledgement and the state's write
appends that batch again when it restarts.)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import orjson

from eventplatform.apps.log_aggregation.events import LogLine
from eventplatform.apps.log_aggregation.lines import parse_line
from eventplatform.events import EventProducer

log = logging.getLogger(__name__)

READ_BYTES = 1024 * 1024
LINE_BYTES_MAX = 1024 * 1024
"""A longer run without a newline is taken as a line of its own (and cut to the message limit)."""
BATCH_LINES = 5_000
POLL_INTERVAL_S = 0.2
ROTATION_GRACE_S = 1.0
"""How long a renamed file must stay at its end before the tail moves on: a writer may
still be finishing lines in it before it reopens the path."""

Identity = tuple[int, int]


@dataclass(frozen=True)
class TailPosition:
    device: int
    inode: int
    offset: int

    @property
    def identity(self) -> Identity:
        return (self.device, self.inode)


def _identity(stat: os.stat_result) -> Identity:
    return (stat.st_dev, stat.st_ino)


class FileTail:
    """The complete lines appended to ``path``, from the position in ``state_path``."""

    def __init__(
        self, path: Path, state_path: Path, *, rotation_grace_s: float = ROTATION_GRACE_S
    ) -> None:
        self.path = path
        self.state_path = state_path
        self.rotation_grace_s = rotation_grace_s
        self._rotated_at: float | None = None
        self._file: IO[bytes] | None = None
        self._identity: Identity | None = None
        self._offset = 0
        self._pending = b""
        self._draining = False
        self._restore()
        if self._file is None:  # hold the file from the start: it may rotate before a read
            self._open_current()

    # ------------------------------------------------------------ position

    @property
    def position(self) -> TailPosition | None:
        """Where the last line taken ends (``None`` before the file first appears)."""
        if self._identity is None:
            return None
        return TailPosition(*self._identity, self._offset)

    def save(self, position: TailPosition | None = None) -> None:
        """Write ``position`` (default: the current one) to the state file, atomically."""
        position = position or self.position
        if position is None:
            return
        payload = {"path": str(self.path), "device": position.device, "inode": position.inode}
        payload["offset"] = position.offset
        temporary = self.state_path.with_name(self.state_path.name + ".tmp")
        with temporary.open("wb") as handle:
            handle.write(orjson.dumps(payload))
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(self.state_path)

    def _restore(self) -> None:
        saved = self._saved()
        if saved is None:
            return
        current = self._stat_path()
        if current is not None and _identity(current) == saved.identity:
            self._open(self.path, saved.identity, saved.offset)
            return
        rotated = self._find(saved.identity)
        if rotated is not None:
            self._open(rotated, saved.identity, saved.offset)
            self._draining = True
        else:
            log.warning("%s: the file of the saved position is gone; starting anew", self.path)

    def _saved(self) -> TailPosition | None:
        try:
            document = orjson.loads(self.state_path.read_bytes())
            fields = (document["device"], document["inode"], document["offset"])
            return TailPosition(*(int(value) for value in fields))
        except FileNotFoundError:
            return None
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.warning(
                "%s: unreadable state %s (%s); starting anew", self.path, self.state_path, exc
            )
            return None

    def _find(self, identity: Identity) -> Path | None:
        """The file of the same directory with ``identity``: the rotated one."""
        folder = self.path.parent
        try:
            entries = list(folder.iterdir())
        except OSError:
            return None
        for entry in entries:
            try:
                if _identity(entry.stat()) == identity and entry.is_file():
                    return entry
            except OSError:
                continue
        return None

    # ------------------------------------------------------------ reading

    def lines(self, limit: int = BATCH_LINES) -> list[tuple[bytes, TailPosition]]:
        """Up to ``limit`` complete new lines, each with the position after it."""
        taken: list[tuple[bytes, TailPosition]] = []
        while len(taken) < limit:
            if self._file is None and not self._open_current():
                break
            more = self._read(limit - len(taken))
            taken.extend(more)
            if more:
                continue
            if not self._switch_if_rotated(taken):
                break
        return taken

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _open_current(self) -> bool:
        stat = self._stat_path()
        if stat is None:
            return False
        self._open(self.path, _identity(stat), 0)
        return True

    def _open(self, path: Path, identity: Identity, offset: int) -> None:
        self.close()
        handle = path.open("rb")
        size = os.fstat(handle.fileno()).st_size
        if offset > size:  # truncated while we were away
            offset = 0
        handle.seek(offset)
        self._file, self._identity, self._offset, self._pending = handle, identity, offset, b""

    def _stat_path(self) -> os.stat_result | None:
        try:
            return self.path.stat()
        except FileNotFoundError:
            return None

    def _read(self, limit: int) -> list[tuple[bytes, TailPosition]]:
        handle = self._file
        assert handle is not None and self._identity is not None
        if os.fstat(handle.fileno()).st_size < self._offset:  # copied and truncated
            log.info("%s was truncated; reading it from the start", self.path)
            handle.seek(0)
            self._offset, self._pending = 0, b""
        found: list[tuple[bytes, TailPosition]] = []
        while len(found) < limit:
            chunk = handle.read(READ_BYTES)
            if not chunk:
                break
            data = self._pending + chunk
            start = 0
            while len(found) < limit:
                end = data.find(b"\n", start)
                if end < 0:
                    break
                self._offset += end + 1 - start
                found.append((data[start:end], TailPosition(*self._identity, self._offset)))
                start = end + 1
            self._pending = data[start:]
            if len(found) >= limit:  # what was read past the limit is read again next time
                handle.seek(self._offset)
                self._pending = b""
                break
            if len(self._pending) >= LINE_BYTES_MAX:
                self._offset += len(self._pending)
                found.append((self._pending, TailPosition(*self._identity, self._offset)))
                self._pending = b""
        return found

    def _switch_if_rotated(self, taken: list[tuple[bytes, TailPosition]]) -> bool:
        """At the end of the file: move to the file now at the path if it is another one
        (after taking a last line without a newline); True if it moved."""
        current = self._stat_path()
        if current is not None and _identity(current) == self._identity and not self._draining:
            return False
        if current is None and not self._draining:
            return False  # removed and not yet replaced: wait for the new file
        if not self._draining:
            now = time.monotonic()
            if self._rotated_at is None:
                self._rotated_at = now
            if now - self._rotated_at < self.rotation_grace_s:
                return False
        self._rotated_at = None
        assert self._identity is not None
        if self._pending:
            self._offset += len(self._pending)
            taken.append((self._pending, TailPosition(*self._identity, self._offset)))
            self._pending = b""
        self._draining = False
        if current is None:
            self.close()
            self._identity = None
            return False
        self._open(self.path, _identity(current), 0)
        return True


@dataclass(frozen=True)
class TailSource:
    tail: FileTail
    service: str
    host: str


@dataclass
class FollowStats:
    lines: int = 0
    batches: int = 0


def follow(
    sources: Sequence[TailSource],
    producer: EventProducer,
    *,
    stop: threading.Event,
    poll_interval_s: float = POLL_INTERVAL_S,
    batch_lines: int = BATCH_LINES,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    on_batch: Callable[[int], None] | None = None,
) -> FollowStats:
    """Append the new lines of every source until ``stop`` is set; each batch's position is
    saved once the log has acknowledged it. Returns what was appended."""
    stats = FollowStats()
    try:
        while not stop.is_set():
            moved = False
            for source in sources:
                taken = source.tail.lines(batch_lines)
                if not taken:
                    continue
                moved = True
                now = clock()
                producer.append(list(_events(source, taken, now)))
                source.tail.save(taken[-1][1])
                stats.lines += len(taken)
                stats.batches += 1
                if on_batch is not None:
                    on_batch(len(taken))
            if not moved:
                stop.wait(poll_interval_s)
    finally:
        for source in sources:
            source.tail.close()
    return stats


def _events(
    source: TailSource, taken: list[tuple[bytes, TailPosition]], now: datetime
) -> Iterator[LogLine]:
    for raw, _ in taken:
        yield parse_line(raw.decode("utf-8", "replace"), source.service, source.host, now)


def read_stream(
    stream: IO[bytes],
    service: str,
    host: str,
    producer: EventProducer,
    *,
    batch_lines: int = BATCH_LINES,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> int:
    """Append every line of ``stream`` (stdin) until its end; returns how many."""
    batch: list[LogLine] = []
    total = 0
    for raw in stream:
        text = raw.decode("utf-8", "replace").rstrip("\n")
        batch.append(parse_line(text, service, host, clock()))
        if len(batch) >= batch_lines:
            producer.append(batch)
            total += len(batch)
            batch = []
    if batch:
        producer.append(batch)
        total += len(batch)
    return total
