"""The activity app's projection tables, and the views analysts query

Revision ID: activity_0001
Revises:
Create Date: 2026-11-24 03:07:43.006592
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "activity_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("activity",)
depends_on: str | Sequence[str] | None = "eventplatform_0001"


class View:
    """A view whose SQL may differ by dialect (``{duration}``: seconds between two times)."""

    def __init__(self, name: str, select: str) -> None:
        self.name = name
        self.select = select

    def create(self, dialect: str) -> str:
        if dialect == "postgresql":
            duration = "EXTRACT(EPOCH FROM last_seen_at - started_at)"
        else:
            duration = "(julianday(last_seen_at) - julianday(started_at)) * 86400.0"
        return f"CREATE VIEW {self.name} AS {self.select.format(duration=duration)}"


VIEWS = (
    View(
        "activity_page_traffic",
        "SELECT granularity, bucket, path, SUM(views) AS views, COUNT(*) AS visitors "
        "FROM activity_page_visitors WHERE views > 0 GROUP BY granularity, bucket, path",
    ),
    View(
        "activity_session_summary",
        "SELECT session_id, visitor, started_at, last_seen_at, "
        "{duration} AS duration_s, landing_path, exit_path, referrer_host, "
        "pages, clicks, searches, events, ended, "
        "CASE WHEN pages <= 1 THEN 1 ELSE 0 END AS bounced "
        "FROM activity_sessions",
    ),
    View(
        "activity_signup_funnel",
        "SELECT day, "
        "SUM(CASE WHEN step >= 1 THEN 1 ELSE 0 END) AS landed, "
        "SUM(CASE WHEN step >= 2 THEN 1 ELSE 0 END) AS saw_pricing, "
        "SUM(CASE WHEN step >= 3 THEN 1 ELSE 0 END) AS reached_signup "
        "FROM activity_funnel GROUP BY day",
    ),
)


def upgrade() -> None:
    op.create_table(
        "activity_funnel",
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("day", sa.Date(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id"),
    )
    op.create_table(
        "activity_page_visitors",
        sa.Column("granularity", sa.String(length=8), nullable=False),
        sa.Column("bucket", sa.DateTime(timezone=True), nullable=False),
        sa.Column("path", sa.String(length=512), nullable=False),
        sa.Column("visitor", sa.String(length=128), nullable=False),
        sa.Column("views", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("granularity", "bucket", "path", "visitor"),
    )
    op.create_table(
        "activity_referrers",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("referrer_host", sa.String(length=255), nullable=False),
        sa.Column("sessions", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day", "referrer_host"),
    )
    op.create_table(
        "activity_search_terms",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("term", sa.String(length=256), nullable=False),
        sa.Column("searches", sa.BigInteger(), nullable=True),
        sa.Column("without_results", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day", "term"),
    )
    op.create_table(
        "activity_sessions",
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("visitor", sa.String(length=128), nullable=True),
        sa.Column("user_agent", sa.String(length=512), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("landing_path", sa.String(length=512), nullable=True),
        sa.Column("exit_path", sa.String(length=512), nullable=True),
        sa.Column("referrer_host", sa.String(length=255), nullable=True),
        sa.Column("events", sa.BigInteger(), nullable=True),
        sa.Column("pages", sa.BigInteger(), nullable=True),
        sa.Column("clicks", sa.BigInteger(), nullable=True),
        sa.Column("searches", sa.BigInteger(), nullable=True),
        sa.Column("ended", sa.Integer(), nullable=True),
        sa.Column("visitor_ep_rank", sa.BigInteger(), nullable=True),
        sa.Column("user_agent_ep_rank", sa.BigInteger(), nullable=True),
        sa.Column("landing_path_ep_rank", sa.BigInteger(), nullable=True),
        sa.Column("exit_path_ep_rank", sa.BigInteger(), nullable=True),
        sa.Column("referrer_host_ep_rank", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id"),
    )
    op.create_table(
        "activity_session_events",
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("event_id", sa.String(length=36), nullable=False),
        sa.Column("log_partition", sa.Integer(), nullable=True),
        sa.Column("log_offset", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "event_id"),
    )
    op.create_index("activity_sessions_started_at", "activity_sessions", ["started_at"])
    for view in VIEWS:
        op.execute(view.create(op.get_bind().dialect.name))


def downgrade() -> None:
    for view in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {view.name}")
    op.drop_index("activity_sessions_started_at", "activity_sessions")
    op.drop_table("activity_session_events")
    op.drop_table("activity_sessions")
    op.drop_table("activity_search_terms")
    op.drop_table("activity_referrers")
    op.drop_table("activity_page_visitors")
    op.drop_table("activity_funnel")
