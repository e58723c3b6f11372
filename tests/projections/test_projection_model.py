"""The projection model without IO: merge operations, table plans, rows, ranks, history.

Everything here is pure: no broker, no database.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from projection_test_app import (
    Tick,
    append_to_trail,
    label_totals,
    totals,
    totals_projection,
)
from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table, Text

from eventplatform.events import Correction, Envelope, Event, EventCatalog, Position
from eventplatform.projections.errors import HandlerError, ProjectionDefinitionError
from eventplatform.projections.fold import (
    apply,
    corrected_history,
    empty_state,
    fold,
    merge_into,
    merge_states,
    visible,
)
from eventplatform.projections.merge import (
    Count,
    First,
    Fold,
    Latest,
    Max,
    Merge,
    Min,
    SetAdd,
    Sum,
)
from eventplatform.projections.model import (
    CONTRIBUTIONS_COLUMN,
    RANK_SUFFIX,
    Projection,
    Row,
    TablePlan,
    merge_column,
    projection_table,
)

TOPIC = Tick.event_topic
CATALOG = EventCatalog([Tick])


def envelope_at(event: Event, offset: int, partition: int = 0) -> Envelope[Any]:
    return Envelope(event, position=Position(event.event_topic, partition, offset))


def tick(entity: str = "a", amount: int = 1, label: str = "x") -> Tick:
    return Tick(entity=entity, amount=amount, label=label)


# Merge operations ---------------------------------------------------------


def test_sum_adds_treats_none_as_zero_and_negates() -> None:
    merge = Sum()
    assert merge.normalize(None) == 0
    assert merge.combine(None, 5) == 5
    assert merge.combine(5, -7) == -2
    assert merge.negate(4) == -4
    assert merge.invertible


def test_count_counts_contributions() -> None:
    merge = Count()
    assert merge.normalize(None) == 1
    assert merge.combine(merge.combine(None, 1), 1) == 2
    assert merge.negate(1) == -1
    assert merge.invertible


@pytest.mark.parametrize(
    ("merge", "values", "expected"),
    [
        (Min(), [3, None, -2, 5], -2),
        (Max(), [3, None, -2, 5], 5),
        (Min(), [None, None], None),
        (Max(), ["b", "a", "c"], "c"),
    ],
)
def test_min_and_max_ignore_none(merge: Merge, values: list[Any], expected: Any) -> None:
    current = None
    for value in values:
        current = merge.combine(current, merge.normalize(value))
    assert current == expected
    assert not merge.invertible
    with pytest.raises(TypeError):
        merge.negate(1)


def test_latest_and_first_choose_by_rank() -> None:
    assert Latest().wins(None, 3)
    assert Latest().wins(3, 4)
    assert not Latest().wins(4, 3)
    assert First().wins(None, 3)
    assert First().wins(4, 3)
    assert not First().wins(3, 4)
    assert Latest().ranked and First().ranked and not Sum().ranked


def test_set_add_takes_scalars_and_collections_and_drops_none() -> None:
    merge = SetAdd()
    assert merge.normalize("a") == frozenset({"a"})
    assert merge.normalize(["a", "b", None]) == frozenset({"a", "b"})
    assert merge.normalize({1, 2}) == frozenset({1, 2})
    assert merge.normalize(None) == frozenset()
    assert merge.combine(frozenset({"a"}), frozenset({"b", "a"})) == frozenset({"a", "b"})
    with pytest.raises(TypeError):
        merge.normalize({"nested": "dict"})
    with pytest.raises(TypeError):
        merge.normalize([["nested"]])


def test_set_add_is_stored_sorted_by_type_then_value() -> None:
    assert SetAdd.stored(frozenset({"b", 3, "a", 1})) == [1, 3, "a", "b"]
    assert SetAdd.stored(None) == []


def test_fold_applies_its_function_in_order_from_its_initial_value() -> None:
    merge = Fold(append_to_trail, initial="")
    current = None
    for label in ["x", "y", "z"]:
        current = merge.combine(current, label)
    assert current == "x|y|z"
    assert merge.merged_in_python and not merge.invertible
    assert Fold(append_to_trail) == Fold(append_to_trail)
    assert Fold(append_to_trail) != Fold(lambda current, value: value)


class Reading(Event, type="model.reading", version=1, key="sensor"):
    sensor: str
    value: int | None


GROUPING = projection_table(
    "grouping",
    MetaData(),
    Column("sensor", String(10), primary_key=True),
    merge_column("total", BigInteger, Sum()),
    merge_column("n", BigInteger, Count()),
    merge_column("low", BigInteger, Min()),
    merge_column("high", BigInteger, Max()),
    merge_column("last", BigInteger, Latest()),
    merge_column("first", BigInteger, First()),
)
GROUPING_PROJECTION = Projection("grouping", tables=[GROUPING])


@GROUPING_PROJECTION.on(Reading)
def reading_rows(envelope: Envelope[Reading]) -> Row:
    value = envelope.event.value
    return Row(GROUPING, sensor="s", total=value, low=value, high=value, last=value, first=value)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.integers(-100, 100)), max_size=20),
    cut=st.integers(0, 20),
)
def test_declarative_merges_do_not_depend_on_grouping(values: list[int | None], cut: int) -> None:
    """Pre-merging batches (in any order) into a stored row equals merging one by one."""
    plan = GROUPING_PROJECTION.plans["grouping"]
    contributions = [
        contribution
        for rank, value in enumerate(values)
        for contribution in GROUPING_PROJECTION.contributions(
            envelope_at(Reading(sensor="s", value=value), rank), rank
        )
    ]
    one_by_one = empty_state(plan, ("s",))
    for contribution in contributions:
        merge_into(one_by_one, contribution)
    stored = empty_state(plan, ("s",))
    for part in (contributions[cut:], contributions[:cut]):
        delta = empty_state(plan, ("s",))
        for contribution in reversed(part):
            merge_into(delta, contribution)
        merge_states(plan, stored, delta)
    assert stored == one_by_one


# Declaring tables ---------------------------------------------------------


def test_merge_column_refuses_something_that_is_not_a_merge() -> None:
    with pytest.raises(ProjectionDefinitionError, match="not a merge operation"):
        merge_column("total", BigInteger, "sum")


def test_projection_table_adds_rank_and_contribution_columns() -> None:
    names = [column.name for column in totals.columns]
    assert "last_label" + RANK_SUFFIX in names
    assert "first_label" + RANK_SUFFIX in names
    assert "total" + RANK_SUFFIX not in names
    assert CONTRIBUTIONS_COLUMN in names
    plan = TablePlan.of(totals)
    assert plan.keys == ("entity",)
    assert set(plan.merges) == {
        "total",
        "ticks",
        "smallest",
        "largest",
        "last_label",
        "first_label",
        "labels",
        "trail",
    }
    assert plan.counts == ("ticks",)


def test_a_table_needs_a_primary_key() -> None:
    with pytest.raises(ProjectionDefinitionError, match="primary key"):
        projection_table("keyless", MetaData(), merge_column("total", BigInteger, Sum()))


def test_every_non_key_column_needs_a_merge() -> None:
    with pytest.raises(ProjectionDefinitionError, match="'note' is neither a key nor"):
        projection_table(
            "unmerged",
            MetaData(),
            Column("k", String(10), primary_key=True),
            Column("note", Text),
        )


def test_a_plain_table_is_refused() -> None:
    table = Table(
        "plain",
        MetaData(),
        Column("k", String(10), primary_key=True),
        merge_column("total", BigInteger, Sum()),
    )
    with pytest.raises(ProjectionDefinitionError, match=CONTRIBUTIONS_COLUMN):
        TablePlan.of(table)


def test_only_sums_and_counts_are_invertible() -> None:
    assert TablePlan.of(label_totals).invertible
    assert not TablePlan.of(label_totals).merged_in_python
    assert not TablePlan.of(totals).invertible
    assert TablePlan.of(totals).merged_in_python


# Declaring projections ----------------------------------------------------


def test_a_projection_cannot_handle_corrections_or_one_type_twice() -> None:
    projection = Projection("twice", tables=[label_totals])
    with pytest.raises(ProjectionDefinitionError):
        projection.on(Correction)(lambda envelope: None)
    projection.on(Tick)(lambda envelope: None)
    with pytest.raises(ProjectionDefinitionError, match="already has a handler"):
        projection.on(Tick)(lambda envelope: None)


def test_the_poison_policy_is_park_or_stop() -> None:
    assert Projection("parks", tables=[]).on_error == "park"
    assert Projection("stops", tables=[], on_error="stop").on_error == "stop"
    with pytest.raises(ProjectionDefinitionError):
        Projection("ignores", tables=[], on_error="ignore")  # type: ignore[arg-type]


def test_handles_its_event_types_and_corrections_only() -> None:
    assert totals_projection.handles(Tick.event_type)
    assert totals_projection.handles(Correction.event_type)
    assert not totals_projection.handles("other.event")
    assert totals_projection.topics == (TOPIC,)
    assert totals_projection.group_id is None  # each database draws its own group


# Rows ---------------------------------------------------------------------


def counting_projection(handler: Any) -> Projection:
    projection = Projection("rows", tables=[label_totals])
    projection.on(Tick)(handler)
    return projection


def contributions_of(projection: Projection, event: Tick) -> list[Any]:
    return projection.contributions(envelope_at(event, 0), 0)


def test_a_row_is_validated_and_counted() -> None:
    projection = counting_projection(lambda e: Row(label_totals, label="x", total=e.event.amount))
    [contribution] = contributions_of(projection, tick(amount=4))
    assert contribution.key == ("x",)
    assert contribution.values == {"total": 4, "ticks": 1}
    assert contribution.rank == 0


def test_a_handler_may_return_nothing_one_row_or_many() -> None:
    assert contributions_of(counting_projection(lambda e: None), tick()) == []

    def two(envelope: Envelope[Tick]) -> Iterator[Row]:
        yield Row(label_totals, label="x", total=1)
        yield Row(label_totals, label="y", total=2)

    assert [c.key for c in contributions_of(counting_projection(two), tick())] == [("x",), ("y",)]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (Row(label_totals, label="x", colour="red"), "'colour' is not a merge column"),
        (Row(label_totals, label="x", ticks=3), "'ticks' is not a merge column"),
        (Row(label_totals, total=3), r"key column\(s\) \['label'\] not given"),
        (Row(label_totals, label=None, total=3), r"key column\(s\) \['label'\] not given"),
        (Row(totals, entity="a", total=1), "is not one of its tables"),
        ("label=x", "yielded str, not Row"),
    ],
)
def test_an_invalid_row_is_a_handler_error(row: Any, message: str) -> None:
    projection = counting_projection(lambda envelope: [row])
    with pytest.raises(HandlerError, match=message):
        contributions_of(projection, tick())


def test_a_row_for_a_same_named_foreign_table_is_refused() -> None:
    impostor = projection_table(
        label_totals.name,
        MetaData(),
        Column("label", String(10), primary_key=True),
        merge_column("total", BigInteger, Sum()),
    )
    projection = counting_projection(lambda envelope: Row(impostor, label="x", total=1))
    with pytest.raises(HandlerError, match="is not one of its tables"):
        contributions_of(projection, tick())


def test_a_value_the_merge_refuses_is_a_handler_error() -> None:
    projection = Projection("refused", tables=[totals])
    projection.on(Tick)(lambda envelope: Row(totals, entity="a", labels=[{"a": 1}]))
    with pytest.raises(HandlerError, match="labels"):
        contributions_of(projection, tick())


def test_a_raising_handler_is_a_handler_error_with_the_cause() -> None:
    with pytest.raises(HandlerError, match="poison") as raised:
        contributions_of(totals_projection, tick(label="poison"))
    assert isinstance(raised.value.__cause__, ValueError)


# Ranks --------------------------------------------------------------------


class Alpha(Event, type="alpha.happened", version=1, key="name"):
    name: str


class Omega(Event, type="omega.happened", version=1, key="name"):
    name: str


def two_topic_projection() -> Projection:
    metadata = MetaData()
    table = projection_table(
        "ranked",
        metadata,
        Column("id", Integer, primary_key=True),
        merge_column("n", BigInteger, Count()),
    )
    projection = Projection("ranked", tables=[table])
    projection.on(Omega)(lambda envelope: None)
    projection.on(Alpha)(lambda envelope: None)
    return projection


def test_ranks_order_by_topic_then_partition_then_offset() -> None:
    projection = two_topic_projection()
    assert projection.topics == ("alpha", "omega")
    positions = [
        Position("omega", 0, 0),
        Position("alpha", 2, 0),
        Position("alpha", 0, 9_000_000),
        Position("alpha", 1, 5),
        Position("omega", 1, 3),
        Position("alpha", 0, 1),
    ]
    by_rank = sorted(positions, key=projection.rank)
    assert by_rank == sorted(positions, key=lambda p: (p.topic, p.partition, p.offset))
    assert len({projection.rank(position) for position in positions}) == len(positions)
    assert projection.rank(Position("alpha", 0, 0)) == 0


def test_a_position_beyond_the_rank_range_is_refused() -> None:
    projection = two_topic_projection()
    with pytest.raises(ProjectionDefinitionError):
        projection.rank(Position("alpha", 1 << 16, 0))
    with pytest.raises(ProjectionDefinitionError):
        projection.rank(Position("alpha", 0, 1 << 40))
    with pytest.raises(ValueError):
        projection.rank(Position("elsewhere", 0, 0))


# Corrected history --------------------------------------------------------


def history(*items: Event) -> list[Envelope[Any]]:
    return [envelope_at(item, offset) for offset, item in enumerate(items)]


def correction(target: Envelope[Any], offset: int, **content: Any) -> Envelope[Any]:
    return envelope_at(Correction(of=target, **content), offset)


def amounts(envelopes: list[Envelope[Any]]) -> list[int]:
    return [envelope.event.amount for envelope in envelopes]


def test_history_without_corrections_is_unchanged() -> None:
    envelopes = history(tick(amount=1), tick(amount=2))
    assert corrected_history(envelopes, CATALOG) == envelopes


def test_a_replacement_keeps_the_original_envelope() -> None:
    first, second = history(tick(amount=1), tick(amount=2))
    fix = correction(first, 2, replacement=tick(amount=10))
    [corrected, kept] = corrected_history([first, second, fix], CATALOG)
    assert corrected.event == tick(amount=10)
    assert (corrected.event_id, corrected.position) == (first.event_id, first.position)
    assert corrected.occurred_at == first.occurred_at
    assert kept == second


def test_a_retraction_drops_the_event() -> None:
    first, second = history(tick(amount=1), tick(amount=2))
    gone = correction(first, 2, retract=True)
    assert corrected_history([first, second, gone], CATALOG) == [second]


def test_the_latest_correction_of_a_chain_decides() -> None:
    [root] = history(tick(amount=1))
    replaced = correction(root, 1, replacement=tick(amount=2))
    retracted = correction(replaced, 2, retract=True)
    revived = correction(root, 3, replacement=tick(amount=4))
    assert corrected_history([root, replaced], CATALOG)[0].event.amount == 2
    assert corrected_history([root, replaced, retracted], CATALOG) == []
    assert amounts(corrected_history([root, replaced, retracted, revived], CATALOG)) == [4]
    corrected_correction = correction(retracted, 4, replacement=tick(amount=5))
    everything = [root, replaced, retracted, revived, corrected_correction]
    assert amounts(corrected_history(everything, CATALOG)) == [5]


def test_history_keeps_the_order_of_the_originals() -> None:
    a, b, c = history(tick(amount=1), tick(amount=2), tick(amount=3))
    fixes = [
        correction(c, 3, replacement=tick(amount=30)),
        correction(a, 4, replacement=tick(amount=10)),
    ]
    assert amounts(corrected_history([a, b, c, *fixes], CATALOG)) == [10, 2, 30]


def test_corrections_of_unknown_events_are_ignored() -> None:
    [root] = history(tick(amount=1))
    stranger = Envelope(tick(amount=9), event_id=uuid.uuid4(), position=Position(TOPIC, 0, 7))
    orphan = correction(stranger, 8, retract=True)
    assert corrected_history([root, orphan], CATALOG) == [root]


def test_a_replacement_of_an_unknown_type_drops_the_event() -> None:
    class Other(Event, type="pt.other", version=1, key="entity"):
        entity: str

    [root] = history(tick(entity="a"))
    replaced = correction(root, 1, replacement=Other(entity="a"))
    assert corrected_history([root, replaced], CATALOG) == []


# The in-memory fold -------------------------------------------------------


def test_fold_of_a_corrected_history_covers_every_merge() -> None:
    a1, a2, b1, a3 = history(
        tick("a", 5, "x"), tick("a", -2, "y"), tick("b", 7, "x"), tick("a", 3, "x")
    )
    stream = [a1, a2, b1, a3, correction(a2, 4, replacement=tick("a", 9, "z"))]
    tables = fold(totals_projection, stream)
    plan = totals_projection.plans["pt_totals"]
    assert visible(plan, tables["pt_totals"][("a",)]) == {
        "entity": "a",
        "total": 17,
        "ticks": 3,
        "smallest": 3,
        "largest": 9,
        "last_label": "x",
        "first_label": "x",
        "labels": ["x", "z"],
        "trail": "x|z|x",
    }
    labels = {key: state["total"] for key, state in tables["pt_label_totals"].items()}
    assert labels == {("x",): 15, ("z",): 9}


def test_a_row_whose_contributions_are_all_retracted_disappears() -> None:
    tables: dict[str, Any] = {}
    [contribution] = [
        c
        for c in totals_projection.contributions(envelope_at(tick(), 0), 0)
        if c.plan.name == "pt_label_totals"
    ]
    apply(tables, [contribution])
    assert tables["pt_label_totals"][("x",)]["ticks"] == 1
    apply(tables, [contribution], sign=-1)
    assert tables["pt_label_totals"] == {}
