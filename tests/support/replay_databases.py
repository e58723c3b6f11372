"""Databases and offset ranges for the replay tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from sqlalchemy import Engine, select

from eventplatform.projections import migrate, schema
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.kafka import log_ends
from eventplatform.spark_projections.replay import ReplayRange
from eventplatform.testing import fresh_database


@contextmanager
def databases(kind: str, directory: Path, count: int) -> Iterator[list[Engine]]:
    """``count`` fresh, migrated databases of one kind."""
    with ExitStack() as stack:
        engines = []
        for _ in range(count):
            url = stack.enter_context(fresh_database(kind, directory))
            engine = create_store_engine(url)
            stack.callback(engine.dispose)
            migrate.upgrade(engine)
            engines.append(engine)
        yield engines


def ranges(bootstrap: str, topic: str, starts: dict[tuple[str, int], int]) -> list[ReplayRange]:
    ends = log_ends(bootstrap, [topic])
    return [
        ReplayRange(t, p, starts.get((t, p), low), high, low, high)
        for (t, p), (low, high) in sorted(ends.items())
    ]


def checkpoints(engine: Engine, name: str) -> dict[tuple[str, int], int]:
    table = schema.checkpoints
    with engine.connect() as connection:
        rows = connection.execute(
            select(table.c.topic, table.c.partition, table.c.next_offset).where(
                table.c.projection == name
            )
        )
        return {(t, p): offset for t, p, offset in rows}


def url_of(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)
