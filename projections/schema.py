"""The platform's own tables, shared by every projection.

* ``ep_checkpoints``: per projection and partition, the next offset to apply.
  It is written in the same transaction as the rows, and only by
  compare-and-set, so a runner that lost its partition cannot apply a batch
  twice.
* ``ep_event_index``: for tables whose merges are not invertible, which
  events contributed to which row, so a correction can recompute those rows
  from their events. Entries are keyed by the table's scope (a 32-bit hash
  of projection and table name), a 64-bit hash of the row key and a chunk;
  ``ranks`` holds the contributing events' log ranks, 8 bytes each. On
  SQLite each row key has one open entry (chunk -1) that batches append to;
  once it holds 32 ranks or more it is sealed under its smallest rank. On
  PostgreSQL each batch adds one sealed entry per row key it touched. Either
  way a batch writes one entry per row key, not one per contribution. A
  hash collision only makes a recomputation read more events.
* ``ep_corrected_events``: per corrected event (the root of a correction
  chain), the current replacement or the retraction, and the offset of the
  correction that set it. A record the log had erased when the projection met
  it is there too, as retracted at its own offset, with an empty event id.
* ``ep_dead_letters``: poison events, with the error, for ``projections retry``.
* ``ep_projections``: the projection registry: tables, topics, status, last error,
  and the fingerprint of the definition its tables were built under (see
  :mod:`.fingerprint`; NULL in a row from before fingerprints were kept).

The DDL comes from the Alembic migrations under ``migrations/``.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    text,
)

metadata = MetaData()

NAME_LENGTH = 200
TOPIC_LENGTH = 249
EVENT_ID_LENGTH = 36
FINGERPRINT_LENGTH = 64
"""Hex digits of a definition's fingerprint (SHA-256)."""

checkpoints = Table(
    "ep_checkpoints",
    metadata,
    Column("projection", String(NAME_LENGTH), primary_key=True),
    Column("topic", String(TOPIC_LENGTH), primary_key=True),
    Column("partition", Integer, primary_key=True, autoincrement=False),
    Column("next_offset", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

INDEX_OPEN_CHUNK = -1
"""The ``chunk`` of a row key's open index entry; a sealed one has its smallest rank."""
INDEX_CHUNK_BYTES = 256
"""An open entry is sealed once it holds this many bytes of ranks (32 ranks)."""

event_index = Table(
    "ep_event_index",
    metadata,
    Column("scope", Integer, primary_key=True, autoincrement=False),
    Column("row_hash", BigInteger, primary_key=True, autoincrement=False),
    Column("chunk", BigInteger, primary_key=True, autoincrement=False),
    Column("ranks", LargeBinary, nullable=False),
    sqlite_with_rowid=False,
)
Index(
    "ep_event_index_full",
    event_index.c.scope,
    sqlite_where=text(f"chunk = {INDEX_OPEN_CHUNK} AND length(ranks) >= {INDEX_CHUNK_BYTES}"),
    postgresql_where=text(f"chunk = {INDEX_OPEN_CHUNK} AND length(ranks) >= {INDEX_CHUNK_BYTES}"),
)

corrected_events = Table(
    "ep_corrected_events",
    metadata,
    Column("projection", String(NAME_LENGTH), primary_key=True),
    Column("topic", String(TOPIC_LENGTH), primary_key=True),
    Column("partition", Integer, primary_key=True, autoincrement=False),
    Column("offset", BigInteger, primary_key=True, autoincrement=False),
    Column("event_id", String(EVENT_ID_LENGTH), nullable=False),
    Column("correction_offset", BigInteger, nullable=False),
    Column("replacement", JSON, nullable=True),
    Column("retracted", Boolean, nullable=False),
)

dead_letters = Table(
    "ep_dead_letters",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("projection", String(NAME_LENGTH), nullable=False, index=True),
    Column("topic", String(TOPIC_LENGTH), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("offset", BigInteger, nullable=False),
    Column("event_id", String(EVENT_ID_LENGTH), nullable=True),
    Column("event_type", String(NAME_LENGTH), nullable=True),
    Column("error", Text, nullable=False),
    Column("detail", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("parked_at", DateTime(timezone=True), nullable=False),
    Column("retried_at", DateTime(timezone=True), nullable=True),
)

projections = Table(
    "ep_projections",
    metadata,
    Column("name", String(NAME_LENGTH), primary_key=True),
    Column("group_id", String(NAME_LENGTH), nullable=False),
    Column("topics", JSON, nullable=False),
    Column("tables", JSON, nullable=False),
    Column("status", String(16), nullable=False),
    Column("last_error", Text, nullable=True),
    Column("last_error_at", DateTime(timezone=True), nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("fingerprint", String(FINGERPRINT_LENGTH), nullable=True),
)

DEAD_LETTER_PARKED = "parked"
DEAD_LETTER_RETRIED = "retried"
