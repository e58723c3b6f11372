"""A projection's definition fingerprint: stable across processes, moved by what decides rows."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import evolving_app
import pytest
from evolving_app import accounts_v1, accounts_v2
from sqlalchemy import BigInteger, Column, Engine, MetaData, String, Text, select

from eventplatform.events import Envelope, Event
from eventplatform.projections import migrate, schema
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.errors import ProjectionDefinitionError
from eventplatform.projections.fingerprint import fingerprint
from eventplatform.projections.merge import Count, Fold, Latest, Max, Merge, Sum
from eventplatform.projections.model import Projection, Row, merge_column, projection_table
from eventplatform.projections.registry import definition_changed, register_projection
from eventplatform.projections.store import ProjectionStore
from tests.support import projection_test_app

ROOT = Path(__file__).resolve().parents[2]
SUBPROCESS_TIMEOUT_S = 60
PRINT_FINGERPRINT = (
    "from eventplatform.projections.fingerprint import fingerprint\n"
    "from tests.support.projection_test_app import totals_projection\n"
    "print(fingerprint(totals_projection))\n"
)


class Deposited(Event, type="fp.deposited", version=1, key="account"):
    account: str
    amount: int


def joined(current: str, value: str) -> str:
    return f"{current},{value}"


def account_projection(
    *extra: Column[Any],
    version: int = 1,
    balance: Merge | None = None,
    name: str = "fp.accounts",
    on_error: Any = "park",
) -> Projection:
    """The same definition every call (fresh tables, fresh merges), with what is given."""
    table = projection_table(
        "fp_accounts",
        MetaData(),
        Column("account", String(100), primary_key=True),
        merge_column("balance", BigInteger, balance or Sum()),
        merge_column("deposits", BigInteger, Count()),
        merge_column("memo", Text, Latest()),
        *extra,
    )
    projection = Projection(name, tables=[table], version=version, on_error=on_error)

    @projection.on(Deposited)
    def deposited(envelope: Envelope[Deposited]) -> Row:
        return Row(table, account=envelope.event.account, balance=envelope.event.amount)

    return projection


def test_the_same_definition_has_the_same_fingerprint_in_two_fresh_interpreters() -> None:
    printed = [
        subprocess.run(
            [sys.executable, "-c", PRINT_FINGERPRINT],
            capture_output=True,
            text=True,
            check=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            cwd=ROOT,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout.strip()
        for seed in ("1", "2")
    ]
    assert printed[0] == printed[1] == fingerprint(projection_test_app.totals_projection)
    assert len(printed[0]) == 64


def test_an_equal_definition_declared_again_has_the_same_fingerprint() -> None:
    assert fingerprint(account_projection()) == fingerprint(account_projection())


def test_what_changes_no_row_changes_nothing() -> None:
    plain = fingerprint(account_projection())
    assert fingerprint(account_projection(name="fp.renamed_projection")) == plain
    assert fingerprint(account_projection(on_error="stop")) == plain


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(
            lambda: account_projection(merge_column("total", BigInteger, Sum())), id="sum"
        ),
        pytest.param(lambda: account_projection(merge_column("top", BigInteger, Max())), id="max"),
        pytest.param(lambda: account_projection(balance=Max()), id="merge"),
        pytest.param(lambda: account_projection(version=2), id="version"),
        pytest.param(
            lambda: account_projection(merge_column("trail", Text, Fold(joined, initial=""))),
            id="fold",
        ),
    ],
)
def test_a_column_a_merge_or_a_version_changes_the_fingerprint(
    changed: Callable[[], Projection],
) -> None:
    assert fingerprint(changed()) != fingerprint(account_projection())


def test_a_folds_parameters_are_part_of_it() -> None:
    def with_initial(initial: str) -> Projection:
        return account_projection(merge_column("trail", Text, Fold(joined, initial=initial)))

    assert fingerprint(with_initial("")) == fingerprint(with_initial(""))
    assert fingerprint(with_initial("")) != fingerprint(with_initial("start"))


def test_a_column_type_or_nullability_changes_it() -> None:
    wider = account_projection(merge_column("note", Text, Latest()))
    narrower = account_projection(merge_column("note", String(10), Latest()))
    required = account_projection(merge_column("note", Text, Latest(), nullable=False))
    assert len({fingerprint(wider), fingerprint(narrower), fingerprint(required)}) == 3


def test_a_version_that_is_no_positive_int_is_refused() -> None:
    with pytest.raises(ProjectionDefinitionError, match="version must be a positive int"):
        account_projection(version=0)


def test_a_projection_bound_to_shadows_keeps_its_version() -> None:
    projection = account_projection(version=3)
    assert projection.bound_to(projection.tables).version == 3


@pytest.fixture
def database(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    migrate.upgrade(url, [])
    engine = create_store_engine(url)
    yield engine
    engine.dispose()


def stored(engine: Engine) -> str | None:
    table = schema.projections
    with engine.connect() as connection:
        query = select(table.c.fingerprint).where(table.c.name == evolving_app.NAME)
        return connection.execute(query).scalar_one_or_none()  # type: ignore[no-any-return]


def changed(engine: Engine, projection: Projection) -> str | None:
    with engine.connect() as connection:
        return definition_changed(connection, projection)


def checkpoint(engine: Engine) -> None:
    with engine.begin() as connection:
        connection.execute(
            schema.checkpoints.insert().values(
                projection=evolving_app.NAME,
                topic="ev",
                partition=0,
                next_offset=5,
                updated_at=datetime.now(UTC),
            )
        )


def test_the_first_run_stores_its_definitions_fingerprint(database: Engine) -> None:
    register_projection(ProjectionStore(database, accounts_v1))
    assert stored(database) == fingerprint(accounts_v1)
    assert changed(database, accounts_v1) is None


def test_another_definition_over_applied_state_is_a_change_and_is_not_stored(
    database: Engine,
) -> None:
    register_projection(ProjectionStore(database, accounts_v1))
    checkpoint(database)
    register_projection(ProjectionStore(database, accounts_v2))
    assert stored(database) == fingerprint(accounts_v1)
    assert changed(database, accounts_v2) == fingerprint(accounts_v1)
    assert changed(database, accounts_v1) is None


def test_another_definition_before_anything_was_applied_is_adopted(database: Engine) -> None:
    register_projection(ProjectionStore(database, accounts_v1))
    register_projection(ProjectionStore(database, accounts_v2))
    assert stored(database) == fingerprint(accounts_v2)
    assert changed(database, accounts_v2) is None


def test_a_row_from_before_fingerprints_takes_the_running_definitions(database: Engine) -> None:
    register_projection(ProjectionStore(database, accounts_v1))
    checkpoint(database)
    with database.begin() as connection:
        connection.execute(schema.projections.update().values(fingerprint=None))
    assert changed(database, accounts_v2) is None
    register_projection(ProjectionStore(database, accounts_v2))
    assert stored(database) == fingerprint(accounts_v2)
