"""The guestbook's table: guestbook_signatures

Revision ID: guestbook_0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "guestbook_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("guestbook",)
depends_on: str | Sequence[str] | None = "eventplatform_0001"

GUEST_MAX = 100


def upgrade() -> None:
    op.create_table(
        "guestbook_signatures",
        sa.Column("guest", sa.String(GUEST_MAX), primary_key=True),
        sa.Column("signatures", sa.BigInteger(), nullable=True),
        sa.Column("last_message", sa.Text(), nullable=True),
        sa.Column("last_message_ep_rank", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("guestbook_signatures")
