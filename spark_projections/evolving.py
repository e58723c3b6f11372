"""Rebuild a projection whose definition changed: the whole log, under the new definition.

After a projection's definition changes (see
:mod:`eventplatform.projections.fingerprint`), its runner applies nothing
until the tables are rebuilt. :func:`rebuild_definition` plans a rebuild from
the start of every partition (before Spark starts, like ``platform replay``),
computes the tables into shadows while the old ones stay live, and swaps them
in with the checkpoints at the replay's end and the new fingerprint, in one
transaction (see :func:`~.replay.rebuild`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import select

from eventplatform.projections import schema
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.fingerprint import fingerprint
from eventplatform.projections.model import Projection
from eventplatform.projections.registry import (
    STATUS_REBUILD_NEEDED,
    STATUS_REBUILDING,
    STATUS_STOPPED,
    mark_status,
)
from eventplatform.spark_projections.planning import ReplayRequest, plan_replay
from eventplatform.spark_projections.replay import ReplaySummary, rebuild
from eventplatform.spark_projections.session import spark_session


@dataclass(frozen=True)
class DefinitionRebuild:
    """What :func:`rebuild_definition` did."""

    summary: ReplaySummary
    notes: tuple[str, ...]
    fingerprint_before: str | None
    """The fingerprint stored before (None: none was)."""
    fingerprint_after: str | None
    """The fingerprint stored now (None: the projection has no registry row yet; its
    first runner stores its definition's)."""

    def lines(self) -> list[str]:
        """What ``platform projections rebuild`` prints."""
        before = (self.fingerprint_before or "none")[:FINGERPRINT_SHOWN]
        after = (self.fingerprint_after or "none")[:FINGERPRINT_SHOWN]
        changed = "changed" if before != after else "unchanged"
        return [
            *self.summary.lines(),
            *(f"note: {note}" for note in self.notes),
            f"definition fingerprint {before} -> {after} ({changed})",
        ]


FINGERPRINT_SHOWN = 12
"""Hex digits of a fingerprint printed."""


def rebuild_definition(
    projection: Projection,
    database_url: str,
    source_options: Mapping[str, str],
    *,
    spark_master: str | None,
    spark_settings: Mapping[str, str],
) -> DefinitionRebuild:
    """Rebuild ``projection`` from the start of the log and record its definition."""
    plan = plan_replay(projection, database_url, source_options, ReplayRequest(), mode="rebuild")
    assert plan.from_start, "a rebuild without a start begins at the log start"
    before = stored_fingerprint(database_url, projection.name)
    _mark(database_url, projection.name, STATUS_REBUILDING)
    try:
        spark = spark_session(spark_master, spark_settings)
        summary = rebuild(
            spark, projection, database_url, plan.ranges, source_options, from_start=True
        )
    except BaseException:
        _mark(database_url, projection.name, STATUS_REBUILD_NEEDED)
        raise
    _mark(database_url, projection.name, STATUS_STOPPED)
    after = stored_fingerprint(database_url, projection.name)
    assert after in (None, fingerprint(projection)), "a rebuild stores its definition"
    return DefinitionRebuild(summary, plan.notes, before, after)


def _mark(database_url: str, name: str, status: str) -> None:
    """Note the rebuild's progress in the projection's row, for ``projections status``."""
    engine = create_store_engine(database_url)
    try:
        with engine.begin() as connection:
            mark_status(connection, name, status)
    finally:
        engine.dispose()


def stored_fingerprint(database_url: str, name: str) -> str | None:
    """The fingerprint the registry holds for projection ``name``, if any."""
    table = schema.projections
    engine = create_store_engine(database_url)
    try:
        with engine.connect() as connection:
            stored = connection.execute(
                select(table.c.fingerprint).where(table.c.name == name)
            ).scalar_one_or_none()
    finally:
        engine.dispose()
    return None if stored is None else str(stored)
