"""The projection store's contract, run on SQLite and on PostgreSQL.

Every test drives :class:`ProjectionStore` transactions directly, with an
in-memory log standing in for the broker when a correction reads events back.
Two projections are under test: the shared test app's (``pt_totals`` merges in
Python, ``pt_label_totals`` is invertible) and a local one whose tables merge
min, max, latest and first in SQL upserts.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson
import projection_test_app
import psycopg
import pytest
from projection_test_app import Tick, totals_projection
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Engine,
    MetaData,
    String,
    Table,
    event,
    select,
    text,
)

from eventplatform.events import Correction, Envelope, Event, Position, encode
from eventplatform.projections import migrate, schema
from eventplatform.projections import store as store_module
from eventplatform.projections import writes as writes_module
from eventplatform.projections.corrections import InvalidCorrectionError, apply_correction
from eventplatform.projections.database import SQLITE_BUSY_TIMEOUT_S, create_store_engine
from eventplatform.projections.errors import CheckpointConflictError, HandlerError
from eventplatform.projections.merge import Count, First, Latest, Max, Min, Only, Sum
from eventplatform.projections.model import (
    CONTRIBUTIONS_COLUMN,
    Projection,
    Row,
    merge_column,
    projection_table,
)
from eventplatform.projections.premerge import row_hash, row_key_text, unpack_ranks
from eventplatform.projections.statements import ADVANCE_PARTITIONS_PER_STATEMENT
from eventplatform.projections.store import ProjectionStore, StoreTransaction

PT = Tick.event_topic
BIG_BATCH_EVENTS = 1000
STATEMENTS_PER_BATCH_MAX = 12
HOLD_S = 0.5
THREAD_TIMEOUT_S = 30.0


class Reading(Event, type="storetest.reading", version=1, key="sensor"):
    sensor: str
    zone: str
    value: int | None


READINGS_METADATA = MetaData()
readings = projection_table(
    "st_readings",
    READINGS_METADATA,
    Column("sensor", String(20), primary_key=True),
    merge_column("total", BigInteger, Sum()),
    merge_column("n", BigInteger, Count()),
    merge_column("low", BigInteger, Min()),
    merge_column("high", BigInteger, Max()),
    merge_column("last", BigInteger, Latest()),
    merge_column("first", BigInteger, First()),
)
zones = projection_table(
    "st_zones",
    READINGS_METADATA,
    Column("zone", String(20), primary_key=True),
    merge_column("low", BigInteger, Min()),
    merge_column("last_sensor", String(20), Latest()),
)
readings_projection = Projection("storetest.readings", tables=[readings, zones])


@readings_projection.on(Reading)
def reading_rows(envelope: Envelope[Reading]) -> Iterator[Row]:
    reading = envelope.event
    value = reading.value
    yield Row(
        readings, sensor=reading.sensor, total=value, low=value, high=value, last=value, first=value
    )
    yield Row(zones, zone=reading.zone, low=value, last_sensor=reading.sensor)


twice_projection = Projection("storetest.twice", tables=[zones])

minutes = projection_table(
    "st_minutes",
    READINGS_METADATA,
    Column("minute", DateTime(timezone=True), primary_key=True),
    merge_column("high", BigInteger, Max()),
)
minutes_projection = Projection("storetest.minutes", tables=[minutes])
MINUTE = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)


@minutes_projection.on(Reading)
def reading_minute(envelope: Envelope[Reading]) -> Row:
    return Row(minutes, minute=MINUTE, high=envelope.event.value)


lines = projection_table(
    "st_lines",
    READINGS_METADATA,
    Column("log_offset", BigInteger, primary_key=True),
    merge_column("sensor", String(20), Only()),
    merge_column("value", BigInteger, Only()),
)
lines_projection = Projection("storetest.lines", tables=[lines])


@lines_projection.on(Reading)
def one_line_per_reading(envelope: Envelope[Reading]) -> Row:
    assert envelope.position is not None
    reading = envelope.event
    return Row(
        lines, log_offset=envelope.position.offset, sensor=reading.sensor, value=reading.value
    )


@twice_projection.on(Reading)
def two_rows_for_one_zone(envelope: Envelope[Reading]) -> Iterator[Row]:
    reading = envelope.event
    yield Row(zones, zone=reading.zone, low=reading.value)
    yield Row(zones, zone=reading.zone, last_sensor=reading.sensor)


class MemoryLog:
    """Appended records by position: the reader a correction reads its chain with."""

    def __init__(self) -> None:
        self.values: dict[Position, bytes] = {}
        self.ends: dict[tuple[str, int], int] = defaultdict(int)

    def append(self, event: Event, partition: int = 0) -> Envelope[Any]:
        if isinstance(event, Correction):
            topic, partition = event.of.topic, event.of.partition
        else:
            topic = event.event_topic
        offset = self.ends[(topic, partition)]
        self.ends[(topic, partition)] = offset + 1
        envelope = Envelope(event, position=Position(topic, partition, offset))
        self.values[envelope.ref().position] = encode(envelope).value
        return envelope

    def __call__(self, positions: Sequence[Position]) -> dict[Position, bytes]:
        return {
            position: self.values[position] for position in positions if position in self.values
        }


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = create_store_engine(database_url)
    migrate.upgrade(engine, [projection_test_app.app])
    READINGS_METADATA.create_all(engine)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def log() -> MemoryLog:
    return MemoryLog()


@pytest.fixture
def totals_store(engine: Engine) -> ProjectionStore:
    return ProjectionStore(engine, totals_projection)


@pytest.fixture
def readings_store(engine: Engine) -> ProjectionStore:
    return ProjectionStore(engine, readings_projection)


def apply_events(transaction: StoreTransaction, envelopes: Sequence[Envelope[Any]]) -> None:
    """Apply events and corrections in order, the way a runner applies a batch."""
    projection = transaction.projection
    pending: list[tuple[Envelope[Any], Any]] = []
    for envelope in envelopes:
        if isinstance(envelope.event, Correction):
            if pending:
                transaction.apply(pending)
                pending = []
            apply_correction(transaction, envelope)
            continue
        assert envelope.position is not None
        rank = projection.rank(envelope.position)
        pending.append((envelope, projection.contributions(envelope, rank)))
    if pending:
        transaction.apply(pending)


def write(store: ProjectionStore, log: MemoryLog, *envelopes: Envelope[Any]) -> None:
    with store.transaction(log) as transaction:
        apply_events(transaction, envelopes)


def rows(engine: Engine, table: Table) -> dict[Any, dict[str, Any]]:
    """The table's rows by key, bookkeeping columns included."""
    keys = [column.name for column in table.primary_key.columns]
    with engine.connect() as connection:
        found = connection.execute(select(table)).mappings().all()
    return {tuple(row[name] for name in keys): dict(row) for row in found}


def tick(entity: str, amount: int, label: str) -> Tick:
    return Tick(entity=entity, amount=amount, label=label)


def reading(sensor: str, value: int | None, zone: str = "north") -> Reading:
    return Reading(sensor=sensor, zone=zone, value=value)


# Merging ------------------------------------------------------------------


def test_sums_and_counts_merge_with_existing_rows(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    write(totals_store, log, log.append(tick("a", 5, "x")), log.append(tick("b", 1, "x")))
    write(totals_store, log, log.append(tick("a", -2, "y")), log.append(tick("a", 4, "x")))

    labels = rows(engine, projection_test_app.label_totals)
    assert {key: (row["total"], row["ticks"]) for key, row in labels.items()} == {
        ("x",): (10, 3),
        ("y",): (-2, 1),
    }
    entity_a = rows(engine, projection_test_app.totals)[("a",)]
    assert (entity_a["total"], entity_a["ticks"], entity_a[CONTRIBUTIONS_COLUMN]) == (7, 3, 3)
    assert (entity_a["smallest"], entity_a["largest"]) == (-2, 5)


def test_sql_merges_handle_null_values(
    engine: Engine, readings_store: ProjectionStore, log: MemoryLog
) -> None:
    write(readings_store, log, log.append(reading("s", None)))
    [row] = rows(engine, readings).values()
    assert (row["total"], row["n"], row["low"], row["high"]) == (0, 1, None, None)
    assert (row["last"], row["first"]) == (None, None)

    write(readings_store, log, log.append(reading("s", 5)))
    [row] = rows(engine, readings).values()
    assert (row["total"], row["n"], row["low"], row["high"]) == (5, 2, 5, 5)
    assert (row["last"], row["first"]) == (5, None)

    write(readings_store, log, log.append(reading("s", None)), log.append(reading("s", 3)))
    write(readings_store, log, log.append(reading("s", None)))
    [row] = rows(engine, readings).values()
    assert (row["total"], row["n"], row["low"], row["high"]) == (8, 5, 3, 5)
    assert (row["last"], row["first"]) == (None, None)


def test_latest_and_first_follow_the_log_rank_not_the_apply_order(
    engine: Engine, readings_store: ProjectionStore, log: MemoryLog
) -> None:
    late = log.append(reading("s", 20, zone="z"), partition=1)
    later = log.append(reading("t", 30, zone="z"), partition=1)
    early = log.append(reading("s", 10, zone="z"), partition=0)
    write(readings_store, log, later, late)
    write(readings_store, log, early)

    row = rows(engine, readings)[("s",)]
    assert (row["last"], row["first"]) == (20, 10)
    assert row["last_ep_rank"] == readings_projection.rank(late.ref().position)
    assert row["first_ep_rank"] == readings_projection.rank(early.ref().position)
    assert rows(engine, zones)[("z",)]["last_sensor"] == "t"


def test_python_merged_latest_first_and_fold_follow_the_log_rank(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    first = log.append(tick("a", 1, "p"))
    second = log.append(tick("a", 2, "q"))
    third = log.append(tick("a", 3, "r"))
    write(totals_store, log, first)
    write(totals_store, log, second, third)

    row = rows(engine, projection_test_app.totals)[("a",)]
    assert (row["first_label"], row["last_label"]) == ("p", "r")
    assert row["trail"] == "p|q|r"


def test_set_add_is_stored_as_a_sorted_json_list(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    write(totals_store, log, log.append(tick("a", 1, "pear")), log.append(tick("a", 1, "apple")))
    write(totals_store, log, log.append(tick("a", 1, "fig")), log.append(tick("a", 1, "apple")))

    with engine.connect() as connection:
        stored = connection.execute(text("SELECT labels FROM pt_totals")).scalar_one()
    listed = orjson.loads(stored) if isinstance(stored, str | bytes) else stored
    assert listed == ["apple", "fig", "pear"]


# Checkpoints --------------------------------------------------------------


def advance(store: ProjectionStore, log: MemoryLog, moves: dict[Any, Any]) -> None:
    with store.transaction(log) as transaction:
        transaction.advance(moves)


def test_checkpoints_move_by_compare_and_set(totals_store: ProjectionStore, log: MemoryLog) -> None:
    advance(totals_store, log, {(PT, 0): (None, 5), (PT, 1): (None, 2)})
    advance(totals_store, log, {(PT, 0): (5, 9)})

    assert totals_store.checkpoints([(PT, 0), (PT, 1), (PT, 2)]) == {(PT, 0): 9, (PT, 1): 2}
    assert totals_store.checkpoints([(PT, 1)]) == {(PT, 1): 2}
    with pytest.raises(CheckpointConflictError):
        advance(totals_store, log, {(PT, 0): (5, 12)})
    with pytest.raises(CheckpointConflictError):
        advance(totals_store, log, {(PT, 1): (None, 4)})
    with pytest.raises(CheckpointConflictError):
        advance(totals_store, log, {(PT, 2): (3, 4)})
    assert totals_store.checkpoints([(PT, 0), (PT, 1), (PT, 2)]) == {(PT, 0): 9, (PT, 1): 2}


def test_many_partitions_move_together_and_one_stale_one_refuses_them_all(
    totals_store: ProjectionStore, log: MemoryLog
) -> None:
    partitions = ADVANCE_PARTITIONS_PER_STATEMENT + 3  # more than one statement moves
    advance(totals_store, log, {(PT, n): (None, n) for n in range(partitions)})
    advance(totals_store, log, {(PT, n): (n, n + 10) for n in range(partitions)})
    wanted = [(PT, n) for n in range(partitions)]
    assert totals_store.checkpoints(wanted) == {(PT, n): n + 10 for n in range(partitions)}

    for stale in (0, 5, partitions - 1):
        moves = {(PT, n): (n + 10, n + 20) for n in range(partitions)}
        moves[PT, stale] = (stale + 9, stale + 20)
        with pytest.raises(CheckpointConflictError, match=f"{PT}/{stale}: checkpoint moved"):
            advance(totals_store, log, moves)
        assert totals_store.checkpoints(wanted) == {(PT, n): n + 10 for n in range(partitions)}


def test_a_stale_checkpoint_voids_the_whole_batch(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    advance(totals_store, log, {(PT, 0): (None, 1), (PT, 1): (None, 1)})
    with pytest.raises(CheckpointConflictError), totals_store.transaction(log) as transaction:
        apply_events(transaction, [log.append(tick("a", 1, "x"))])
        transaction.advance({(PT, 0): (1, 2), (PT, 1): (0, 2)})

    assert rows(engine, projection_test_app.totals) == {}
    assert rows(engine, projection_test_app.label_totals) == {}
    assert totals_store.checkpoints([(PT, 0), (PT, 1)]) == {(PT, 0): 1, (PT, 1): 1}
    with engine.connect() as connection:
        assert connection.execute(select(schema.event_index)).all() == []


def test_checkpoints_belong_to_one_projection(
    totals_store: ProjectionStore, readings_store: ProjectionStore, log: MemoryLog
) -> None:
    advance(totals_store, log, {(PT, 0): (None, 3)})
    advance(readings_store, log, {(PT, 0): (None, 7)})
    assert totals_store.checkpoints([(PT, 0)]) == {(PT, 0): 3}
    assert readings_store.checkpoints([(PT, 0)]) == {(PT, 0): 7}


# The event index and dead letters ------------------------------------------


def index_entries(engine: Engine, store: ProjectionStore) -> list[tuple[str, str, int]]:
    """The index as (table, row key text, offset); keys are found among the tables' rows."""
    tables = {scope: name for name, scope in store.scopes.items()}
    keys = {
        (name, row_hash(key)): row_key_text(key)
        for name in store.projection.plans
        for key in rows(engine, store.projection.plans[name].table)
    }
    table = schema.event_index
    with engine.connect() as connection:
        found = connection.execute(select(table.c.scope, table.c.row_hash, table.c.ranks)).all()
    entries = []
    for scope, hashed, packed in found:
        name = tables[scope]
        key = keys.get((name, hashed), f"<no row with hash {hashed}>")
        for rank in unpack_ranks(packed):
            entries.append((name, key, store.projection.position_of(rank).offset))
    return sorted(entries, key=lambda entry: (entry[0], entry[2]))


def test_the_event_index_covers_only_non_invertible_tables(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    first = log.append(tick("a", 1, "x"))
    second = log.append(tick("b", 1, "x"))
    write(totals_store, log, first, second)

    assert index_entries(engine, totals_store) == [
        ("pt_totals", '["a"]', 0),
        ("pt_totals", '["b"]', 1),
    ]


def test_an_event_with_two_rows_for_one_key_is_indexed_once(engine: Engine, log: MemoryLog) -> None:
    store = ProjectionStore(engine, twice_projection)
    first = log.append(reading("s", 4, zone="z"))
    write(store, log, first, log.append(reading("t", 2, zone="z")))

    row = rows(engine, zones)[("z",)]
    assert (row["low"], row["last_sensor"], row[CONTRIBUTIONS_COLUMN]) == (2, "t", 4)
    assert index_entries(engine, store) == [("st_zones", '["z"]', 0), ("st_zones", '["z"]', 1)]

    write(store, log, log.append(Correction(of=first, retract=True)))
    row = rows(engine, zones)[("z",)]
    assert (row["low"], row["last_sensor"], row[CONTRIBUTIONS_COLUMN]) == (2, "t", 2)
    assert index_entries(engine, store) == [("st_zones", '["z"]', 1)]


def test_index_entries_are_sealed_in_chunks_and_corrections_reach_them(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "INDEX_SEAL_EVERY_RANKS", 1)  # look after every batch
    ticks = [log.append(tick("a", number, "x")) for number in range(70)]
    for start in range(0, 70, 10):
        write(totals_store, log, *ticks[start : start + 10])
    with engine.connect() as connection:
        chunks = connection.execute(select(schema.event_index.c.chunk)).scalars().all()
    if engine.dialect.name == "sqlite":
        assert sorted(chunks) == [-1, 0]  # 40 ranks sealed once the entry held 32, 30 open
    else:
        assert sorted(chunks) == list(range(0, 70, 10))  # PostgreSQL: one entry per batch
    assert index_entries(engine, totals_store) == [("pt_totals", '["a"]', n) for n in range(70)]

    write(totals_store, log, log.append(Correction(of=ticks[3], retract=True)))

    assert [offset for *_, offset in index_entries(engine, totals_store)] == [
        n for n in range(70) if n != 3
    ]
    row = rows(engine, projection_test_app.totals)[("a",)]
    assert (row["ticks"], row["smallest"]) == (69, 0)


def test_full_index_entries_are_sealed_only_every_so_many_ranks(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    ticks = [log.append(tick("a", number, "x")) for number in range(70)]
    for start in range(0, 70, 10):
        write(totals_store, log, *ticks[start : start + 10])
    with engine.connect() as connection:
        chunks = connection.execute(select(schema.event_index.c.chunk)).scalars().all()

    if engine.dialect.name == "sqlite":  # 70 ranks appended, fewer than the sealing period
        assert store_module.INDEX_SEAL_EVERY_RANKS > 70 and chunks == [-1]
    assert index_entries(engine, totals_store) == [("pt_totals", '["a"]', n) for n in range(70)]


def test_poison_events_are_parked_with_their_error(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    poison = log.append(tick("a", 1, "poison"))
    position = poison.ref().position
    with pytest.raises(HandlerError) as raised:
        totals_projection.contributions(poison, totals_projection.rank(position))
    error = raised.value
    with totals_store.transaction(log) as transaction:
        transaction.park(position, error, log.values[position], "pt.tick")
        transaction.park(Position(PT, 0, 1), ValueError("not json"), b"\xff garbage", None)

    table = schema.dead_letters
    with engine.connect() as connection:
        parked = connection.execute(select(table).order_by(table.c.offset)).mappings().all()
    assert [row["status"] for row in parked] == [schema.DEAD_LETTER_PARKED] * 2
    assert parked[0]["projection"] == totals_projection.name
    assert (parked[0]["topic"], parked[0]["partition"], parked[0]["offset"]) == (PT, 0, 0)
    assert parked[0]["event_id"] == str(poison.event_id)
    assert parked[0]["event_type"] == "pt.tick"
    assert "poison" in parked[0]["error"]
    assert "ValueError" in parked[0]["detail"]
    assert parked[1]["event_id"] is None
    assert parked[1]["error"] == "not json"


# Corrections --------------------------------------------------------------


def test_only_keeps_the_one_event_s_values_and_a_correction_needs_no_index(
    engine: Engine, log: MemoryLog
) -> None:
    store = ProjectionStore(engine, lines_projection)
    kept, dropped, replaced = (log.append(reading(s, v)) for s, v in [("a", 1), ("b", 2), ("c", 3)])
    write(store, log, kept, dropped, replaced)
    write(
        store,
        log,
        log.append(Correction(of=dropped, retract=True)),
        log.append(Correction(of=replaced, replacement=reading("c", 30))),
    )

    found = {key: (row["sensor"], row["value"]) for key, row in rows(engine, lines).items()}
    assert found == {(0,): ("a", 1), (2,): ("c", 30)}
    assert index_entries(engine, store) == []


def test_a_row_keyed_by_a_time_is_recomputed_in_place(engine: Engine, log: MemoryLog) -> None:
    # SQLite hands the key's time back without its zone: the recompute must still find
    # the stored row and update it, not insert a second one
    store = ProjectionStore(engine, minutes_projection)
    kept, dropped = log.append(reading("s", 3)), log.append(reading("t", 8))
    write(store, log, kept, dropped)
    write(store, log, log.append(Correction(of=dropped, retract=True)))

    assert [row["high"] for row in rows(engine, minutes).values()] == [3]


def test_rows_whose_contributions_are_all_retracted_disappear(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    kept = log.append(tick("a", 0, "x"))
    dropped = log.append(tick("b", 4, "y"))
    write(totals_store, log, kept, dropped)
    write(totals_store, log, log.append(Correction(of=dropped, retract=True)))

    assert set(rows(engine, projection_test_app.totals)) == {("a",)}
    assert set(rows(engine, projection_test_app.label_totals)) == {("x",)}
    assert rows(engine, projection_test_app.label_totals)[("x",)]["total"] == 0
    assert index_entries(engine, totals_store) == [("pt_totals", '["a"]', 0)]


def test_a_replacement_moves_contributions_between_rows(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    first = log.append(tick("a", 5, "x"))
    second = log.append(tick("a", 2, "y"))
    write(totals_store, log, first, second)
    write(totals_store, log, log.append(Correction(of=first, replacement=tick("a", 1, "z"))))

    row = rows(engine, projection_test_app.totals)[("a",)]
    assert (row["total"], row["ticks"], row["smallest"], row["largest"]) == (3, 2, 1, 2)
    assert (row["first_label"], row["last_label"], row["trail"]) == ("z", "y", "z|y")
    assert row["labels"] == ["y", "z"]
    labels = rows(engine, projection_test_app.label_totals)
    assert {key: row["total"] for key, row in labels.items()} == {("y",): 2, ("z",): 1}


def test_a_replacement_recomputes_sql_merged_rows_and_moves_the_index(
    engine: Engine, readings_store: ProjectionStore, log: MemoryLog
) -> None:
    low = log.append(reading("s", 1, zone="north"))
    high = log.append(reading("t", 9, zone="north"))
    write(readings_store, log, low, high)
    replacement = reading("s", 4, zone="south")
    write(readings_store, log, log.append(Correction(of=low, replacement=replacement)))

    assert rows(engine, readings)[("s",)]["low"] == 4
    zone_rows = rows(engine, zones)
    assert {key: (row["low"], row["last_sensor"]) for key, row in zone_rows.items()} == {
        ("north",): (9, "t"),
        ("south",): (4, "s"),
    }
    assert index_entries(engine, readings_store) == [
        ("st_readings", '["s"]', 0),
        ("st_readings", '["t"]', 1),
        ("st_zones", '["south"]', 0),
        ("st_zones", '["north"]', 1),
    ]


def test_the_latest_correction_of_a_chain_wins(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    root = log.append(tick("a", 5, "x"))
    write(totals_store, log, root, log.append(tick("a", 1, "w")))
    replaced = log.append(Correction(of=root, replacement=tick("a", 10, "y")))
    retracted = log.append(Correction(of=replaced, retract=True))
    write(totals_store, log, replaced, retracted)
    assert rows(engine, projection_test_app.totals)[("a",)]["total"] == 1

    revived = log.append(Correction(of=retracted, replacement=tick("a", 7, "z")))
    write(totals_store, log, revived)

    row = rows(engine, projection_test_app.totals)[("a",)]
    assert (row["total"], row["ticks"], row["trail"]) == (8, 2, "z|w")
    labels = rows(engine, projection_test_app.label_totals)
    assert {key: row["total"] for key, row in labels.items()} == {("w",): 1, ("z",): 7}
    table = schema.corrected_events
    with engine.connect() as connection:
        [recorded] = connection.execute(select(table)).mappings().all()
    assert (recorded["offset"], recorded["correction_offset"]) == (0, 4)
    assert recorded["retracted"] is False


def test_correcting_a_parked_event_applies_only_the_replacement(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    poison = log.append(tick("a", 5, "poison"))
    position = poison.ref().position
    with totals_store.transaction(log) as transaction:
        transaction.park(position, HandlerError("poison"), log.values[position], "pt.tick")
    write(totals_store, log, log.append(Correction(of=poison, replacement=tick("a", 3, "x"))))

    row = rows(engine, projection_test_app.totals)[("a",)]
    assert (row["total"], row["ticks"], row[CONTRIBUTIONS_COLUMN]) == (3, 1, 1)
    assert rows(engine, projection_test_app.label_totals)[("x",)]["ticks"] == 1


def test_a_correction_naming_the_wrong_event_is_refused(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    root = log.append(tick("a", 5, "x"))
    write(totals_store, log, root)
    impostor = Envelope(tick("a", 1, "x"), position=root.ref().position)
    bad = log.append(Correction(of=impostor, retract=True))
    with pytest.raises(InvalidCorrectionError):
        write(totals_store, log, bad)
    assert rows(engine, projection_test_app.totals)[("a",)]["total"] == 5


# Concurrency and statements -------------------------------------------------


def test_two_concurrent_writers_wait_and_lose_no_update(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    first = log.append(tick("a", 1, "x"))
    second = log.append(tick("a", 2, "y"))
    holding = threading.Event()
    released_after: list[float] = []
    failures: list[BaseException] = []

    def hold_then_commit() -> None:
        try:
            with totals_store.transaction(log) as transaction:
                apply_events(transaction, [first])
                holding.set()
                time.sleep(HOLD_S)
                released_after.append(time.monotonic())
        except BaseException as exc:
            failures.append(exc)
            holding.set()

    holder = threading.Thread(target=hold_then_commit)
    holder.start()
    assert holding.wait(THREAD_TIMEOUT_S)
    write(totals_store, log, second)
    written_at = time.monotonic()
    holder.join(THREAD_TIMEOUT_S)

    assert not failures
    assert written_at > released_after[0]
    row = rows(engine, projection_test_app.totals)[("a",)]
    assert (row["total"], row["ticks"], row["trail"]) == (3, 2, "x|y")


def test_a_big_batch_is_a_few_multi_row_statements(
    engine: Engine, totals_store: ProjectionStore, log: MemoryLog
) -> None:
    batch = [
        log.append(tick(f"entity-{number}", number, f"label-{number % 7}"))
        for number in range(BIG_BATCH_EVENTS)
    ]
    statements: list[str] = []

    def count(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        with totals_store.transaction(log) as transaction:
            transaction.advance({(PT, 0): (None, BIG_BATCH_EVENTS)})
            apply_events(transaction, batch)
    finally:
        event.remove(engine, "before_cursor_execute", count)

    assert len(statements) <= STATEMENTS_PER_BATCH_MAX, statements
    assert len(rows(engine, projection_test_app.totals)) == BIG_BATCH_EVENTS
    assert len(index_entries(engine, totals_store)) == BIG_BATCH_EVENTS


def test_a_savepoint_undoes_the_writes_queued_in_it(
    engine: Engine, readings_store: ProjectionStore, log: MemoryLog
) -> None:
    with readings_store.transaction(log) as transaction:
        transaction.advance({(Reading.event_topic, 0): (None, 2)})
        apply_events(transaction, [log.append(reading("kept", 1, "kept-zone"))])
        with pytest.raises(LookupError), transaction.savepoint():
            apply_events(transaction, [log.append(reading("undone", 2, "undone-zone"))])
            raise LookupError("a handler failed")

    assert set(rows(engine, readings)) == {("kept",)}
    assert set(rows(engine, zones)) == {("kept-zone",)}
    assert readings_store.checkpoints([(Reading.event_topic, 0)]) == {(Reading.event_topic, 0): 2}


class CountingCursor(psycopg.Cursor[Any]):
    """A psycopg cursor that notes each statement it runs (SQLAlchemy's and the store's)."""

    executed: ClassVar[list[str]] = []

    def execute(self, query: Any, params: Any = None, **options: Any) -> Any:
        CountingCursor.executed.append(str(query))
        return super().execute(query, params, **options)


def test_a_batch_of_new_events_is_one_statement_on_postgresql(
    postgres_url: str, log: MemoryLog
) -> None:
    engine = create_store_engine(postgres_url)
    migrate.upgrade(engine, [projection_test_app.app])
    READINGS_METADATA.create_all(engine)
    store = ProjectionStore(engine, readings_projection)
    topic = Reading.event_topic
    try:
        with engine.connect() as connection:
            with store.transaction(log, connection) as transaction:
                transaction.advance({(topic, 0): (None, 1), (topic, 1): (None, 1)})
            connection.connection.driver_connection.cursor_factory = CountingCursor  # type: ignore[union-attr]
            CountingCursor.executed = []
            with store.transaction(log, connection) as transaction:
                transaction.advance({(topic, 0): (1, 4), (topic, 1): (1, 2)})
                batch = [log.append(reading(f"s{n}", n, f"z{n % 2}")) for n in range(4)]
                apply_events(transaction, batch)
        # The checkpoints' compare-and-set, both tables' upserts and the index append.
        assert len(CountingCursor.executed) == 1, CountingCursor.executed
        assert CountingCursor.executed[0].startswith("WITH ")
        assert len(rows(engine, readings)) == 4
        assert store.checkpoints([(topic, 0), (topic, 1)]) == {(topic, 0): 4, (topic, 1): 2}

        conflict = pytest.raises(CheckpointConflictError, match=f"{topic}/1: checkpoint moved")
        with conflict, store.transaction(log) as transaction:
            transaction.advance({(topic, 0): (4, 5), (topic, 1): (1, 3)})
            apply_events(transaction, [log.append(reading("late", 9, "z9"))])
        assert "late" not in {key for (key,) in rows(engine, readings)}
        assert store.checkpoints([(topic, 0), (topic, 1)]) == {(topic, 0): 4, (topic, 1): 2}
    finally:
        engine.dispose()


def test_queued_writes_go_as_one_statement_until_a_table_repeats_or_a_second_check() -> None:
    def first_check(rows: list[Any]) -> None: ...

    def second_check(rows: list[Any]) -> None: ...

    write = writes_module.QueuedWrite
    queued = [
        write("a", "INSERT A", (1,), None),
        write("b", "UPDATE B RETURNING x", (2, 3), first_check),
        write("c", "INSERT C", (), None),
        write("a", "INSERT A", (4,), None),
        write("d", "UPDATE D RETURNING y", (5,), second_check),
        write("e", "UPDATE E RETURNING z", (6,), second_check),
    ]

    assert list(writes_module.combined(queued)) == [
        (
            "WITH w0 AS (INSERT A), w1 AS (UPDATE B RETURNING x), w2 AS (INSERT C) "
            "SELECT * FROM w1",
            (1, 2, 3),
            first_check,
        ),
        (
            "WITH w0 AS (INSERT A), w1 AS (UPDATE D RETURNING y) SELECT * FROM w1",
            (4, 5),
            second_check,
        ),
        ("UPDATE E RETURNING z", (6,), second_check),
    ]
    assert list(writes_module.combined(queued[2:4])) == [
        ("WITH w0 AS (INSERT C), w1 AS (INSERT A) SELECT 1", (4,), None)
    ]


# SQLite -------------------------------------------------------------------


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(sqlite_url: str) -> None:
    engine = create_store_engine(sqlite_url)
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            timeout_ms = connection.exec_driver_sql("PRAGMA busy_timeout").scalar()
            assert timeout_ms == int(SQLITE_BUSY_TIMEOUT_S * 1000)
    finally:
        engine.dispose()
