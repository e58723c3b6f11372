"""The event index in chunks: table scope, row-key hash, chunk, packed log ranks

Revision ID: eventplatform_0002
Revises: eventplatform_0001
Create Date: 2026-11-21

Entries of the first index held the projection and table names, the row key
as JSON text, the position and the event id, one per contributing event. An
entry is now ``(scope, row_hash, chunk, ranks)``: a 32-bit hash of projection
and table name, a 64-bit hash of the row key's JSON text, and up to 32 log
ranks (topic index among the projection's sorted topics, partition, offset;
8 bytes each, little-endian). Chunk -1 is the row key's open entry; a full
one is sealed under its smallest rank. The upgrade converts existing entries
into sealed chunks and an open remainder; a projection missing from
``ep_projections`` has its topics taken from its own entries.

The downgrade restores the old table empty: hashes cannot be turned back
into keys. Corrections of events applied before the downgrade then find no
index entries for them.
"""

from __future__ import annotations

import hashlib
import struct
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "eventplatform_0002"
down_revision: str | Sequence[str] | None = "eventplatform_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAME_LENGTH = 200
TOPIC_LENGTH = 249
EVENT_ID_LENGTH = 36
RANK_PARTITION_BITS = 16
RANK_OFFSET_BITS = 40
CHUNK = 10_000
OPEN_CHUNK = -1
RANKS_PER_CHUNK = 32
FULL = f"chunk = {OPEN_CHUNK} AND length(ranks) >= {RANKS_PER_CHUNK * 8}"


def upgrade() -> None:
    op.create_table(
        "ep_event_index_v2",
        sa.Column("scope", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("row_hash", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("chunk", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("ranks", sa.LargeBinary(), nullable=False),
        sqlite_with_rowid=False,
    )
    _convert(op.get_bind())
    op.drop_table("ep_event_index")
    op.rename_table("ep_event_index_v2", "ep_event_index")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER INDEX ep_event_index_v2_pkey RENAME TO ep_event_index_pkey")
    op.create_index(
        "ep_event_index_full",
        "ep_event_index",
        ["scope"],
        sqlite_where=sa.text(FULL),
        postgresql_where=sa.text(FULL),
    )


def downgrade() -> None:
    op.drop_index("ep_event_index_full", "ep_event_index")
    op.drop_table("ep_event_index")
    op.create_table(
        "ep_event_index",
        sa.Column("projection", sa.String(NAME_LENGTH), primary_key=True),
        sa.Column("table_name", sa.String(NAME_LENGTH), primary_key=True),
        sa.Column("row_key", sa.Text(), primary_key=True),
        sa.Column("topic", sa.String(TOPIC_LENGTH), primary_key=True),
        sa.Column("partition", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("offset", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("event_id", sa.String(EVENT_ID_LENGTH), nullable=False),
    )


def _convert(connection: Any) -> None:
    old = sa.table(
        "ep_event_index",
        *(sa.column(n) for n in ("projection", "table_name", "row_key", "topic", "partition")),
        sa.column("offset"),
    )
    new = sa.table(
        "ep_event_index_v2", *(sa.column(n) for n in ("scope", "row_hash", "chunk", "ranks"))
    )
    registry = sa.table("ep_projections", sa.column("name"), sa.column("topics", sa.JSON()))
    topics = {name: list(value) for name, value in connection.execute(sa.select(registry))}
    for (name,) in connection.execute(sa.select(old.c.projection).distinct()).all():
        if name not in topics:
            query = sa.select(old.c.topic).where(old.c.projection == name).distinct()
            topics[name] = sorted(connection.execute(query).scalars())
    ranks: dict[tuple[int, int], list[int]] = defaultdict(list)
    for projection, table_name, row_key, topic, partition, offset in connection.execute(
        sa.select(old)
    ):
        if topic not in topics[projection]:
            continue  # a topic the projection no longer reads: its rank is undefined
        index = topics[projection].index(topic)
        key = (_hash(f"{projection}\0{table_name}", 4), _hash(row_key, 8))
        ranks[key].append((index << RANK_PARTITION_BITS | partition) << RANK_OFFSET_BITS | offset)
    rows = []
    for (scope, row_hash), found in ranks.items():
        found.sort()
        for start in range(0, len(found), RANKS_PER_CHUNK):
            chunk = found[start : start + RANKS_PER_CHUNK]
            rows.append(
                {
                    "scope": scope,
                    "row_hash": row_hash,
                    "chunk": chunk[0] if len(chunk) == RANKS_PER_CHUNK else OPEN_CHUNK,
                    "ranks": struct.pack(f"<{len(chunk)}q", *chunk),
                }
            )
    for start in range(0, len(rows), CHUNK):
        connection.execute(sa.insert(new), rows[start : start + CHUNK])


def _hash(text: str, size: int) -> int:
    digest = hashlib.blake2b(text.encode(), digest_size=size).digest()
    return int.from_bytes(digest, "big", signed=True)
