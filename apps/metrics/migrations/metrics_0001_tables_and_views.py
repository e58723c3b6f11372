"""The metrics app's projection tables, and the views analysts query

Revision ID: metrics_0001
Revises:
Create Date: 2026-11-25 00:35:30.839673
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from eventplatform.apps.metrics.queries import quantiles_over

revision: str = "metrics_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("metrics",)
depends_on: str | Sequence[str] | None = "eventplatform_0001"

SAMPLE_TYPE = sa.String(length=64).with_variant(sa.String(length=64, collation="C"), "postgresql")
ROLLUP_COLUMNS = "points, total, minimum, maximum"


def _split_sample(dialect: str) -> str:
    """``last_at`` and ``last`` out of ``last_sample`` (fixed-width UTC time, ``|``, value)."""
    if dialect == "postgresql":
        return (
            "CAST(substr(last_sample, 1, 26) AS TIMESTAMP) AT TIME ZONE 'UTC' AS last_at, "
            "CAST(substr(last_sample, 28) AS DOUBLE PRECISION) AS last"
        )
    return (
        "replace(substr(last_sample, 1, 26), 'T', ' ') AS last_at, "
        "CAST(substr(last_sample, 28) AS REAL) AS last"
    )


def _value_views(dialect: str) -> dict[str, str]:
    split = _split_sample(dialect)
    return {
        "metrics_rollup_values": f"SELECT series, granularity, bucket, {ROLLUP_COLUMNS}, "
        f"{split} FROM metrics_rollups",
        "metrics_daily_values": f"SELECT series, day, {ROLLUP_COLUMNS}, {split} "
        "FROM metrics_daily_rollups",
    }


VIEWS = {
    "metrics_quantiles": quantiles_over(
        "SELECT series, granularity, bucket, value, observations FROM metrics_sketches "
        "WHERE observations > 0",
        "series, granularity, bucket",
    ),
    "metrics_daily_quantiles": quantiles_over(
        "SELECT series, day, value, observations FROM metrics_daily_sketches "
        "WHERE observations > 0",
        "series, day",
    ),
}


def upgrade() -> None:
    op.create_table(
        "metrics_daily_rollups",
        sa.Column("series", sa.String(length=1024), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("points", sa.BigInteger(), nullable=True),
        sa.Column("total", sa.Float(), nullable=True),
        sa.Column("minimum", sa.Float(), nullable=True),
        sa.Column("maximum", sa.Float(), nullable=True),
        sa.Column("last_sample", SAMPLE_TYPE, nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("series", "day"),
    )
    op.create_table(
        "metrics_daily_sketches",
        sa.Column("series", sa.String(length=1024), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("observations", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("series", "day", "value"),
    )
    op.create_table(
        "metrics_points",
        sa.Column("series", sa.String(length=1024), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event_id", sa.String(length=36), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("log_partition", sa.Integer(), nullable=True),
        sa.Column("log_offset", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("series", "at", "event_id"),
    )
    op.create_table(
        "metrics_rollups",
        sa.Column("series", sa.String(length=1024), nullable=False),
        sa.Column("granularity", sa.String(length=8), nullable=False),
        sa.Column("bucket", sa.DateTime(timezone=True), nullable=False),
        sa.Column("points", sa.BigInteger(), nullable=True),
        sa.Column("total", sa.Float(), nullable=True),
        sa.Column("minimum", sa.Float(), nullable=True),
        sa.Column("maximum", sa.Float(), nullable=True),
        sa.Column("last_sample", SAMPLE_TYPE, nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("series", "granularity", "bucket"),
    )
    op.create_table(
        "metrics_series",
        sa.Column("series", sa.String(length=1024), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("tags", sa.String(length=8192), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=True),
        sa.Column("points", sa.BigInteger(), nullable=True),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("name_ep_rank", sa.BigInteger(), nullable=True),
        sa.Column("tags_ep_rank", sa.BigInteger(), nullable=True),
        sa.Column("kind_ep_rank", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("series"),
    )
    op.create_table(
        "metrics_sketches",
        sa.Column("series", sa.String(length=1024), nullable=False),
        sa.Column("granularity", sa.String(length=8), nullable=False),
        sa.Column("bucket", sa.DateTime(timezone=True), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("observations", sa.BigInteger(), nullable=True),
        sa.Column("ep_contributions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("series", "granularity", "bucket", "value"),
    )
    views = {**VIEWS, **_value_views(op.get_bind().dialect.name)}
    for name, select in views.items():
        op.execute(f"CREATE VIEW {name} AS {select}")


def downgrade() -> None:
    for name in reversed([*VIEWS, *_value_views("any")]):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    op.drop_table("metrics_sketches")
    op.drop_table("metrics_series")
    op.drop_table("metrics_rollups")
    op.drop_table("metrics_points")
    op.drop_table("metrics_daily_sketches")
    op.drop_table("metrics_daily_rollups")
