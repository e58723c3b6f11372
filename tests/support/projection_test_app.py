"""A small app the projection tests share: one event type, one projection, two tables.

``pt_totals`` (keyed by ``entity``) uses every merge operation, so a test of
the runner, of corrections or of Spark covers each one. ``pt_label_totals``
(keyed by ``label``) has only sums and counts, so corrections retract by
negation there. Its tables come from the app's Alembic branch in
``projection_test_migrations/``, exactly as a user's app would ship them.

A ``Tick`` whose label is :data:`POISON_LABEL` makes the handler raise, so
tests can drive poison events through the dead-letter path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import JSON, BigInteger, Column, MetaData, String, Text

from eventplatform.events import Envelope, Event
from eventplatform.projections.apps import App, NamedQuery
from eventplatform.projections.merge import Count, First, Fold, Latest, Max, Min, SetAdd, Sum
from eventplatform.projections.model import Projection, Row, merge_column, projection_table

APP_NAME = "projection_tests"
MIGRATIONS = Path(__file__).resolve().parent / "projection_test_migrations"
POISON_LABEL = "poison"
KEY_LENGTH = 100
TRAIL_SEPARATOR = "|"


class Tick(Event, type="pt.tick", version=1, key="entity"):
    """Something happened to ``entity``: an amount and a label."""

    entity: str
    amount: int
    label: str


def append_to_trail(trail: str, label: str) -> str:
    """The labels of an entity in log order, joined by ``|`` (order-sensitive on purpose)."""
    return f"{trail}{TRAIL_SEPARATOR}{label}" if trail else label


metadata = MetaData()

totals = projection_table(
    "pt_totals",
    metadata,
    Column("entity", String(KEY_LENGTH), primary_key=True),
    merge_column("total", BigInteger, Sum()),
    merge_column("ticks", BigInteger, Count()),
    merge_column("smallest", BigInteger, Min()),
    merge_column("largest", BigInteger, Max()),
    merge_column("last_label", Text, Latest()),
    merge_column("first_label", Text, First()),
    merge_column("labels", JSON, SetAdd()),
    merge_column("trail", Text, Fold(append_to_trail, initial="")),
)

label_totals = projection_table(
    "pt_label_totals",
    metadata,
    Column("label", String(KEY_LENGTH), primary_key=True),
    merge_column("total", BigInteger, Sum()),
    merge_column("ticks", BigInteger, Count()),
)

totals_projection = Projection(
    "projection_tests.totals",
    tables=[totals, label_totals],
    description="Per-entity and per-label totals of ticks.",
)


@totals_projection.on(Tick)
def tick_rows(envelope: Envelope[Tick]) -> Iterator[Row]:
    tick = envelope.event
    if tick.label == POISON_LABEL:
        raise ValueError(f"{POISON_LABEL!r} is not a label this projection accepts")
    yield Row(
        totals,
        entity=tick.entity,
        total=tick.amount,
        smallest=tick.amount,
        largest=tick.amount,
        last_label=tick.label,
        first_label=tick.label,
        labels=tick.label,
        trail=tick.label,
    )
    yield Row(label_totals, label=tick.label, total=tick.amount)


app = App(
    name=APP_NAME,
    projections=[totals_projection],
    event_types=[Tick],
    migrations=MIGRATIONS,
    description="The test suite's app: every merge operation on one small projection.",
    queries=[
        NamedQuery(
            "labels",
            "SELECT label, total, ticks FROM pt_label_totals ORDER BY total DESC, label",
            "The total amount and ticks of each label.",
        )
    ],
)
