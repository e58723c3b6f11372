"""The generated pre-merge equals the reference fold (``merge_into``), row for row."""

from __future__ import annotations

import pickle
from typing import Any

import projection_test_app
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import BigInteger, Column, Integer, MetaData, String

from eventplatform.events import TYPE_HEADER, Envelope, Event, Position, encode
from eventplatform.projections.batch import Record, Step, plan_batch
from eventplatform.projections.errors import HandlerError
from eventplatform.projections.fold import empty_state, merge_into
from eventplatform.projections.merge import Count, First, Latest, Max, Min, Sum
from eventplatform.projections.model import Projection, Row, merge_column, projection_table
from eventplatform.projections.premerge import (
    MISSING,
    BatchDelta,
    Premerger,
    row_hash,
    row_key_text,
)


class LongestName(Max):
    """A custom merge: the longest text wins (its own normalize and combine)."""

    def normalize(self, value: Any) -> Any:
        if value is not None and not isinstance(value, str):
            raise TypeError("longest takes text")
        return value

    def combine(self, current: Any, incoming: Any) -> Any:
        if incoming is None or (current is not None and len(current) >= len(incoming)):
            return current
        return incoming


metadata = MetaData()
stats = projection_table(
    "pm_stats",
    metadata,
    Column("region", String(20), primary_key=True),
    Column("shop", Integer, primary_key=True),
    merge_column("total", BigInteger, Sum()),
    merge_column("orders", BigInteger, Count()),
    merge_column("low", Integer, Min()),
    merge_column("high", Integer, Max()),
    merge_column("last_item", String(20), Latest()),
    merge_column("first_item", String(20), First()),
    merge_column("longest", String(20), LongestName()),
)
other = projection_table(
    "pm_other",
    metadata,
    Column("name", String(20), primary_key=True),
    merge_column("count", BigInteger, Count()),
)
projection = Projection("premerge.tests", tables=[stats, other])
premerger = Premerger(projection)

OPTIONAL = ("total", "low", "high", "last_item", "first_item", "longest")
values = {
    "total": st.none() | st.integers(-50, 50),
    "low": st.none() | st.integers(-50, 50),
    "high": st.none() | st.integers(-50, 50),
    "last_item": st.none() | st.sampled_from(["a", "bb", "ccc"]),
    "first_item": st.none() | st.sampled_from(["a", "bb", "ccc"]),
    "longest": st.none() | st.sampled_from(["a", "bb", "ccc", "dd"]),
}


@st.composite
def stat_rows(draw: st.DrawFn) -> dict[str, Any]:
    row: dict[str, Any] = {
        "region": draw(st.sampled_from(["north", "south"])),
        "shop": draw(st.integers(0, 2)),
    }
    for name in OPTIONAL:
        if draw(st.booleans()):
            row[name] = draw(values[name])
    return row


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    events=st.lists(st.lists(stat_rows(), min_size=1, max_size=3), max_size=30),
    ranks=st.randoms(use_true_random=False),
)
def test_the_generated_merge_equals_merge_into(events: list[list[Any]], ranks: Any) -> None:
    order = list(range(len(events)))
    ranks.shuffle(order)  # ranks out of apply order: Latest and First must follow the rank
    delta = premerger.delta()
    add = premerger.adder(delta)
    expected: dict[tuple[Any, ...], dict[str, Any]] = {}
    plan = projection.plans["pm_stats"]
    for rows, rank in zip(events, order, strict=True):
        add([Row(stats, **row) for row in rows], rank)
        for row in rows:
            contribution = projection.validate_row(Row(stats, **row), rank)
            state = expected.setdefault(contribution.key, empty_state(plan, contribution.key))
            merge_into(state, contribution)
    compiled = premerger.compiled["pm_stats"]
    table = delta.tables["pm_stats"]
    assert table.states == {key: compiled.state_row(s) for key, s in expected.items()}
    assert delta.events == len(events)
    # One index rank per event and row key, however many rows the event gave the key.
    touched = sum(len({(row["region"], row["shop"]) for row in rows}) for rows in events)
    assert sum(map(len, table.index.values())) == touched


def test_an_event_with_a_bad_row_leaves_no_trace() -> None:
    delta = premerger.delta()
    add = premerger.adder(delta)
    good = Row(stats, region="north", shop=1, total=5)
    for bad, message in [
        (Row(stats, region="north", total=1), r"key column\(s\) \['shop'\] not given"),
        (Row(stats, region="north", shop=1, orders=3), "'orders' is not a merge column"),
        (Row(stats, region="north", shop=1, nope=3), "'nope' is not a merge column"),
        (Row(stats, region="north", shop=1, longest=7), "pm_stats.longest: longest takes text"),
        (Row(metadata.tables["pm_other"], name="x", count=1), "'count' is not a merge column"),
        ("not a row", "yielded str, not Row"),
    ]:
        with pytest.raises(HandlerError, match=message):
            add([good, bad], 1)
        with pytest.raises(HandlerError, match=message):
            projection.validate_row(bad, 1)
    assert not delta
    assert all(not table and not table.index for table in delta.tables.values())


def test_a_row_may_leave_columns_out() -> None:
    compiled = premerger.compiled["pm_stats"]
    key, given = compiled.check({"region": "north", "shop": 1, "total": None})
    assert key == ("north", 1)
    assert given[0] == 0  # a sum given None adds nothing
    assert all(value is MISSING for value in given[1:])


def test_row_hashes_follow_the_key_text() -> None:
    assert row_key_text(("north", 1)) == '["north",1]'
    assert row_hash(("north", 1)) == row_hash(("north", 1))
    assert row_hash(("north", 1)) != row_hash(("north", 2))
    assert -(2**63) <= row_hash(("north", 1)) < 2**63


# Planning a batch: routing by headers --------------------------------------


class Other(Event, type="pm.other", topic="pt", key="name"):
    name: str


def record(offset: int, event: Event, headers: list[tuple[str, bytes | None]] | None) -> Record:
    value = encode(Envelope(event)).value
    return Record(Position("pt", 0, offset), value, headers)


def test_a_batch_skips_what_it_does_not_read_and_parks_what_it_cannot() -> None:
    tick = projection_test_app.Tick(entity="a", amount=2, label="x")
    tick_header = [(TYPE_HEADER, b"pt.tick")]
    records = [
        record(0, tick, tick_header),
        record(1, Other(name="n"), [(TYPE_HEADER, b"pm.other")]),  # skipped, unparsed
        record(2, Other(name="n"), tick_header),  # the header lies: still skipped
        record(3, Other(name="n"), None),  # no headers: the value says what it is
        Record(Position("pt", 0, 4), b"not json", tick_header),  # poison
        record(5, tick, None),
    ]
    plan = plan_batch(projection_test_app.totals_projection, records, {("pt", 0): None})

    assert plan.moves == {("pt", 0): (None, 6)}
    assert [type(step).__name__ for step in plan.steps] == ["BatchDelta", "Step", "BatchDelta"]
    first, poison, last = plan.steps
    assert isinstance(first, BatchDelta) and isinstance(last, BatchDelta)
    assert isinstance(poison, Step) and poison.kind == "poison"
    assert poison.record.position.offset == 4
    assert (first.events, last.events, plan.events) == (1, 1, 3)


def test_an_unpickled_projection_routes_its_modules_tables_by_name() -> None:
    # An executor unpickles copies of the tables, while the handler it imports
    # yields rows of its module's own tables.
    copy = pickle.loads(pickle.dumps(projection_test_app.totals_projection))
    assert copy.plans["pt_totals"].table is not projection_test_app.totals
    tick = projection_test_app.Tick(entity="a", amount=2, label="x")
    records = [record(offset, tick, [(TYPE_HEADER, b"pt.tick")]) for offset in range(3)]
    plan = plan_batch(copy, records, {("pt", 0): None})

    [delta] = plan.steps
    assert isinstance(delta, BatchDelta) and delta.events == 3
    assert {c.key for c in delta.tables["pt_totals"].contributions} == {("a",)}
    assert set(delta.tables["pt_label_totals"].states) == {("x",)}
    stranger = projection_table(
        "pm_stranger",
        MetaData(),
        Column("n", Integer, primary_key=True),
        merge_column("c", BigInteger, Count()),
    )
    with pytest.raises(HandlerError, match="pm_stranger is not one of its tables"):
        copy.validate_row(Row(stranger, n=1), 0)
