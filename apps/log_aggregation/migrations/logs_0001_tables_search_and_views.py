"""The log app's tables, search index and views

Revision ID: logs_0001
Revises:
Create Date: 2026-11-25 00:47:54.344352
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "logs_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("logs",)
depends_on: str | Sequence[str] | None = "eventplatform_0001"

ROWID = "(({row}.log_partition << 40) | {row}.log_offset)"
"""The search index's rowid: the line's log position, as the ``search`` query reads it."""
SQLITE_SEARCH = (
    "CREATE VIRTUAL TABLE logs_recent_search USING fts5(message)",
    "CREATE TRIGGER logs_recent_search_insert AFTER INSERT ON logs_recent BEGIN "
    f"INSERT INTO logs_recent_search (rowid, message) VALUES ({ROWID.format(row='new')}, "
    "new.message); END",
    "CREATE TRIGGER logs_recent_search_delete AFTER DELETE ON logs_recent BEGIN "
    f"DELETE FROM logs_recent_search WHERE rowid = {ROWID.format(row='old')}; END",
    "CREATE TRIGGER logs_recent_search_update AFTER UPDATE OF message ON logs_recent BEGIN "
    f"DELETE FROM logs_recent_search WHERE rowid = {ROWID.format(row='old')}; "
    f"INSERT INTO logs_recent_search (rowid, message) VALUES ({ROWID.format(row='new')}, "
    "new.message); END",
)
POSTGRESQL_SEARCH = (
    "CREATE INDEX logs_recent_search ON logs_recent USING gin (to_tsvector('simple', message))",
)
FINGERPRINTS = (
    "CREATE VIEW logs_error_fingerprints AS "
    "SELECT e.service, e.fingerprint, t.template, e.lines, e.first_seen, e.last_seen "
    "FROM (SELECT service, fingerprint, COUNT(*) AS lines, MIN(at) AS first_seen, "
    "MAX(at) AS last_seen FROM logs_errors GROUP BY service, fingerprint) e "
    "JOIN (SELECT fingerprint, MIN(template) AS template FROM logs_error_templates "
    "GROUP BY fingerprint) t ON t.fingerprint = e.fingerprint"
)


def upgrade() -> None:
    op.create_table(
        "logs_counts",
        sa.Column("service", sa.String(length=128), nullable=False),
        sa.Column("level", sa.String(length=8), nullable=False),
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lines", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("service", "level", "minute"),
    )
    with op.batch_alter_table("logs_counts", schema=None) as batch_op:
        batch_op.create_index("logs_counts_minute", ["minute"], unique=False)

    op.create_table(
        "logs_error_templates",
        sa.Column("fingerprint", sa.String(length=16), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("template", sa.String(length=400), nullable=True),
        sa.Column("lines", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("fingerprint", "day"),
    )
    op.create_table(
        "logs_errors",
        sa.Column("log_partition", sa.Integer(), nullable=False),
        sa.Column("log_offset", sa.BigInteger(), nullable=False),
        sa.Column("service", sa.String(length=128), nullable=True),
        sa.Column("fingerprint", sa.String(length=16), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("log_partition", "log_offset"),
    )
    with op.batch_alter_table("logs_errors", schema=None) as batch_op:
        batch_op.create_index("logs_errors_at", ["at"], unique=False)
        batch_op.create_index("logs_errors_fingerprint", ["service", "fingerprint"], unique=False)

    op.create_table(
        "logs_recent",
        sa.Column("log_partition", sa.Integer(), nullable=False),
        sa.Column("log_offset", sa.BigInteger(), nullable=False),
        sa.Column("event_id", sa.String(length=36), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("service", sa.String(length=128), nullable=True),
        sa.Column("host", sa.String(length=128), nullable=True),
        sa.Column("level", sa.String(length=8), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("attributes", sa.Text(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("log_partition", "log_offset"),
    )
    with op.batch_alter_table("logs_recent", schema=None) as batch_op:
        batch_op.create_index("logs_recent_at", ["at"], unique=False)

    postgresql = op.get_bind().dialect.name == "postgresql"
    for statement in (*(POSTGRESQL_SEARCH if postgresql else SQLITE_SEARCH), FINGERPRINTS):
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS logs_error_fingerprints")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS logs_recent_search")
    else:
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS logs_recent_search_{trigger}")
        op.execute("DROP TABLE IF EXISTS logs_recent_search")
    with op.batch_alter_table("logs_recent", schema=None) as batch_op:
        batch_op.drop_index("logs_recent_at")

    op.drop_table("logs_recent")
    with op.batch_alter_table("logs_errors", schema=None) as batch_op:
        batch_op.drop_index("logs_errors_fingerprint")
        batch_op.drop_index("logs_errors_at")

    op.drop_table("logs_errors")
    op.drop_table("logs_error_templates")
    with op.batch_alter_table("logs_counts", schema=None) as batch_op:
        batch_op.drop_index("logs_counts_minute")

    op.drop_table("logs_counts")
