"""The projection test app's tables: pt_totals and pt_label_totals

Revision ID: projection_tests_0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "projection_tests_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("projection_tests",)
depends_on: str | Sequence[str] | None = "eventplatform_0001"

KEY_LENGTH = 100


def upgrade() -> None:
    op.create_table(
        "pt_totals",
        sa.Column("entity", sa.String(KEY_LENGTH), primary_key=True),
        sa.Column("total", sa.BigInteger(), nullable=True),
        sa.Column("ticks", sa.BigInteger(), nullable=True),
        sa.Column("smallest", sa.BigInteger(), nullable=True),
        sa.Column("largest", sa.BigInteger(), nullable=True),
        sa.Column("last_label", sa.Text(), nullable=True),
        sa.Column("first_label", sa.Text(), nullable=True),
        sa.Column("labels", sa.JSON(), nullable=True),
        sa.Column("trail", sa.Text(), nullable=True),
        sa.Column("last_label_ep_rank", sa.BigInteger(), nullable=True),
        sa.Column("first_label_ep_rank", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "pt_label_totals",
        sa.Column("label", sa.String(KEY_LENGTH), primary_key=True),
        sa.Column("total", sa.BigInteger(), nullable=True),
        sa.Column("ticks", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pt_label_totals")
    op.drop_table("pt_totals")
