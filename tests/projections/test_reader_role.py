"""The migrations' read-only role on PostgreSQL: analysts granted it read every projection
table, including ones created later, and cannot write."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from eventplatform.apps.activity_tracking import app
from eventplatform.cli import main
from eventplatform.projections import migrate
from eventplatform.testing import POSTGRES_ADMIN_URL, fresh_database


def test_a_reader_reads_every_table_and_writes_none(tmp_path: Path) -> None:
    analyst = f"analyst_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {analyst} LOGIN")
    try:
        with fresh_database("postgresql", tmp_path) as url:
            migrate.upgrade(url, [app])
            owner = create_engine(url)
            with owner.begin() as connection:
                connection.execute(text(f"GRANT eventplatform_reader TO {analyst}"))
                connection.execute(
                    text(
                        "INSERT INTO activity_referrers (day, referrer_host, sessions, "
                        "ep_contributions) VALUES ('2026-11-24', 'x.example', 2, 1)"
                    )
                )
                connection.execute(text("CREATE TABLE later_table (n INTEGER)"))  # after 0003
                connection.execute(text("INSERT INTO later_table VALUES (7)"))
            owner.dispose()
            as_analyst = make_url(url).set(username=analyst).render_as_string(False)
            reader = create_engine(as_analyst)
            with reader.connect() as connection:
                assert connection.execute(
                    text("SELECT referrer_host, sessions FROM activity_referrers")
                ).all() == [("x.example", 2)]
                assert connection.execute(text("SELECT n FROM later_table")).scalar() == 7
                with pytest.raises(Exception, match="permission denied"):
                    connection.execute(text("DELETE FROM activity_referrers"))
            reader.dispose()
            listed = CliRunner().invoke(
                main,
                ["query", "SELECT COUNT(*) AS n FROM activity_referrers", "--database", as_analyst],
            )
            assert listed.exit_code == 0, listed.output
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {analyst}")


def test_sqlite_upgrades_past_the_role_revision(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    migrate.upgrade(url, [app])
    engine = create_engine(url)
    with engine.connect() as connection:
        versions = {row[0] for row in connection.execute(text("SELECT * FROM ep_alembic_version"))}
    engine.dispose()
    assert migrate.PLATFORM_HEAD_REVISION in versions
