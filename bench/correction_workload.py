"""The correction benchmark's workload: sensor readings, the three projections that fold
them, the corrections of each scenario, and the tables their corrected history must
give (``bench.corrections`` runs and times it)."""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, Column, Float, MetaData, String, Table, select

from eventplatform.events import Correction, Envelope, Event, EventRef
from eventplatform.projections.merge import Count, First, Fold, Latest, Max, Min, Sum
from eventplatform.projections.model import Projection, Row, merge_column, projection_table

SEED = 20261207
VALUE_MAX = 10_000
SMOOTHING = 0.125
"""The weight of each new value in the weighted mean (a power of two: exact in binary)."""
KEY_LENGTH = 64
FLOAT_TOLERANCE = 1e-9
READINGS_STARTED = datetime(2026, 1, 1, tzinfo=UTC)


class Reading(Event, type="benchcorrections.reading", version=1, key="sensor_id"):
    """A sensor read ``value`` at ``at``."""

    sensor_id: str
    value: int
    at: datetime


def smoothed_mean(current: float, value: int) -> float:
    """One step of the exponentially weighted mean (pure: corrections re-run it)."""
    return current + (value - current) * SMOOTHING


metadata = MetaData()

sums_table = projection_table(
    "bench_corrections_sums",
    metadata,
    Column("sensor_id", String(KEY_LENGTH), primary_key=True),
    merge_column("readings", BigInteger, Count()),
    merge_column("total", BigInteger, Sum()),
)

extremes_table = projection_table(
    "bench_corrections_extremes",
    metadata,
    Column("sensor_id", String(KEY_LENGTH), primary_key=True),
    merge_column("readings", BigInteger, Count()),
    merge_column("highest", BigInteger, Max()),
    merge_column("lowest", BigInteger, Min()),
    merge_column("latest_value", BigInteger, Latest()),
    merge_column("first_value", BigInteger, First()),
)

fold_table = projection_table(
    "bench_corrections_smoothed",
    metadata,
    Column("sensor_id", String(KEY_LENGTH), primary_key=True),
    merge_column("readings", BigInteger, Count()),
    merge_column("smoothed", Float, Fold(smoothed_mean, initial=0.0)),
)

TABLES: dict[str, Table] = {
    "invertible": sums_table,
    "non-invertible": extremes_table,
    "fold": fold_table,
}
COLUMNS: dict[str, tuple[str, ...]] = {
    "invertible": ("readings", "total"),
    "non-invertible": ("readings", "highest", "lowest", "latest_value", "first_value"),
    "fold": ("readings", "smoothed"),
}


def sums_rows(envelope: Envelope[Reading]) -> Iterator[Row]:
    reading = envelope.event
    yield Row(sums_table, sensor_id=reading.sensor_id, total=reading.value)


def extremes_rows(envelope: Envelope[Reading]) -> Iterator[Row]:
    reading = envelope.event
    yield Row(
        extremes_table,
        sensor_id=reading.sensor_id,
        highest=reading.value,
        lowest=reading.value,
        latest_value=reading.value,
        first_value=reading.value,
    )


def fold_rows(envelope: Envelope[Reading]) -> Iterator[Row]:
    reading = envelope.event
    yield Row(fold_table, sensor_id=reading.sensor_id, smoothed=reading.value)


HANDLERS = {"invertible": sums_rows, "non-invertible": extremes_rows, "fold": fold_rows}


def reading_projection(kind: str, name: str) -> Projection:
    """The ``kind`` projection under ``name`` (so in the consumer group of that name)."""
    projection = Projection(name, tables=[TABLES[kind]])
    projection.on(Reading)(HANDLERS[kind])
    return projection


CorrectionPlan = list[tuple[int, int | None]]
"""Corrections in append order: (index of the corrected event, new value or None: retract)."""


def make_readings(count: int, keys: int) -> list[Reading]:
    generator = random.Random(SEED)
    sensors = sensor_names(keys)
    return [
        Reading(
            sensor_id=sensors[generator.randrange(keys)],
            value=generator.randrange(VALUE_MAX),
            at=READINGS_STARTED + timedelta(seconds=index),
        )
        for index in range(count)
    ]


def sensor_names(keys: int) -> list[str]:
    return [f"sensor-{index:05d}" for index in range(keys)]


def replacements(
    readings: Sequence[Reading], targets: Sequence[int], generator: random.Random
) -> CorrectionPlan:
    """A new value for each target, always different from the value it has by then."""
    current: dict[int, int] = {}
    plan: CorrectionPlan = []
    for index in targets:
        old = current.get(index, readings[index].value)
        new = (old + 1 + generator.randrange(VALUE_MAX - 1)) % VALUE_MAX
        current[index] = new
        plan.append((index, new))
    return plan


def corrections_of(
    readings: Sequence[Reading], refs: Sequence[EventRef], plan: CorrectionPlan
) -> list[Correction]:
    """The plan's corrections, each naming its original by the ref its append returned."""
    # Correction takes a ref and an event, and turns them into its fields' types.
    corrections = []
    for index, value in plan:
        if value is None:
            corrections.append(Correction(of=refs[index], retract=True))  # type: ignore[arg-type]
            continue
        original = readings[index]
        replacement = Reading(sensor_id=original.sensor_id, value=value, at=original.at)
        corrections.append(
            Correction(of=refs[index], replacement=replacement)  # type: ignore[arg-type]
        )
    return corrections


# ---------------------------------------------------------------- the expected tables


def expected_rows(
    kind: str, readings: Sequence[Reading], plan: CorrectionPlan
) -> dict[str, tuple[Any, ...]]:
    """Each sensor's row, folded from the corrected history (a sensor's events in log order)."""
    values: list[int | None] = [reading.value for reading in readings]
    for index, value in plan:
        values[index] = value
    by_sensor: dict[str, list[int]] = {}
    for reading, value in zip(readings, values, strict=True):
        if value is not None:
            by_sensor.setdefault(reading.sensor_id, []).append(value)
    if kind == "invertible":
        return {key: (len(group), sum(group)) for key, group in by_sensor.items()}
    if kind == "non-invertible":
        return {
            key: (len(group), max(group), min(group), group[-1], group[0])
            for key, group in by_sensor.items()
        }
    return {
        key: (len(group), functools.reduce(smoothed_mean, group, 0.0))
        for key, group in by_sensor.items()
    }


def stored_rows(engine: Any, kind: str) -> dict[str, tuple[Any, ...]]:
    table = TABLES[kind]
    columns = [table.c[name] for name in COLUMNS[kind]]
    with engine.connect() as connection:
        rows = connection.execute(select(table.c.sensor_id, *columns)).all()
    return {row[0]: tuple(row[1:]) for row in rows}


def same_row(stored: tuple[Any, ...], expected: tuple[Any, ...]) -> bool:
    return len(stored) == len(expected) and all(
        math.isclose(got, want, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)
        if isinstance(want, float) and got is not None
        else got == want
        for got, want in zip(stored, expected, strict=True)
    )


def check_table(engine: Any, kind: str, expected: dict[str, tuple[Any, ...]], label: str) -> None:
    """The table holds exactly the expected rows; raises SystemExit otherwise."""
    stored = stored_rows(engine, kind)
    if not expected and stored:
        raise SystemExit(f"{label}: every event was retracted, yet {len(stored)} rows remain")
    wrong = [
        f"{key}: stored {stored.get(key)}, expected {expected.get(key)}"
        for key in sorted(stored.keys() | expected.keys())
        if key not in stored or key not in expected or not same_row(stored[key], expected[key])
    ]
    if wrong:
        shown = "; ".join(wrong[:5])
        raise SystemExit(
            f"{label}: {len(wrong)} of {len(expected)} rows differ from the corrected history "
            f"(columns {', '.join(COLUMNS[kind])}): {shown}"
        )
