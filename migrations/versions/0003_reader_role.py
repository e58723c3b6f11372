"""A read-only role for analysts on PostgreSQL: eventplatform_reader

Revision ID: eventplatform_0003
Revises: eventplatform_0002
Create Date: 2026-11-24

On PostgreSQL the upgrade creates the role ``eventplatform_reader`` (no
login: grant it to analysts' login roles, ``GRANT eventplatform_reader TO
alice``) unless it exists, lets it use the schema and read every table and
view in it, and makes tables and views the migrating role creates later
(apps' tables, the tables a rebuild swaps in) readable by it too. Roles
belong to the whole server, so the downgrade only takes this database's
grants back; the role stays. SQLite has no roles: nothing to do there.
"""

from __future__ import annotations

from alembic import op

revision = "eventplatform_0003"
down_revision = "eventplatform_0002"
branch_labels = None
depends_on = None

READER_ROLE = "eventplatform_reader"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"""
        DO $$
        BEGIN
            CREATE ROLE {READER_ROLE} NOLOGIN;
        EXCEPTION WHEN duplicate_object THEN
            NULL;  -- made by another database's migration on this server
        END
        $$
        """
    )
    op.execute(f"GRANT USAGE ON SCHEMA public TO {READER_ROLE}")
    op.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {READER_ROLE}")
    op.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {READER_ROLE}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM {READER_ROLE}"
    )
    op.execute(f"REVOKE SELECT ON ALL TABLES IN SCHEMA public FROM {READER_ROLE}")
    op.execute(f"REVOKE USAGE ON SCHEMA public FROM {READER_ROLE}")
