"""Measurements as events: one :class:`MetricPoint` per sample of a series.

A series is a metric name with a set of tags (``http_requests{code=200,
method=GET}``); :func:`series_of` spells it canonically, tags sorted, and
points are keyed by it, so a series' points sit in one partition in the
order they were appended.

A point's ``kind`` says how it folds:

* ``counter``: an increment (StatsD ``c``; a Prometheus counter's increase
  since the previous scrape): rollups sum it;
* ``gauge``: a reading at a moment (StatsD ``g``; a Prometheus gauge): the
  rollups keep its min, max and last value;
* ``histogram``: one observation of a distribution (StatsD ``ms``, ``h``,
  ``d``): it also goes into the series' quantile sketch.

:func:`points_correction` replaces what a series recorded in a time window,
after a faulty agent: a :class:`PointsCorrected` that records the decision,
one retracting correction per point that was in the window, then the
replacement points (none to only delete).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Literal

from pydantic import AwareDatetime, Field, field_validator, model_validator

from eventplatform.events import Correction, Event, EventRef

TOPIC = "metrics"
NAME_MAX = 200
TAG_KEY_MAX = 100
TAG_VALUE_MAX = 200
TAGS_MAX = 32
SERIES_MAX = 1024
TEXT_MAX = 512
NAME_PATTERN = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:.\-]*$")
TAG_KEY_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")

Kind = Literal["counter", "gauge", "histogram"]
KINDS: tuple[Kind, ...] = ("counter", "gauge", "histogram")


def series_of(name: str, tags: Mapping[str, str]) -> str:
    """The series' canonical name: ``name{key=value,...}``, tags sorted by key."""
    if not tags:
        return name
    return name + "{" + ",".join(f"{key}={tags[key]}" for key in sorted(tags)) + "}"


class MetricPoint(Event, type="metrics.point", topic=TOPIC):
    """One sample of series ``name{tags}`` at moment ``at``."""

    name: str = Field(min_length=1, max_length=NAME_MAX)
    tags: dict[str, str] = Field(default_factory=dict)
    value: float
    kind: Kind
    at: AwareDatetime

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not NAME_PATTERN.match(name):
            raise ValueError("a metric name is letters, digits, '_', ':', '.' or '-'")
        return name

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: dict[str, str]) -> dict[str, str]:
        if len(tags) > TAGS_MAX:
            raise ValueError(f"at most {TAGS_MAX} tags")
        for key, value in tags.items():
            if not TAG_KEY_PATTERN.match(key) or len(key) > TAG_KEY_MAX:
                raise ValueError(f"tag key {key!r} is not letters, digits, '_', '.' or '-'")
            if len(value) > TAG_VALUE_MAX or any(c in value for c in ",{}=\n"):
                raise ValueError(f"tag {key}: the value is too long or holds one of ,{{}}= ")
        return tags

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("a point's value must be a finite number")
        return value

    @model_validator(mode="after")
    def _series_fits(self) -> MetricPoint:
        if len(self.series) > SERIES_MAX:
            raise ValueError(f"the series name is over {SERIES_MAX} characters")
        return self

    @property
    def series(self) -> str:
        return series_of(self.name, self.tags)

    def entity_key(self) -> str:
        return self.series


class PointsCorrected(Event, type="metrics.points_corrected", key="series", topic=TOPIC):
    """The points of ``series`` in ``[start, end)`` were replaced by ``replacements`` points."""

    series: str = Field(min_length=1, max_length=SERIES_MAX)
    start: AwareDatetime
    end: AwareDatetime
    retracted: int = Field(ge=0)
    replacements: int = Field(ge=0)
    reason: str = Field(min_length=1, max_length=TEXT_MAX)
    decided_at: AwareDatetime

    @model_validator(mode="after")
    def _window(self) -> PointsCorrected:
        if self.end <= self.start:
            raise ValueError("the window's end must come after its start")
        return self


def points_correction(
    series: str,
    start: datetime,
    end: datetime,
    retracted: Sequence[EventRef],
    replacements: Sequence[MetricPoint],
    reason: str,
    *,
    now: datetime | None = None,
) -> list[Event]:
    """The events that replace ``series``' points in ``[start, end)``: the decision, one
    retraction per point that was there (``retracted``), and the ``replacements``."""
    foreign = [ref for ref in retracted if ref.key != series]
    if foreign:
        raise ValueError(f"{foreign[0]} is not a point of series {series!r}")
    for point in replacements:
        if point.series != series:
            raise ValueError(f"a replacement point is of series {point.series!r}, not {series!r}")
        if not start <= point.at < end:
            raise ValueError(f"a replacement point at {point.at} is outside the window")
    decided = PointsCorrected(
        series=series,
        start=start,
        end=end,
        retracted=len(retracted),
        replacements=len(replacements),
        reason=reason,
        decided_at=now or datetime.now(UTC),
    )
    text = f"points corrected: {reason}"
    corrections = [Correction(of=ref, retract=True, reason=text) for ref in retracted]  # type: ignore[arg-type]
    return [decided, *corrections, *replacements]
