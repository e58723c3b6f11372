"""PostgreSQL writes held back until they are needed, then sent as few statements.

A store transaction queues the writes whose results nobody needs at once
(the checkpoints' compare-and-set, whose rows are checked once it has run,
the upserts, the index appends) and sends them before the next read or the
commit. Each run of queued writes into distinct tables, with at most one
checked, goes as one statement whose parts are data-modifying ``WITH``
queries: PostgreSQL runs them all to completion on one snapshot, and none
needs another's effect, as they write different tables. A table written
twice starts the next statement. On PostgreSQL a statement costs the client
about as much CPU as the server spends running it, so a batch of new events
is ``BEGIN``, one statement and ``COMMIT``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection

from eventplatform.projections.statements import driver_errors

Check = Callable[[list[Any]], None]
"""What checks the rows a write returned; it raises to fail the transaction."""


class QueuedWrite(NamedTuple):
    """A write waiting in a transaction: the table it writes, its driver SQL and
    positional parameters, and what checks the rows it returns."""

    target: str
    sql: str
    parameters: tuple[Any, ...]
    check: Check | None


class WriteQueue:
    """The writes of one transaction not sent yet, in order."""

    def __init__(self) -> None:
        self._writes: list[QueuedWrite] = []

    def __bool__(self) -> bool:
        return bool(self._writes)

    def add(
        self, target: str, sql: str, parameters: Sequence[Any] = (), check: Check | None = None
    ) -> None:
        self._writes.append(QueuedWrite(target, sql, tuple(parameters), check))

    def clear(self) -> None:
        """Drop the writes not sent (their savepoint rolled back)."""
        self._writes.clear()

    def flush(self, connection: Connection) -> None:
        """Send the queued writes on ``connection``'s driver, then run their checks."""
        queued, self._writes = self._writes, []
        if not queued:
            return
        driver = connection.connection.driver_connection
        assert driver is not None
        with driver_errors(connection, queued[0].sql), driver.cursor() as cursor:
            for sql, parameters, check in combined(queued):
                cursor.execute(sql, parameters)
                if check is not None:
                    check(cursor.fetchall())


def combined(queued: Sequence[QueuedWrite]) -> Iterator[tuple[str, tuple[Any, ...], Check | None]]:
    """The queued writes as few statements: each run of writes into distinct tables,
    with at most one checked write, as one ``WITH`` statement whose rows are the
    checked write's."""
    run: list[QueuedWrite] = []
    for write in [*queued, None]:
        if run and (
            write is None
            or any(w.target == write.target for w in run)
            or (write.check is not None and any(w.check is not None for w in run))
        ):
            if len(run) == 1:
                yield run[0].sql, run[0].parameters, run[0].check
            else:
                checked = [index for index, w in enumerate(run) if w.check is not None]
                sql = _with_statement(tuple(w.sql for w in run), checked[0] if checked else None)
                parameters = tuple(value for w in run for value in w.parameters)
                yield sql, parameters, run[checked[0]].check if checked else None
            run = []
        if write is not None:
            run.append(write)


@functools.lru_cache(maxsize=256)
def _with_statement(statements: tuple[str, ...], returned: int | None) -> str:
    """One statement that runs ``statements``, each a data-modifying ``WITH`` query, and
    returns the rows of the one at index ``returned`` (or one row)."""
    queries = ", ".join(f"w{index} AS ({sql})" for index, sql in enumerate(statements))
    return f"WITH {queries} SELECT {'1' if returned is None else f'* FROM w{returned}'}"
