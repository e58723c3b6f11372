"""The registry keeps each projection's definition fingerprint: ep_projections.fingerprint

Revision ID: eventplatform_0004
Revises: eventplatform_0003
Create Date: 2026-11-28

``fingerprint`` is the SHA-256 (64 hex digits) of what decides a
projection's rows when its tables were built (see
``eventplatform.projections.fingerprint``). Existing rows get NULL: their
tables were built before fingerprints were kept, and the next runner adopts
its definition's fingerprint. The downgrade drops the column.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "eventplatform_0004"
down_revision: str | Sequence[str] | None = "eventplatform_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FINGERPRINT_LENGTH = 64


def upgrade() -> None:
    with op.batch_alter_table("ep_projections") as batch:
        batch.add_column(sa.Column("fingerprint", sa.String(FINGERPRINT_LENGTH), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ep_projections") as batch:
        batch.drop_column("fingerprint")
