"""The event index as three integers: table scope, row-key hash, log rank

Revision ID: eventplatform_0002
Revises: eventplatform_0001
Create Date: 2026-11-21

Entries of the first index held the projection and table names, the row key
as JSON text, the position and the event id. Each is now ``(scope,
row_hash, rank)``: a 32-bit hash of projection and table name, a 64-bit hash
of the row key's JSON text, and the position packed as the projection's log
rank (topic index among its sorted topics, partition, offset). The upgrade
converts existing entries; a projection missing from ``ep_projections`` has
its topics taken from its own entries.

The downgrade restores the old table empty: hashes cannot be turned back
into keys. Corrections of events applied before the downgrade then find no
index entries for them.
"""

from __future__ import annotations

import hashlib
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


def upgrade() -> None:
    op.create_table(
        "ep_event_index_v2",
        sa.Column("scope", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("row_hash", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("rank", sa.BigInteger(), primary_key=True, autoincrement=False),
        sqlite_with_rowid=False,
    )
    _convert(op.get_bind())
    op.drop_table("ep_event_index")
    op.rename_table("ep_event_index_v2", "ep_event_index")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER INDEX ep_event_index_v2_pkey RENAME TO ep_event_index_pkey")


def downgrade() -> None:
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
    new = sa.table("ep_event_index_v2", sa.column("scope"), sa.column("row_hash"), sa.column("rank"))
    registry = sa.table("ep_projections", sa.column("name"), sa.column("topics", sa.JSON()))
    topics = {name: list(value) for name, value in connection.execute(sa.select(registry))}
    for (name,) in connection.execute(sa.select(old.c.projection).distinct()).all():
        if name not in topics:
            query = sa.select(old.c.topic).where(old.c.projection == name).distinct()
            topics[name] = sorted(connection.execute(query).scalars())
    rows = connection.execute(sa.select(old)).yield_per(CHUNK)
    batch: list[dict[str, int]] = []
    for projection, table_name, row_key, topic, partition, offset in rows:
        index = topics[projection].index(topic) if topic in topics[projection] else None
        if index is None:
            continue  # a topic the projection no longer reads: its rank is undefined
        rank = (index << RANK_PARTITION_BITS | partition) << RANK_OFFSET_BITS | offset
        batch.append(
            {
                "scope": _hash(f"{projection}\0{table_name}", 4),
                "row_hash": _hash(row_key, 8),
                "rank": rank,
            }
        )
        if len(batch) >= CHUNK:
            connection.execute(sa.insert(new), batch)
            batch = []
    if batch:
        connection.execute(sa.insert(new), batch)


def _hash(text: str, size: int) -> int:
    digest = hashlib.blake2b(text.encode(), digest_size=size).digest()
    return int.from_bytes(digest, "big", signed=True)
