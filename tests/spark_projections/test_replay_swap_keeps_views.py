"""What analysts built on projection tables survives a rebuild's swap.

On PostgreSQL the swap renames tables, and views follow a renamed table, so
the swap must drop and recreate them over the new tables, and give the new
tables and views the grants and comments the old ones had. On SQLite the
swap replaces rows, so views simply read the new rows. Either way the
views answer from the rebuilt tables afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import projection_test_app
import psycopg
import pytest
from projection_test_app import Tick, totals_projection
from replay_databases import ranges
from sqlalchemy import Connection, text

from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.projections.database import create_store_engine
from eventplatform.spark_projections.replay import rebuild
from eventplatform.testing import POSTGRES_ADMIN_URL, BrokerProcess, fresh_database, running_broker

EVENTS = 30
# A definition and comments with the characters drivers and SQLAlchemy treat specially.
BIG_TOTALS = (
    "CREATE VIEW big_totals AS SELECT entity, total, labels FROM pt_totals "
    "WHERE total > 100 AND trail NOT LIKE '%:skip%'"
)
BIGGEST = "CREATE VIEW biggest AS SELECT max(total) AS total FROM big_totals"
LABEL_SUMS = "CREATE MATERIALIZED VIEW label_sums AS SELECT label, total FROM pt_label_totals"
COMMENT = "Totals per entity; 100% rebuilt :entity's"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker"), ["num.partitions=2"]) as process:
        with EventProducer(process.bootstrap) as producer:
            producer.append(
                [Tick(entity=f"e{n % 5}", amount=n * 3, label=f"l{n % 3}") for n in range(EVENTS)]
            )
        yield process


@pytest.fixture
def reader_role() -> Iterator[str]:
    role = f"ep_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} NOLOGIN")
    try:
        yield role
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {role}")


def rebuild_all(spark: Any, broker: BrokerProcess, url: str) -> None:
    options = {"bootstrap.servers": broker.bootstrap, "dataDir": str(broker.data_dir)}
    ends = ranges(broker.bootstrap, Tick.event_topic, {})
    summary = rebuild(spark, totals_projection, url, ends, options, from_start=True)
    assert summary.events_applied == EVENTS


def execute(connection: Connection, statement: str) -> None:
    """``statement`` as written, without parameters (its ``%`` and ``:`` are literal)."""
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(statement)
    finally:
        cursor.close()


def rows(connection: Connection, query: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in connection.execute(text(query))]


def expected_big(connection: Connection) -> list[tuple[Any, ...]]:
    return rows(connection, "SELECT entity, total FROM pt_totals WHERE total > 100 ORDER BY 1")


def test_views_on_sqlite_read_the_rebuilt_rows(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    with fresh_database("sqlite", tmp_path) as url:
        migrate.upgrade(url, [projection_test_app.app])
        engine = create_store_engine(url)
        with engine.begin() as connection:
            execute(connection, BIG_TOTALS)
            execute(connection, BIGGEST)
        rebuild_all(spark, broker, url)
        with engine.connect() as connection:
            big = rows(connection, "SELECT entity, total FROM big_totals ORDER BY 1")
            assert big and big == expected_big(connection)
            assert rows(connection, "SELECT total FROM biggest") == [(big[-1][1],)]
        engine.dispose()


def test_views_grants_and_comments_on_postgresql_survive_the_swap(
    spark: Any, broker: BrokerProcess, tmp_path: Path, reader_role: str
) -> None:
    with fresh_database("postgresql", tmp_path) as url:
        migrate.upgrade(url, [projection_test_app.app])
        engine = create_store_engine(url)
        with engine.begin() as connection:
            for statement in (BIG_TOTALS, BIGGEST, LABEL_SUMS):
                execute(connection, statement)
            execute(connection, "CREATE UNIQUE INDEX label_sums_label ON label_sums (label)")
            for relation in ("pt_totals", "big_totals", "biggest", "label_sums"):
                execute(connection, f"GRANT SELECT ON {relation} TO {reader_role}")
            literal = COMMENT.replace("'", "''")
            execute(connection, f"COMMENT ON TABLE pt_totals IS '{literal}'")
            execute(connection, f"COMMENT ON COLUMN pt_totals.total IS '{literal}'")
            execute(connection, f"COMMENT ON VIEW big_totals IS '{literal}'")

        rebuild_all(spark, broker, url)

        with engine.connect() as connection:
            big = rows(connection, "SELECT entity, total FROM big_totals ORDER BY 1")
            assert big and big == expected_big(connection)
            assert rows(connection, "SELECT total FROM biggest") == [(big[-1][1],)]
            assert rows(connection, "SELECT label, total FROM label_sums ORDER BY 1") == rows(
                connection, "SELECT label, total FROM pt_label_totals ORDER BY 1"
            )
            for relation in ("pt_totals", "big_totals", "biggest", "label_sums"):
                granted = connection.execute(
                    text("SELECT has_table_privilege(:role, :relation, 'SELECT')"),
                    {"role": reader_role, "relation": relation},
                ).scalar()
                assert granted, relation
            assert (
                connection.execute(
                    text("SELECT obj_description('pt_totals'::regclass, 'pg_class')")
                ).scalar()
                == COMMENT
            )
            assert (
                connection.execute(
                    text("SELECT obj_description('big_totals'::regclass, 'pg_class')")
                ).scalar()
                == COMMENT
            )
            assert (
                connection.execute(
                    text(
                        "SELECT col_description(attrelid, attnum) FROM pg_attribute "
                        "WHERE attrelid = 'pt_totals'::regclass AND attname = 'total'"
                    )
                ).scalar()
                == COMMENT
            )
            assert rows(
                connection, "SELECT indexname FROM pg_indexes WHERE tablename = 'label_sums'"
            ) == [("label_sums_label",)]
            leftovers = rows(
                connection,
                "SELECT relname FROM pg_class WHERE relname LIKE '%\\_\\_ep\\_%' ESCAPE '\\'",
            )
            assert leftovers == []
        engine.dispose()
