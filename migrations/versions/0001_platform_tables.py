"""The platform's own tables: checkpoints, event index, corrections, dead letters, registry

Revision ID: eventplatform_0001
Revises:
Create Date: 2025-01-01

The columns mirror ``eventplatform.projections.schema`` as it stood when this
revision was written. A later change to that module needs a new revision;
``platform db check`` reports any difference between the two.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "eventplatform_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("eventplatform",)
depends_on: str | Sequence[str] | None = None

NAME_LENGTH = 200
TOPIC_LENGTH = 249
EVENT_ID_LENGTH = 36


def upgrade() -> None:
    op.create_table(
        "ep_checkpoints",
        sa.Column("projection", sa.String(NAME_LENGTH), primary_key=True),
        sa.Column("topic", sa.String(TOPIC_LENGTH), primary_key=True),
        sa.Column("partition", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
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
    op.create_table(
        "ep_corrected_events",
        sa.Column("projection", sa.String(NAME_LENGTH), primary_key=True),
        sa.Column("topic", sa.String(TOPIC_LENGTH), primary_key=True),
        sa.Column("partition", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("offset", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("event_id", sa.String(EVENT_ID_LENGTH), nullable=False),
        sa.Column("correction_offset", sa.BigInteger(), nullable=False),
        sa.Column("replacement", sa.JSON(), nullable=True),
        sa.Column("retracted", sa.Boolean(), nullable=False),
    )
    op.create_table(
        "ep_dead_letters",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True
        ),
        sa.Column("projection", sa.String(NAME_LENGTH), nullable=False),
        sa.Column("topic", sa.String(TOPIC_LENGTH), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("event_id", sa.String(EVENT_ID_LENGTH), nullable=True),
        sa.Column("event_type", sa.String(NAME_LENGTH), nullable=True),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("parked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retried_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_ep_dead_letters_projection", "ep_dead_letters", ["projection"])
    op.create_table(
        "ep_projections",
        sa.Column("name", sa.String(NAME_LENGTH), primary_key=True),
        sa.Column("group_id", sa.String(NAME_LENGTH), nullable=False),
        sa.Column("topics", sa.JSON(), nullable=False),
        sa.Column("tables", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_error_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ep_projections")
    op.drop_index("ix_ep_dead_letters_projection", table_name="ep_dead_letters")
    op.drop_table("ep_dead_letters")
    op.drop_table("ep_corrected_events")
    op.drop_table("ep_event_index")
    op.drop_table("ep_checkpoints")
