"""The projection registry (``ep_projections``) and what ``projections status`` reports.

Status is computed from the store and the log: per partition, the checkpoint
against the log's end offset gives the lag in events; the age of the oldest
unapplied event gives the lag in seconds.

The registry row also holds the consumer group the projection's runners join
when they write to this database: ``projection.<name>.<token>``, the token
drawn at random on the first run and kept in the row. The group belongs to
the database, not to the way it is reached: another host name, port or
relative path to the same database finds the same row, and a second database
draws its own token, so its runners read every partition too. A projection
that names its group (``Projection(group_id=...)``) joins that one. A row that
still holds the group runners shared before (``projection.<name>``) gets a token
on the next run: the runners move to the new group and commit their checkpoints
there on assignment, and the old group keeps its last offsets, unused.

The row also holds the fingerprint of the definition the tables were built
under (see :mod:`.fingerprint`). The first run stores its definition's; so
does a run that finds no checkpoint of the projection (nothing applied yet),
and one that finds none stored (a row from before fingerprints were kept: its
tables are taken as built under the definition that runs now). A run that
finds another fingerprint and checkpoints finds tables built under another
definition: :func:`definition_changed` says so, the runner stops, and a
rebuild (``platform projections rebuild``) stores the new fingerprint with the
rebuilt tables.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, inspect, select

from eventplatform.projections import schema
from eventplatform.projections.fingerprint import fingerprint
from eventplatform.projections.model import GROUP_ID_PREFIX, Projection
from eventplatform.projections.statements import upsert_insert
from eventplatform.projections.store import ProjectionStore

STATUS_RUNNING = "running"
STATUS_NEVER_RUN = "never run"
STATUS_REBUILD_NEEDED = "rebuild needed"
"""The status a runner leaves when it stops on a changed definition."""
STATUS_STOPPED = "stopped"
STATUS_REBUILDING = "rebuilding"
"""The status while ``projections rebuild`` (or a runner's rebuild) computes the new tables."""
RUNNER_HEARTBEAT_S = 10.0
"""How often a running runner refreshes its row's ``updated_at``, even when idle."""
RUNNER_SILENT_S = 3 * RUNNER_HEARTBEAT_S
"""A row that says running but was not refreshed for this long belongs to a runner that
ended without saying so (killed, or its machine lost)."""
GROUP_TOKEN_BYTES = 4
"""Random bytes of a database's group token (8 hex digits)."""


def register_projection(store: ProjectionStore, status: str = STATUS_RUNNING) -> str:
    """Record (or refresh) the projection's row: its group, topics and tables.

    Returns the consumer group its runners against this database join: the
    declared one, else the one the row holds (drawn now on the first run, or
    when the row holds the group of the shared days or a former declared one).
    """
    projection = store.projection
    table = schema.projections
    current = fingerprint(projection)
    values = {
        "name": projection.name,
        "fingerprint": current,
        "group_id": projection.group_id or new_group_id(projection.name),
        "topics": list(projection.topics),
        "tables": sorted(projection.plans),
        "status": status,
        "updated_at": datetime.now(UTC),
    }
    statement = upsert_insert(table, store.postgresql).values(values)
    kept = {"name", "fingerprint"} if projection.group_id else {"name", "fingerprint", "group_id"}
    statement = statement.on_conflict_do_update(
        index_elements=["name"],
        set_={name: statement.excluded[name] for name in values if name not in kept},
    )
    with store.engine.begin() as connection:
        connection.execute(statement)  # on PostgreSQL the row stays locked until the end
        _adopt_fingerprint(connection, projection, current)
        stored = connection.execute(
            select(table.c.group_id).where(table.c.name == projection.name)
        ).scalar_one()
        if projection.group_id or is_database_group(projection.name, stored):
            return str(stored)
        connection.execute(
            table.update()
            .where(table.c.name == projection.name)
            .values(group_id=values["group_id"])
        )
        return str(values["group_id"])


def _adopt_fingerprint(connection: Any, projection: Projection, current: str) -> None:
    """Store ``current`` unless the row holds another fingerprint and checkpoints exist."""
    table = schema.projections
    stored = connection.execute(
        select(table.c.fingerprint).where(table.c.name == projection.name)
    ).scalar_one()
    if stored == current or (stored is not None and checkpoints_of(connection, projection.name)):
        return
    connection.execute(
        table.update().where(table.c.name == projection.name).values(fingerprint=current)
    )


def definition_changed(connection: Any, projection: Projection) -> str | None:
    """The fingerprint stored for ``projection`` when its tables were built under another
    definition (the row holds another one and checkpoints exist), else None."""
    table = schema.projections
    stored = connection.execute(
        select(table.c.fingerprint).where(table.c.name == projection.name)
    ).scalar_one_or_none()
    if stored is None or stored == fingerprint(projection):
        return None
    return str(stored) if checkpoints_of(connection, projection.name) else None


def store_fingerprint(connection: Any, projection: Projection) -> None:
    """Record that ``projection``'s tables are now built under its current definition."""
    table = schema.projections
    connection.execute(
        table.update()
        .where(table.c.name == projection.name)
        .values(fingerprint=fingerprint(projection), updated_at=datetime.now(UTC))
    )


def rebuild_needed_message(name: str) -> str:
    """The one line a runner stops with, and status shows, when a definition changed."""
    return (
        f"definition changed since its tables were built: run platform projections rebuild {name}"
    )


def new_group_id(name: str) -> str:
    """A group of projection ``name`` for one database: ``projection.<name>.<token>``."""
    return f"{GROUP_ID_PREFIX}{name}.{secrets.token_hex(GROUP_TOKEN_BYTES)}"


def is_database_group(name: str, group_id: str) -> bool:
    """Whether ``group_id`` is one that :func:`new_group_id` draws for projection ``name``."""
    token = re.escape(f"{GROUP_ID_PREFIX}{name}.")
    return re.fullmatch(f"{token}[0-9a-f]{{{GROUP_TOKEN_BYTES * 2}}}", group_id) is not None


def set_status(store: ProjectionStore, status: str, *, error: str | None = None) -> None:
    with store.engine.begin() as connection:
        mark_status(connection, store.projection.name, status, error=error)


def mark_status(connection: Any, name: str, status: str, *, error: str | None = None) -> None:
    """Set projection ``name``'s status in its row (if it has one), on ``connection``."""
    table = schema.projections
    now = datetime.now(UTC)
    values: dict[str, Any] = {"status": status, "updated_at": now}
    if error is not None:
        values.update(last_error=error, last_error_at=now)
    connection.execute(table.update().where(table.c.name == name).values(values))


def reported_status(
    row: RegisteredProjection | None,
    has_rows: bool,
    now: datetime | None = None,
    *,
    changed: bool = False,
) -> str:
    """The status to show for a projection: its row's, unless the row says running and
    its runner went silent; for a projection with no row, whether its tables hold rows
    anyway (filled by replay or a batch job, not by a runner). ``changed``: its
    tables were built under another definition than the one loaded now (see
    :func:`definition_changed`); that outweighs what the row says, since a runner
    of the loaded definition stops on it, and one of the former keeps the tables
    of the former."""
    if changed and row is not None and row.status == STATUS_REBUILDING:
        since = f"{row.updated_at:%Y-%m-%d %H:%M:%S}"
        return f"rebuilding since {since}: the live tables serve until the swap"
    if changed and row is not None:
        return rebuild_needed_message(row.name)
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
    fingerprint: str | None = None
    """The definition the tables were built under; None in a row older than fingerprints."""


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
