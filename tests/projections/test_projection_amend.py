"""Amending a stored row for a corrected event, without its other events.

:func:`~eventplatform.projections.fold.amend` must give exactly the row a fold
of the corrected contributions gives, or refuse (then the store recomputes
the row from its events). The property below checks that against the fold
for every merge operation; the examples check that the common corrections
are amended rather than refused; the last tests check, against real SQLite
and PostgreSQL, the stored forms the ``Min``/``Max`` rule compares.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    MetaData,
    Numeric,
    String,
    Text,
    create_engine,
    insert,
    select,
)

from eventplatform.projections.amending import stored_forms
from eventplatform.projections.fold import (
    UNKNOWN,
    NotAmendableError,
    amend,
    apply,
)
from eventplatform.projections.merge import (
    Count,
    First,
    Fold,
    Latest,
    Max,
    Min,
    Only,
    SetAdd,
    Sum,
)
from eventplatform.projections.model import Contribution, TablePlan, merge_column, projection_table
from eventplatform.testing import fresh_database


def keep_last(current: Any, value: Any) -> Any:
    return value


METADATA = MetaData()
EVERY_MERGE = projection_table(
    "amend_every_merge",
    METADATA,
    Column("k", String(10), primary_key=True),
    merge_column("total", BigInteger, Sum()),
    merge_column("n", BigInteger, Count()),
    merge_column("low", BigInteger, Min()),
    merge_column("high", BigInteger, Max()),
    merge_column("last", BigInteger, Latest()),
    merge_column("first", Text, First()),
    merge_column("tags", Text, SetAdd()),
    merge_column("same", Text, Only()),
)
FOLDED = projection_table(
    "amend_folded",
    METADATA,
    Column("k", String(10), primary_key=True),
    merge_column("n", BigInteger, Count()),
    merge_column("trail", Text, Fold(keep_last)),
)
PLAN = TablePlan.of(EVERY_MERGE)
FOLDED_PLAN = TablePlan.of(FOLDED)
KEY = ("k1",)
EXACT = {"low": lambda value: value, "high": lambda value: value}
"""Integers stored exactly, as on both databases."""


def contribution(rank: int, plan: TablePlan = PLAN, **values: Any) -> Contribution:
    """A validated contribution to the row ``KEY``: counted, sets normalized."""
    values["n"] = 1
    if "tags" in values:
        values["tags"] = SetAdd().normalize(values["tags"])
    return Contribution(plan, KEY, values, rank)


def folded(contributions: list[Contribution]) -> dict[str, Any] | None:
    tables: dict[str, Any] = {}
    apply(tables, sorted(contributions, key=lambda c: c.rank))
    return tables.get(contributions[0].plan.name, {}).get(KEY) if contributions else None


values = st.one_of(st.none(), st.integers(-3, 3))
given_columns = st.fixed_dictionaries(
    {"same": st.just("s")},  # what Only holds depends on the key alone
    optional={
        "total": st.integers(-3, 3),
        "low": values,
        "high": values,
        "last": values,
        "first": st.sampled_from(["a", "b", None]),
        "tags": st.sets(st.sampled_from(["x", "y"]), max_size=2),
    },
)


@settings(max_examples=400, deadline=None)
@given(
    history=st.lists(given_columns, min_size=1, max_size=8),
    corrected=st.data(),
    replacements=st.lists(given_columns, max_size=2),
)
def test_amending_gives_the_fold_of_the_corrected_contributions_or_refuses(
    history: list[dict[str, Any]], corrected: st.DataObject, replacements: list[dict[str, Any]]
) -> None:
    contributions = [contribution(rank * 10, **dict(v)) for rank, v in enumerate(history)]
    event = corrected.draw(st.integers(0, len(history) - 1)) * 10
    removed = [c for c in contributions if c.rank == event]
    added = [contribution(event, **dict(v)) for v in replacements]
    state = folded(contributions)
    expected = folded([c for c in contributions if c.rank != event] + added)
    try:
        amended = amend(state, removed, added, EXACT)
    except NotAmendableError:
        return
    assert amended == expected


def test_a_replaced_value_that_decided_nothing_is_amended() -> None:
    history = [contribution(10, high=5, low=5, last=5), contribution(20, high=9, low=1, last=7)]
    state = folded(history)
    removed = [history[0]]
    added = [contribution(10, high=6, low=4, last=6)]

    amended = amend(state, removed, added, EXACT)

    assert amended == folded([added[0], history[1]])
    assert amended is not None and (amended["high"], amended["last"]) == (9, 7)


def test_the_latest_value_replaced_in_place_is_amended() -> None:
    history = [contribution(10, last=5, first="a"), contribution(20, last=7, first="b")]
    added = [contribution(20, last=8, first="c")]

    amended = amend(folded(history), [history[1]], added, EXACT)

    assert amended is not None and (amended["last"], amended["first"]) == (8, "a")


@pytest.mark.parametrize(
    ("history", "removed", "added"),
    [
        # the held maximum retracted: the next one is in the other events
        ([contribution(10, high=5), contribution(20, high=9)], 1, []),
        # a tie: the other 9 may or may not be there
        ([contribution(10, high=9), contribution(20, high=9)], 1, []),
        # the latest value retracted
        ([contribution(10, last=5), contribution(20, last=7)], 1, []),
        # a set loses a value another event may also have given
        ([contribution(10, tags="x"), contribution(20, tags="x")], 1, []),
        # an empty set taken from an empty set: did any other event give the column?
        ([contribution(10, tags=[]), contribution(20, total=1)], 0, []),
    ],
)
def test_what_the_row_alone_cannot_tell_is_refused(
    history: list[Contribution], removed: int, added: list[Contribution]
) -> None:
    with pytest.raises(NotAmendableError):
        amend(folded(history), [history[removed]], added, EXACT)


def test_a_fold_is_refused_and_a_missing_row_too() -> None:
    history = [contribution(10, FOLDED_PLAN, trail="a"), contribution(20, FOLDED_PLAN, trail="b")]
    with pytest.raises(NotAmendableError):
        amend(folded(history), [history[0]], [], {})
    with pytest.raises(NotAmendableError):
        amend(None, [contribution(10, high=1)], [], EXACT)


def test_the_last_contribution_retracted_leaves_no_row() -> None:
    only = contribution(10, total=3, high=4, last=4, tags="x")

    assert amend(folded([only]), [only], [], EXACT) is None


def test_an_unknown_stored_form_is_refused() -> None:
    history = [contribution(10, high=5), contribution(20, high=9)]
    unknown = {"high": lambda value: UNKNOWN}

    with pytest.raises(NotAmendableError):
        amend(folded(history), [history[0]], [], unknown)


# The stored forms, against the databases --------------------------------------

STORED = projection_table(
    "amend_stored_forms",
    MetaData(),
    Column("k", String(10), primary_key=True),
    merge_column("count_high", BigInteger, Max()),
    merge_column("name_low", String(40), Min()),
    merge_column("seen", DateTime(timezone=True), Max()),
    merge_column("amount", Numeric(10, 2), Max()),
)
STORED_VALUES = {
    "count_high": 2**40 + 7,
    "name_low": "Zoë",
    "seen": datetime(2026, 3, 1, 12, 30, 1, 123456, tzinfo=timezone(timedelta(hours=2))),
}


@pytest.fixture(params=["sqlite", "postgresql"])
def stored_engine(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    with fresh_database(request.param, tmp_path) as url:
        engine = create_engine(url)
        STORED.metadata.create_all(engine)
        try:
            yield engine
        finally:
            engine.dispose()


def test_the_stored_forms_are_what_the_database_gives_back(stored_engine: Any) -> None:
    postgresql = stored_engine.dialect.name == "postgresql"
    forms = stored_forms(TablePlan.of(STORED), postgresql)
    with stored_engine.begin() as connection:
        connection.execute(
            insert(STORED).values(k="a", amount=0.125, ep_contributions=1, **STORED_VALUES)
        )
        stored = connection.execute(select(STORED)).mappings().one()

    assert set(forms) == set(STORED_VALUES)  # no exact form for a rounded decimal
    for name, value in STORED_VALUES.items():
        assert forms[name](value) == stored[name], name
    later = STORED_VALUES["seen"] + timedelta(microseconds=1)
    assert forms["seen"](later) != stored["seen"]
    if postgresql:  # an instant, whatever offset it is given in
        assert forms["seen"](STORED_VALUES["seen"].astimezone(UTC)) == stored["seen"]
