"""Snapshots in a SQL database (SQLite or PostgreSQL), shared by every process of an
application: a :class:`~eventplatform.events.snapshots.SnapshotStore`.

One row per entity in ``eventplatform_snapshots`` (or the table named): the topic and key,
the version and offset the snapshot stands at, the fingerprint of the code that took it,
the state as JSON and the commands it remembers as JSON. The state's type is given once
(``state_type``); pydantic turns it into JSON and back, so a dataclass, a pydantic model,
a ``TypedDict`` or a plain ``dict`` of JSON values all serve.

A snapshot is a cache, so the store never fails a command on its account: a row whose
state no longer reads as ``state_type`` is no snapshot (``get`` answers None, and the
repository folds the log), a database that cannot be reached is logged and treated as
one without snapshots, and a ``put`` replaces a row only with a later version (an
upsert that only a later version wins), so processes that take snapshots of one entity
at once keep the latest, whichever commits last. Rows can be dropped at any time
(:meth:`SqlSnapshots.clear`): every entity loads the same without them.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Generic, TypeVar

import orjson
import pydantic
from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    MetaData,
    String,
    Table,
    Text,
    and_,
    delete,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from eventplatform.events.snapshots import CommandMark, Snapshot
from eventplatform.projections.database import create_store_engine

S = TypeVar("S")

TABLE_DEFAULT = "eventplatform_snapshots"

_log = logging.getLogger(__name__)


def snapshots_table(name: str = TABLE_DEFAULT, metadata: MetaData | None = None) -> Table:
    """The table's declaration, for a migration that creates it."""
    return Table(
        name,
        metadata if metadata is not None else MetaData(),
        Column("topic", String(249), primary_key=True),
        Column("entity_key", String, primary_key=True),
        Column("version", BigInteger, nullable=False),
        Column("next_offset", BigInteger, nullable=False),
        Column("fingerprint", String, nullable=False),
        Column("state", Text, nullable=False),
        Column("commands", Text, nullable=False),
    )


class SqlSnapshots(Generic[S]):
    """See the module docstring. ``database`` is an engine or a URL; the table is created
    when it does not exist, unless ``create=False`` (a migration creates it)."""

    def __init__(
        self,
        database: Engine | str,
        state_type: type[S] | Any,
        *,
        table: str = TABLE_DEFAULT,
        create: bool = True,
    ) -> None:
        self.engine = create_store_engine(database) if isinstance(database, str) else database
        self._owns_engine = isinstance(database, str)
        if self.engine.dialect.name not in ("postgresql", "sqlite"):
            raise ValueError(
                f"snapshots are kept in SQLite or PostgreSQL, not {self.engine.dialect.name}"
            )
        self.table = snapshots_table(table)
        self._state: pydantic.TypeAdapter[S] = pydantic.TypeAdapter(state_type)
        if create:
            self.table.metadata.create_all(self.engine, checkfirst=True)

    def get(self, topic: str, key: str) -> Snapshot[S] | None:
        """The entity's snapshot; None when there is none, when it no longer reads, or
        when the database cannot be reached (logged: the log alone decides)."""
        table = self.table
        try:
            with self.engine.connect() as connection:
                row = connection.execute(
                    select(table).where(and_(table.c.topic == topic, table.c.entity_key == key))
                ).first()
        except SQLAlchemyError as exc:
            _log.warning("snapshots of %s/%s not read: %s", topic, key, exc)
            return None
        if row is None:
            return None
        try:
            state = self._state.validate_json(row.state)
            commands = tuple(
                CommandMark(uuid.UUID(mark[0]), mark[1], mark[2], mark[3])
                for mark in orjson.loads(row.commands)
            )
        except (pydantic.ValidationError, ValueError, TypeError, IndexError):
            return None  # taken by other code: no snapshot, the log decides
        return Snapshot(topic, key, row.version, row.next_offset, state, commands, row.fingerprint)

    def put(self, snapshot: Snapshot[S]) -> None:
        """Keep ``snapshot`` unless the table holds one of the entity at its version or
        later; a database that cannot be reached is logged, and the snapshot dropped."""
        values = {
            "topic": snapshot.topic,
            "entity_key": snapshot.key,
            "version": snapshot.version,
            "next_offset": snapshot.offset,
            "fingerprint": snapshot.fingerprint,
            "state": self._state.dump_json(snapshot.state).decode(),
            "commands": orjson.dumps(
                [[str(m.command_id), m.offset, m.version, m.count] for m in snapshot.commands]
            ).decode(),
        }
        table = self.table
        module: Any = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        statement = module.insert(table).values(**values)
        changed = {name: statement.excluded[name] for name in values}
        try:
            with self.engine.begin() as connection:
                connection.execute(
                    statement.on_conflict_do_update(
                        index_elements=["topic", "entity_key"],
                        set_=changed,
                        where=table.c.version < snapshot.version,
                    )
                )
        except SQLAlchemyError as exc:
            _log.warning("snapshot of %s/%s not kept: %s", snapshot.topic, snapshot.key, exc)

    def clear(self, topic: str | None = None) -> None:
        """Drop every snapshot (of ``topic``)."""
        statement = delete(self.table)
        if topic is not None:
            statement = statement.where(self.table.c.topic == topic)
        with self.engine.begin() as connection:
            connection.execute(statement)

    def close(self) -> None:
        """Dispose of the engine when the store made it from a URL."""
        if self._owns_engine:
            self.engine.dispose()
