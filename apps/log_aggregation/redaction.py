"""Redacting lines that leaked a secret: out of every table, then out of the log.

:func:`matching_lines` finds, in ``logs_recent``, the lines whose message
holds a piece of text (case-sensitive, as written), optionally of one
service. :func:`redact` then

1. appends their :func:`~.events.redaction`, the decision and one retracting
   correction per line;
2. with ``erase``, waits until the ``logs.lines`` runner has applied it, so the
   lines are gone from every table, and on SQLite merges the search index so their
   words leave its own tables too (:func:`purge_search_index`);
3. and erases the lines' records from the log (:func:`eventplatform.events.erase_events`),
   on every replica: a consumer reading the topic from its start, a runner or a
   Spark rebuild finds nothing of them from then on.

The order matters: a runner applies a correction by reading the line it retracts
from the log, so the lines are erased only once the retraction is applied.

A run that fails between 1 and 3 (the runner is not running or is slow, the
erasure is refused) leaves lines out of the tables but still in the log, where the
next search of ``logs_recent`` cannot find them. So, given a ``pending`` folder,
:func:`redact` writes the lines' positions there before it appends anything, one
file per run (lines ``PARTITION OFFSET``, the form ``platform erase logs
--offsets-from`` reads), and deletes the file once they are erased. Every run
finishes the positions it finds there first: it retracts those still in the
tables whose retraction was never appended, waits, and erases them all.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import ColumnElement, select, text, tuple_

from eventplatform.apps.log_aggregation.events import TOPIC, redaction
from eventplatform.apps.log_aggregation.projections import lines as lines_projection
from eventplatform.apps.log_aggregation.projections import recent
from eventplatform.events import (
    EventError,
    EventProducer,
    EventRef,
    KafkaConnection,
    Position,
    erase_events,
)
from eventplatform.projections import (
    ApplyTimeoutError,
    create_store_engine,
    log_ends,
    reading,
    wait_until_applied,
)

LIKE_ESCAPE = "\\"
APPLY_TIMEOUT_S_DEFAULT = 120.0
"""How long :func:`redact` waits for the runner to apply a retraction."""
ERASE_TIMEOUT_S = 60.0
PENDING_SUFFIX = ".pending"
SQLITE_OPTIMIZE = "INSERT INTO logs_recent_search (logs_recent_search) VALUES ('optimize')"
POSITIONS_PER_QUERY = 500
"""Positions looked up in ``logs_recent`` by one query."""


class RedactionError(Exception):
    """Lines were retracted, or are to be, but are not erased from the log yet.

    ``positions`` are those lines' positions in the log; ``pending``, when given,
    the folder they wait in for the next run of :func:`redact`.
    """

    def __init__(
        self, message: str, positions: Sequence[Position], pending: Path | None = None
    ) -> None:
        super().__init__(message)
        self.positions = tuple(positions)
        self.pending = pending


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def matching_lines(database_url: str, text: str, service: str | None = None) -> list[EventRef]:
    """The recent lines whose message holds ``text``, in log order."""
    if not text:
        raise ValueError("give the text the lines to redact hold")
    condition: ColumnElement[bool] = recent.c.message.like(_like_pattern(text), escape=LIKE_ESCAPE)
    if service is not None:
        condition = condition & (recent.c.service == service)
    return _lines_where(database_url, [condition])


def lines_at(database_url: str, positions: Collection[Position]) -> list[EventRef]:
    """The lines of ``logs_recent`` at ``positions`` (those still there), in log order."""
    pairs = sorted((p.partition, p.offset) for p in positions if p.topic == TOPIC)
    where = tuple_(recent.c.log_partition, recent.c.log_offset)
    chunks = [
        pairs[first : first + POSITIONS_PER_QUERY]
        for first in range(0, len(pairs), POSITIONS_PER_QUERY)
    ]
    return _lines_where(database_url, [where.in_(chunk) for chunk in chunks])


def _lines_where(database_url: str, conditions: Sequence[ColumnElement[bool]]) -> list[EventRef]:
    """The lines of ``logs_recent`` that meet any of ``conditions`` (one query each)."""
    table = recent
    columns = (
        table.c.event_id,
        table.c.service,
        table.c.host,
        table.c.log_partition,
        table.c.log_offset,
    )
    found: list[EventRef] = []
    engine = create_store_engine(database_url)
    try:
        with reading(engine) as connection:
            for condition in conditions:
                rows = connection.execute(select(*columns).where(condition))
                found.extend(
                    EventRef(
                        uuid.UUID(event_id),
                        f"{line_service}@{host}",
                        Position(TOPIC, int(partition), int(offset)),
                    )
                    for event_id, line_service, host, partition, offset in rows
                )
    finally:
        engine.dispose()
    return sorted(found, key=lambda ref: ref.position)


@dataclass(frozen=True)
class Redaction:
    """What :func:`redact` did, or with ``dry_run`` would do.

    ``lines``: lines taken out of the tables; ``appended``: the retraction's events;
    ``erased``: records erased from the log (``None`` with ``erase=False``);
    ``earlier``: positions an earlier run left to erase, erased by this one.
    """

    lines: int
    appended: tuple[EventRef, ...] = ()
    erased: int | None = None
    earlier: int = 0


def redact(
    database_url: str,
    bootstrap: KafkaConnection,
    text: str,
    reason: str,
    *,
    service: str | None = None,
    dry_run: bool = False,
    erase: bool = False,
    apply_timeout_s: float = APPLY_TIMEOUT_S_DEFAULT,
    pending: Path | None = None,
) -> Redaction:
    """Retract every recent line holding ``text``; with ``erase``, also wait for the
    runner and erase the lines from the log (see the module docstring). With ``dry_run``,
    only count.

    Raises RedactionError when the runner does not apply the retraction within
    ``apply_timeout_s`` or the log refuses the erasure: the lines are then out of the
    tables, or on their way out, but still in the log.
    """
    found = matching_lines(database_url, text, service)
    if not erase:
        if dry_run or not found:
            return Redaction(len(found))
        return Redaction(len(found), _append_retraction(bootstrap, found, reason))
    journal = PendingErasures(pending) if pending is not None else None
    earlier = journal.positions() if journal is not None else {}
    waiting = [position for positions in earlier.values() for position in positions]
    known = set(waiting)
    new = [ref for ref in found if ref.position not in known]
    wanted = [*waiting, *(ref.position for ref in new)]
    if dry_run or not wanted:
        return Redaction(len(new), erased=len(wanted), earlier=len(waiting))
    own = journal.write([ref.position for ref in new]) if journal is not None and new else None
    try:
        leaving, appended = _retract(database_url, bootstrap, new, waiting, reason, apply_timeout_s)
    except ApplyTimeoutError as exc:
        what = f"{lines_projection.name} did not apply the retraction within {apply_timeout_s:g} s"
        raise _not_erased(what, wanted, pending) from exc
    purge_search_index(database_url)
    try:
        erased = sum(erase_events(bootstrap, wanted, timeout_s=ERASE_TIMEOUT_S).values())
    except EventError as exc:
        what = f"the lines are out of the tables, but the log did not erase them: {exc}"
        raise _not_erased(what, wanted, pending) from exc
    if journal is not None:
        journal.remove([*earlier, *([own] if own is not None else [])])
    return Redaction(leaving, appended, erased, len(waiting))


def purge_search_index(database_url: str) -> None:
    """On SQLite, merge the search index's segments into one, so the words of deleted
    lines leave the index's own tables too (FTS5 keeps them, marked deleted, until its
    segments merge). PostgreSQL's index is the table's own and needs nothing here."""
    engine = create_store_engine(database_url)
    try:
        if engine.dialect.name == "sqlite":
            with engine.begin() as connection:
                connection.execute(text(SQLITE_OPTIMIZE))
    finally:
        engine.dispose()


def _retract(
    database_url: str,
    bootstrap: KafkaConnection,
    new: Sequence[EventRef],
    waiting: Sequence[Position],
    reason: str,
    timeout_s: float,
) -> tuple[int, tuple[EventRef, ...]]:
    """Take ``new`` and the ``waiting`` lines an earlier run left out of the tables and
    wait until the runner has; how many were in the tables, and what was appended.

    A waiting line still in the tables may have its retraction appended but not
    applied yet, so the runner is first waited for up to the log's end; those still
    there after that never had one.
    """
    unretracted = lines_at(database_url, waiting) if waiting else []
    leaving = len(new) + len(unretracted)
    if unretracted:
        ends = log_ends(bootstrap, [TOPIC])
        last = [Position(t, p, end - 1) for (t, p), (_, end) in ends.items() if end]
        wait_until_applied(database_url, lines_projection.name, last, timeout_s=timeout_s)
        unretracted = lines_at(database_url, waiting)
    retract = sorted([*new, *unretracted], key=lambda ref: ref.position)
    if not retract:
        return leaving, ()
    appended = _append_retraction(bootstrap, retract, reason)
    wait_until_applied(database_url, lines_projection.name, appended, timeout_s=timeout_s)
    return leaving, appended


def _append_retraction(
    bootstrap: KafkaConnection, lines: Sequence[EventRef], reason: str
) -> tuple[EventRef, ...]:
    with EventProducer(bootstrap) as producer:
        return tuple(producer.append(redaction(lines, reason)))


def _not_erased(what: str, positions: Sequence[Position], pending: Path | None) -> RedactionError:
    if pending is not None:
        then = f"run this command again: it erases them (their positions wait in {pending})"
    else:
        then = f"erase them with platform erase {TOPIC} (the error's positions)"
    message = (
        f"{what}; the log still holds {len(positions)} redacted line(s). Once "
        f"{lines_projection.name} runs and has caught up (platform projections status), {then}"
    )
    return RedactionError(message, positions, pending)


class PendingErasures:
    """A folder of files, one per run of :func:`redact`, each the positions of lines
    retracted (or about to be) and not erased from the log yet.

    A file is written whole under a temporary name and renamed, so a reader never sees
    half of one; one ``PARTITION OFFSET`` a line after a ``#`` comment.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def positions(self) -> dict[Path, list[Position]]:
        """Each pending file with its positions."""
        if not self.folder.is_dir():
            return {}
        return {
            path: _read_positions(path) for path in sorted(self.folder.glob(f"*{PENDING_SUFFIX}"))
        }

    def write(self, positions: Iterable[Position]) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{uuid.uuid4()}{PENDING_SUFFIX}"
        partial = path.with_suffix(".partial")
        lines = [f"# {TOPIC}: redacted, to erase (platform erase {TOPIC} --offsets-from)\n"]
        lines += [f"{p.partition} {p.offset}\n" for p in sorted(positions)]
        with partial.open("w", encoding="utf-8") as out:
            out.writelines(lines)
            out.flush()
            os.fsync(out.fileno())
        partial.replace(path)
        return path

    def remove(self, paths: Iterable[Path]) -> None:
        for path in paths:
            path.unlink(missing_ok=True)


def _read_positions(path: Path) -> list[Position]:
    positions = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        if len(fields) != 2 or not all(field.isdigit() for field in fields):
            raise RedactionError(f"{path}, line {number}: {line!r} is not 'PARTITION OFFSET'", ())
        positions.append(Position(TOPIC, int(fields[0]), int(fields[1])))
    return positions
