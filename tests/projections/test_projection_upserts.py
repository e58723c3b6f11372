"""How a batch's rows reach a table, on SQLite and PostgreSQL: every column type a
projection declares comes back as written, whatever the number of rows (one row,
the arrays of a small batch, the copy of a large one), and on PostgreSQL a small
batch's upsert is one statement text for any number of rows."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Engine,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    String,
    Text,
    Uuid,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY

from eventplatform.events import Envelope, Event, Position
from eventplatform.projections import migrate
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.merge import Count, Max, Only, Sum
from eventplatform.projections.model import Projection, Row, merge_column, projection_table
from eventplatform.projections.statements import ARRAY_ROWS_MAX
from eventplatform.projections.store import ProjectionStore, StoreTransaction

SIZES = (1, 2, 17, ARRAY_ROWS_MAX, ARRAY_ROWS_MAX + 1)
"""One row; the arrays of a small batch, up to their largest; a copied batch."""


class Sample(Event, type="upserttest.sample", version=1, key="name"):
    name: str
    number: int


METADATA = MetaData()
kinds = projection_table(
    "ut_kinds",
    METADATA,
    Column("name", String(40), primary_key=True),
    merge_column("small", Integer, Only()),
    merge_column("big", BigInteger, Sum()),
    merge_column("seen", BigInteger, Count()),
    merge_column("price", Numeric(12, 2), Sum()),
    merge_column("ratio", Float, Only()),
    merge_column("flag", Boolean, Only()),
    merge_column("label", Text, Only()),
    merge_column("stamp", DateTime(timezone=True), Max()),
    merge_column("day", Date, Only()),
    merge_column("ident", Uuid, Only()),
    merge_column("blob", LargeBinary, Only()),
    merge_column("doc", JSON, Only()),
)
kinds_projection = Projection("upserttest.kinds", tables=[kinds])
MOMENT = datetime(2026, 11, 28, 9, 30, 15, 123456, tzinfo=UTC)


def expected_row(name: str, number: int) -> dict[str, Any]:
    odd = number % 2 == 1
    return {
        "name": name,
        "small": None if number % 5 == 0 else number,
        "big": 2**40 + number,
        "seen": 1,
        "price": Decimal(number) / 4,
        "ratio": math.inf if number == 3 else number / 3,
        "flag": None if number % 3 == 0 else odd,
        "label": f'it\'s "{name}"\\ {{}},\n%s',
        "stamp": MOMENT + timedelta(minutes=number),
        "day": date(2026, 1, 1) + timedelta(days=number),
        "ident": uuid.UUID(int=number + 1),
        "blob": bytes([number % 256, 0, 255]),
        "doc": {"n": number, "list": [1, None, "x"], "nested": {"odd": odd}},
    }


@kinds_projection.on(Sample)
def kinds_row(envelope: Envelope[Sample]) -> Row:
    sample = envelope.event
    values = expected_row(sample.name, sample.number)
    del values["seen"]  # counted, not given
    return Row(kinds, **values)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_store_engine(database_url)
    migrate.upgrade(engine)
    METADATA.create_all(engine)
    try:
        yield engine
    finally:
        engine.dispose()


def apply(store: ProjectionStore, envelopes: list[Envelope[Any]]) -> None:
    projection = store.projection
    applied = []
    for envelope in envelopes:
        assert envelope.position is not None
        rank = projection.rank(envelope.position)
        applied.append((envelope, projection.contributions(envelope, rank)))
    with store.transaction(lambda _: {}) as transaction:
        transaction.apply(applied)


def samples(prefix: str, count: int, first_offset: int) -> list[Envelope[Any]]:
    topic = Sample.event_topic
    return [
        Envelope(
            Sample(name=f"{prefix}-{number}", number=number),
            position=Position(topic, 0, first_offset + number),
        )
        for number in range(count)
    ]


def stored(engine: Engine) -> dict[str, dict[str, Any]]:
    with engine.connect() as connection:
        found = connection.execute(select(kinds)).mappings().all()
    return {row["name"]: dict(row) for row in found}


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    values = {name: row[name] for name in expected_row("x", 0)}
    stamp = values["stamp"]
    if stamp is not None and stamp.tzinfo is None:  # SQLite keeps no zone
        values["stamp"] = stamp.replace(tzinfo=UTC)
    values["price"] = Decimal(values["price"]).quantize(Decimal("0.01"))
    return values


@pytest.mark.parametrize("size", SIZES)
def test_every_column_type_comes_back_as_written_whatever_the_batch_size(
    engine: Engine, size: int
) -> None:
    store = ProjectionStore(engine, kinds_projection)
    apply(store, samples("first", size, 0))
    apply(store, samples("first", size, size))  # each row again: the merges apply

    found = stored(engine)
    assert len(found) == size
    for number in range(size):
        name = f"first-{number}"
        want = expected_row(name, number)
        want["big"], want["seen"], want["price"] = 2 * want["big"], 2, 2 * want["price"]
        want["price"] = want["price"].quantize(Decimal("0.01"))
        assert comparable(found[name]) == want, name


def test_a_small_batch_upserts_with_one_statement_text_for_any_number_of_rows(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = create_store_engine(postgres_url)
    migrate.upgrade(engine)
    METADATA.create_all(engine)
    store = ProjectionStore(engine, kinds_projection)
    upsert = store.upsert(kinds_projection.plans[kinds.name])
    sent: list[str] = []
    queue = StoreTransaction.queue

    def noted(transaction: StoreTransaction, target: str, sql: str, *more: Any) -> None:
        if target == kinds.name:
            sent.append(sql)
        queue(transaction, target, sql, *more)

    monkeypatch.setattr(StoreTransaction, "queue", noted)
    try:
        offset = 0
        for size in (2, 3, 40, ARRAY_ROWS_MAX):
            apply(store, samples(f"size{size}", size, offset))
            offset += size
        assert sent == [upsert.array_sql] * 4
        assert upsert.array_sql is not None and upsert.array_sql.count("%b") == len(kinds.c)
        assert len(stored(engine)) == 2 + 3 + 40 + ARRAY_ROWS_MAX
    finally:
        engine.dispose()


ARRAY_METADATA = MetaData()
tagged = projection_table(
    "ut_tagged",
    ARRAY_METADATA,
    Column("name", String(40), primary_key=True),
    merge_column("tags", ARRAY(String(20)), Only()),
    merge_column("seen", BigInteger, Count()),
)
tagged_projection = Projection("upserttest.tagged", tables=[tagged])


@tagged_projection.on(Sample)
def tagged_row(envelope: Envelope[Sample]) -> Row:
    sample = envelope.event
    return Row(tagged, name=sample.name, tags=[f"t{sample.number}", "common"])


@pytest.mark.parametrize("size", (1, 5, 17, 40))
def test_a_table_with_an_array_column_keeps_its_arrays_whole(postgres_url: str, size: int) -> None:
    engine = create_store_engine(postgres_url)
    migrate.upgrade(engine)
    ARRAY_METADATA.create_all(engine)
    store = ProjectionStore(engine, tagged_projection)
    try:
        assert store.upsert(tagged_projection.plans[tagged.name]).array_sql is None
        apply(store, samples("tag", size, 0))
        with engine.connect() as connection:
            found = dict(connection.execute(select(tagged.c.name, tagged.c.tags)).all())
        assert found == {f"tag-{n}": [f"t{n}", "common"] for n in range(size)}
    finally:
        engine.dispose()
