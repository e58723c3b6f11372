"""Prometheus scraping: the text exposition format, turned into metric points.

:func:`parse_exposition` reads the text format (version 0.0.4): ``# TYPE``
lines, and samples ``name{label="value",...} value [timestamp_ms]`` with
label values escaped as ``\\\\``, ``\\"`` and ``\\n``. A line it cannot read
is a :class:`ExpositionError` naming the line; the scrape of that target
fails as a whole and the next one tries again.

:class:`PointMaker` turns a scrape's samples into points, per the family's
type:

* gauges, summary quantiles and untyped samples are ``gauge`` points;
* counters, and a histogram's or summary's ``_bucket``, ``_sum`` and
  ``_count`` series, are cumulative: a point is the ``counter`` increase
  since this scraper's previous sample of the series. The first sample only
  sets the baseline; a drop (the target restarted) counts the new value
  whole, as Prometheus's ``rate()`` does;
* NaN and infinite values are skipped and counted.

Each point is stamped with the sample's own timestamp if it has one, else
the scrape's moment, and tagged ``job`` and ``instance`` from the target.
:class:`Scraper` is the blocking loop over the configured targets.
"""

from __future__ import annotations

import logging
import math
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit

from pydantic import ValidationError

from eventplatform.apps.metrics.events import Kind, MetricPoint, series_of
from eventplatform.events import EventProducer

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 10.0
BODY_BYTES_MAX = 16 * 1024 * 1024
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
CUMULATIVE_SUFFIXES = ("_bucket", "_sum", "_count")
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class ExpositionError(ValueError):
    """A scrape's body is not the text exposition format."""


@dataclass(frozen=True)
class PromSample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp_ms: int | None
    family_type: str


def parse_exposition(text: str) -> list[PromSample]:
    """Every sample of an exposition, with its family's type (``untyped`` if not declared)."""
    types: dict[str, str] = {}
    samples = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        try:
            name, labels, value, stamp = _sample(line)
        except ExpositionError as exc:
            raise ExpositionError(f"line {number}: {exc}: {line[:120]!r}") from None
        samples.append(PromSample(name, labels, value, stamp, _family_type(name, types)))
    return samples


def _family_type(name: str, types: dict[str, str]) -> str:
    if name in types:
        return types[name]
    for suffix in (*CUMULATIVE_SUFFIXES, "_total"):
        family = name.removesuffix(suffix)
        if family != name and family in types:
            return types[family]
    return "untyped"


def _sample(line: str) -> tuple[str, dict[str, str], float, int | None]:
    match = NAME.match(line)
    if match is None:
        raise ExpositionError("no metric name")
    name, rest = match.group(), line[match.end() :]
    labels: dict[str, str] = {}
    if rest.startswith("{"):
        labels, rest = _labels(rest[1:])
    fields = rest.split()
    if not 1 <= len(fields) <= 2:
        raise ExpositionError("expected a value and an optional timestamp")
    try:
        value = float(fields[0])
        stamp = int(fields[1]) if len(fields) == 2 else None
    except ValueError:
        raise ExpositionError("the value or timestamp is not a number") from None
    return name, labels, value, stamp


def _labels(text: str) -> tuple[dict[str, str], str]:
    """The labels up to the closing brace, and what follows it."""
    labels: dict[str, str] = {}
    position = 0
    while True:
        position = _skip_spaces(text, position)
        if text[position : position + 1] == "}":
            return labels, text[position + 1 :]
        match = LABEL_NAME.match(text, position)
        if match is None or text[match.end() : match.end() + 2] != '="':
            raise ExpositionError('a label is not name="value"')
        value, position = _quoted(text, match.end() + 2)
        labels[match.group()] = value
        position = _skip_spaces(text, position)
        if text[position : position + 1] == ",":
            position += 1


def _skip_spaces(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t":
        position += 1
    return position


def _quoted(text: str, position: int) -> tuple[str, int]:
    """The label value starting at ``position`` (after its quote), and the index past its end."""
    parts: list[str] = []
    while position < len(text):
        char = text[position]
        if char == '"':
            return "".join(parts), position + 1
        if char == "\\":
            escaped = ESCAPES.get(text[position + 1 : position + 2])
            if escaped is None:
                raise ExpositionError("a bad escape in a label value")
            parts.append(escaped)
            position += 2
            continue
        parts.append(char)
        position += 1
    raise ExpositionError("a label value is not closed")


@dataclass
class ScrapeStats:
    scrapes: int = 0
    failed: int = 0
    samples: int = 0
    points: int = 0
    skipped: int = 0
    """Samples that gave no point: non-finite values, baselines, invalid names or labels."""


@dataclass
class PointMaker:
    """Turns samples into points, remembering cumulative series between scrapes."""

    stats: ScrapeStats = field(default_factory=ScrapeStats)
    _previous: dict[str, float] = field(default_factory=dict)

    def points(
        self, samples: Sequence[PromSample], target_tags: dict[str, str], now: datetime
    ) -> list[MetricPoint]:
        made = []
        for sample in samples:
            self.stats.samples += 1
            point = self._point(sample, target_tags, now)
            if point is None:
                self.stats.skipped += 1
            else:
                made.append(point)
        self.stats.points += len(made)
        return made

    def _point(
        self, sample: PromSample, target_tags: dict[str, str], now: datetime
    ) -> MetricPoint | None:
        if not math.isfinite(sample.value):
            return None
        tags = {**target_tags, **sample.labels}
        at = now
        if sample.timestamp_ms is not None:
            at = datetime.fromtimestamp(sample.timestamp_ms / 1000, UTC)
        value: float | None = sample.value
        kind: Kind = "gauge"
        if _cumulative(sample):
            kind = "counter"
            value = self._increase(series_of(sample.name, tags), sample.value)
        if value is None:
            return None
        try:
            return MetricPoint(name=sample.name, tags=tags, value=value, kind=kind, at=at)
        except ValidationError as exc:
            log.warning("skipping sample %s: %s", sample.name, exc.errors()[0]["msg"])
            return None

    def _increase(self, series: str, value: float) -> float | None:
        previous = self._previous.get(series)
        self._previous[series] = value
        if previous is None:
            return None
        return value - previous if value >= previous else value


def _cumulative(sample: PromSample) -> bool:
    if sample.family_type == "counter":
        return True
    if sample.family_type in {"histogram", "summary"}:
        return sample.name.endswith(CUMULATIVE_SUFFIXES)
    return False


def target_tags(url: str, job: str) -> dict[str, str]:
    """The tags every point of a target carries: its job and ``host:port``."""
    parts = urlsplit(url)
    return {"job": job, "instance": parts.netloc}


def fetch(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str:
    """The exposition a target serves; raises ExpositionError when it cannot be had."""
    request = urllib.request.Request(url, headers={"Accept": ACCEPT})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body: bytes = response.read(BODY_BYTES_MAX + 1)
    except (urllib.error.URLError, OSError) as exc:
        raise ExpositionError(f"scraping {url}: {exc}") from exc
    if len(body) > BODY_BYTES_MAX:
        raise ExpositionError(f"scraping {url}: the body is over {BODY_BYTES_MAX} bytes")
    return body.decode("utf-8", "replace")


class TargetError(ValueError):
    """A scrape target that is not an http(s) URL, or a bad line of a targets file."""


@dataclass(frozen=True)
class Target:
    url: str
    job: str

    @classmethod
    def of(cls, url: str, job: str) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in {"http", "https"} or not parts.netloc:
            raise TargetError(f"{url!r} is not an http(s) URL")
        return cls(url, job)


def read_targets(text: str, job: str) -> list[Target]:
    """The targets of a targets file: a line each, ``URL [job]``; ``#`` starts a comment."""
    found = []
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) > 2:
            raise TargetError(f"line {number}: expected 'URL [job]', got {raw.strip()!r}")
        try:
            found.append(Target.of(fields[0], fields[1] if len(fields) == 2 else job))
        except TargetError as exc:
            raise TargetError(f"line {number}: {exc}") from None
    return found


class Scraper:
    """Scrapes ``targets`` every ``interval_s`` and appends their points."""

    def __init__(
        self,
        producer: EventProducer,
        targets: Sequence[Target],
        *,
        interval_s: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        fetcher: Callable[[str], str] = fetch,
    ) -> None:
        self.producer = producer
        self.targets = list(targets)
        self.interval_s = interval_s
        self.clock = clock
        self.fetcher = fetcher
        self.makers = {target.url: PointMaker() for target in self.targets}

    def scrape_once(self) -> int:
        """Scrape every target once; returns how many points were appended."""
        appended = 0
        for target in self.targets:
            maker = self.makers[target.url]
            maker.stats.scrapes += 1
            try:
                samples = parse_exposition(self.fetcher(target.url))
            except ExpositionError as exc:
                maker.stats.failed += 1
                log.warning("scrape of %s failed: %s", target.url, exc)
                continue
            made = maker.points(samples, target_tags(target.url, target.job), self.clock())
            if made:
                self.producer.append(made)
                appended += len(made)
        return appended

    def run(self, scrapes: int | None = None) -> Iterator[int]:
        """Scrape every ``interval_s`` (``scrapes`` times, or until stopped); yields each
        round's appended points."""
        done = 0
        while scrapes is None or done < scrapes:
            started = time.monotonic()
            yield self.scrape_once()
            done += 1
            if scrapes is None or done < scrapes:
                time.sleep(max(0.0, self.interval_s - (time.monotonic() - started)))
