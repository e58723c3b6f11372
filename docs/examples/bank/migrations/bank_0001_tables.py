"""The bank's table: bank_balances

Revision ID: bank_0001
Revises:
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "bank_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("bank",)
depends_on: str | Sequence[str] | None = "eventplatform_0001"

ACCOUNT_MAX = 100


def upgrade() -> None:
    op.create_table(
        "bank_balances",
        sa.Column("account_id", sa.String(ACCOUNT_MAX), primary_key=True),
        sa.Column("balance", sa.BigInteger(), nullable=True),
        sa.Column("events", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("bank_balances")
