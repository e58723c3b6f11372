"""StatsD ingest: the line protocol over UDP, turned into metric points.

A datagram holds lines separated by newlines, each
``name:value|type[|@sample_rate][|#tag:value,tag]`` (the tags are the
DogStatsD extension). Types:

* ``c``: a counter increment; with a sample rate, ``value / rate``;
* ``g``: a gauge; ``+n`` or ``-n`` changes the series' last gauge value
  (from 0 when this listener has not seen one);
* ``ms``, ``h``, ``d``: one histogram observation (a timer in milliseconds,
  a histogram, a distribution). A sample rate is accepted and not applied:
  a sketch counts observations, not their weights.

A line that does not parse (:class:`BadLineError`, with the reason) is counted by
reason and logged, at most :data:`LOGGED_PER_REASON` times per reason; the
other lines of its datagram still count. Parsing is pure
(:func:`parse_line`); :class:`StatsdListener` is the trio shell that
receives datagrams and appends points in batches.

UDP gives no back-pressure: when the log falls behind by more than
``queue_points`` points, the listener drops new points and counts them
(:class:`~eventplatform.events.batching.AppendQueue`), instead of blocking
its socket.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import trio
from prometheus_client.core import CounterMetricFamily
from pydantic import ValidationError

from eventplatform.apps.metrics.events import Kind, MetricPoint, series_of
from eventplatform.cli_support import append_queue_metrics, ingest_counters
from eventplatform.events import (
    BATCH_EVENTS_DEFAULT,
    QUEUE_EVENTS_DEFAULT,
    AppendQueue,
    EventProducer,
    serve_datagrams,
)

log = logging.getLogger(__name__)

LINE_BYTES_MAX = 4096
COLLECTOR_LABEL = "statsd"
LOGGED_PER_REASON = 10
TYPES: dict[str, Kind] = {
    "c": "counter",
    "g": "gauge",
    "ms": "histogram",
    "h": "histogram",
    "d": "histogram",
}


class BadLineError(ValueError):
    """A StatsD line that does not parse; ``reason`` is a short category for counting."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Sample:
    """One parsed line: ``relative`` gauges change the last value instead of setting it."""

    name: str
    tags: dict[str, str]
    value: float
    kind: Kind
    relative: bool = False

    @property
    def series(self) -> str:
        return series_of(self.name, self.tags)


def parse_line(line: str) -> Sample:
    """The sample a line holds; raises :class:`BadLineError`."""
    name, colon, rest = line.partition(":")
    if not colon or not name:
        raise BadLineError("no name", f"{line[:80]!r} is not name:value|type")
    fields = rest.split("|")
    if len(fields) < 2:
        raise BadLineError("no type", f"{line[:80]!r} has no |type")
    raw_value, raw_type, *options = fields
    kind = TYPES.get(raw_type)
    if kind is None:
        raise BadLineError(
            "unknown type", f"type {raw_type!r} in {line[:80]!r} (known: c, g, ms, h, d)"
        )
    value = _number(raw_value, line)
    relative = kind == "gauge" and raw_value[:1] in "+-"
    tags: dict[str, str] = {}
    for option in options:
        if option.startswith("@"):
            rate = _number(option[1:], line)
            if not 0 < rate <= 1:
                raise BadLineError("bad sample rate", f"{option!r} in {line[:80]!r}")
            if kind == "counter":
                value /= rate
        elif option.startswith("#"):
            tags.update(_tags(option[1:], line))
        else:
            raise BadLineError("unknown field", f"{option!r} in {line[:80]!r}")
    return Sample(name, tags, value, kind, relative)


def _number(raw: str, line: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise BadLineError("bad value", f"{raw[:40]!r} in {line[:80]!r} is not a number") from None
    if not math.isfinite(value):
        raise BadLineError("bad value", f"{raw[:40]!r} in {line[:80]!r} is not finite")
    return value


def _tags(raw: str, line: str) -> Iterator[tuple[str, str]]:
    for tag in raw.split(","):
        key, _, value = tag.partition(":")
        if not key:
            raise BadLineError("bad tags", f"an empty tag in {line[:80]!r}")
        yield key, value


@dataclass
class StatsdStats:
    datagrams: int = 0
    lines: int = 0
    points: int = 0
    bad_lines: Counter[str] = field(default_factory=Counter)


class StatsdIngest:
    """Turns datagrams into points: parsing, relative gauges, bad-line accounting."""

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.clock = clock
        self.stats = StatsdStats()
        self._gauges: dict[str, float] = {}

    def points(self, datagram: bytes) -> list[MetricPoint]:
        """The points of one datagram; bad lines are counted and logged, never raised."""
        self.stats.datagrams += 1
        now = self.clock()
        found = []
        for raw in datagram.split(b"\n"):
            raw = raw.strip()
            if not raw:
                continue
            self.stats.lines += 1
            try:
                found.append(self._point(raw, now))
            except BadLineError as exc:
                self._bad(exc)
        self.stats.points += len(found)
        return found

    def _point(self, raw: bytes, now: datetime) -> MetricPoint:
        if len(raw) > LINE_BYTES_MAX:
            raise BadLineError("line too long", f"{len(raw)} bytes (at most {LINE_BYTES_MAX})")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadLineError("not UTF-8", repr(raw[:80])) from None
        sample = parse_line(line)
        value = sample.value
        if sample.kind == "gauge" and sample.relative:
            value += self._gauges.get(sample.series, 0.0)
        try:
            point = MetricPoint(
                name=sample.name, tags=sample.tags, value=value, kind=sample.kind, at=now
            )
        except ValidationError as exc:
            problems = "; ".join(error["msg"] for error in exc.errors())
            raise BadLineError("invalid point", f"{line[:80]!r}: {problems}") from None
        if sample.kind == "gauge":
            self._gauges[sample.series] = value
        return point

    def _bad(self, exc: BadLineError) -> None:
        self.stats.bad_lines[exc.reason] += 1
        seen = self.stats.bad_lines[exc.reason]
        if seen <= LOGGED_PER_REASON:
            more = (
                " (further lines of this kind are only counted)"
                if seen == LOGGED_PER_REASON
                else ""
            )
            log.warning("bad StatsD line: %s%s", exc, more)


class StatsdCollector:
    """The listener's figures for its metrics endpoint, read when scraped
    (``collector="statsd"``; docs/metrics.md)."""

    def __init__(self, listener: StatsdListener) -> None:
        self.listener = listener

    def collect(self) -> Iterator[Any]:
        stats = self.listener.stats
        yield from ingest_counters(
            COLLECTOR_LABEL,
            (
                ("datagrams_received", "UDP datagrams received.", stats.datagrams),
                ("lines_received", "StatsD lines received, good or bad.", stats.lines),
            ),
        )
        errors = CounterMetricFamily(
            "eventplatform_ingest_errors",
            "Lines that did not parse, by reason.",
            labels=["collector", "reason"],
        )
        for reason, count in sorted(stats.bad_lines.items()):
            errors.add_metric([COLLECTOR_LABEL, reason], count)
        yield errors
        yield from append_queue_metrics(COLLECTOR_LABEL, self.listener.queue)


class StatsdListener:
    """Receives StatsD datagrams on UDP and appends their points; run :meth:`serve`."""

    def __init__(
        self,
        producer: EventProducer,
        *,
        ingest: StatsdIngest | None = None,
        batch_points: int = BATCH_EVENTS_DEFAULT,
        queue_points: int = QUEUE_EVENTS_DEFAULT,
    ) -> None:
        self.ingest = ingest or StatsdIngest()
        self.queue = AppendQueue(producer, batch_events=batch_points, queue_events=queue_points)

    @property
    def stats(self) -> StatsdStats:
        return self.ingest.stats

    async def serve(
        self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Receive until cancelled; reports the bound port through ``task_status``."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.queue.run)
            bound = await nursery.start(serve_datagrams, host, port, self._take)
            task_status.started(bound)

    def _take(self, datagram: bytes, sender: str) -> None:
        self.queue.put(self.ingest.points(datagram))
