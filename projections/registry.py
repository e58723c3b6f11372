"""The projection registry (``ep_projections``) and what ``projections status`` reports.

Status is computed from the store and the log: per partition, the checkpoint
against the log's end offset gives the lag in events; the age of the oldest
unapplied event gives the lag in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, inspect, select

from eventplatform.projections import schema
from eventplatform.projections.statements import upsert_insert
from eventplatform.projections.store import ProjectionStore

STATUS_RUNNING = "running"
STATUS_NEVER_RUN = "never run"
RUNNER_HEARTBEAT_S = 10.0
"""How often a running runner refreshes its row's ``updated_at``, even when idle."""
RUNNER_SILENT_S = 3 * RUNNER_HEARTBEAT_S
"""A row that says running but was not refreshed for this long belongs to a runner that
ended without saying so (killed, or its machine lost)."""


def register_projection(store: ProjectionStore, status: str = STATUS_RUNNING) -> None:
    """Record (or refresh) the projection's row: its group, topics and tables."""
    projection = store.projection
    values = {
        "name": projection.name,
        "group_id": projection.group_id,
        "topics": list(projection.topics),
        "tables": sorted(projection.plans),
        "status": status,
        "updated_at": datetime.now(UTC),
    }
    statement = upsert_insert(schema.projections, store.postgresql).values(values)
    statement = statement.on_conflict_do_update(
        index_elements=["name"],
        set_={name: statement.excluded[name] for name in values if name != "name"},
    )
    with store.engine.begin() as connection:
        connection.execute(statement)


def set_status(store: ProjectionStore, status: str, *, error: str | None = None) -> None:
    table = schema.projections
    now = datetime.now(UTC)
    values: dict[str, Any] = {"status": status, "updated_at": now}
    if error is not None:
        values.update(last_error=error, last_error_at=now)
    with store.engine.begin() as connection:
        connection.execute(
            table.update().where(table.c.name == store.projection.name).values(values)
        )


def reported_status(
    row: RegisteredProjection | None, has_rows: bool, now: datetime | None = None
) -> str:
    """The status to show for a projection: its row's, unless the row says running and
    its runner went silent; for a projection with no row, whether its tables hold rows
    anyway (filled by replay or a batch job, not by a runner)."""
    if row is None and has_rows:
        return "no runner; its tables hold rows from replay or a batch job"
    if row is None:
        return STATUS_NEVER_RUN
    if row.status != STATUS_RUNNING:
        return row.status
    updated = row.updated_at if row.updated_at.tzinfo else row.updated_at.replace(tzinfo=UTC)
    silent = (now or datetime.now(UTC)) - updated
    if silent > timedelta(seconds=RUNNER_SILENT_S):
        return (
            f"not running: its runner has not been heard from for {silent.total_seconds():.0f}s "
            "(it ended without stopping)"
        )
    return STATUS_RUNNING


@dataclass(frozen=True)
class RegisteredProjection:
    name: str
    group_id: str
    topics: list[str]
    tables: list[str]
    status: str
    last_error: str | None
    last_error_at: datetime | None
    updated_at: datetime


def registered(connection: Any) -> list[RegisteredProjection]:
    table = schema.projections
    rows = connection.execute(select(table).order_by(table.c.name)).mappings()
    return [RegisteredProjection(**dict(row)) for row in rows]


def checkpoints_of(connection: Any, name: str) -> dict[tuple[str, int], int]:
    table = schema.checkpoints
    query = select(table.c.topic, table.c.partition, table.c.next_offset).where(
        table.c.projection == name
    )
    return {(topic, partition): offset for topic, partition, offset in connection.execute(query)}


def parked_count(connection: Any, name: str) -> int:
    table = schema.dead_letters
    query = select(func.count()).where(
        table.c.projection == name, table.c.status == schema.DEAD_LETTER_PARKED
    )
    return int(connection.execute(query).scalar_one())


def row_counts(connection: Any, tables: list[Any]) -> dict[str, int | None]:
    """Rows per table; None for a table the database does not have (not migrated yet)."""
    existing = set(inspect(connection).get_table_names())
    return {
        table.name: int(connection.execute(select(func.count()).select_from(table)).scalar_one())
        if table.name in existing
        else None
        for table in tables
    }
