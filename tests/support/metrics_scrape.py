"""Scraping a process's ``/metrics`` in tests: fetch over HTTP, parse with prometheus_client's
own parser, and read one sample by name and labels. Every wait is bounded."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

SCRAPE_TIMEOUT_S = 5.0
WAIT_TIMEOUT_S = 30.0
WAIT_INTERVAL_S = 0.1
URL_WAIT_TIMEOUT_S = 30.0
_URL = re.compile(r"metrics on (http://\S+)")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class Scrape:
    """One scrape: every sample by name and labels, and each family's type."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: Samples = {}
        self.types: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def get(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def value(self, name: str, **labels: str) -> float:
        found = self.get(name, **labels)
        assert found is not None, f"no sample {name}{labels} in:\n{self.text}"
        return found

    def matching(self, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
        """Every sample of ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return {
            sample_labels: value
            for (sample_name, sample_labels), value in self.samples.items()
            if sample_name == name and wanted <= sample_labels
        }


def scrape(url: str) -> Scrape:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return Scrape(response.read().decode())


def scrape_until(
    url: str, condition: Callable[[Scrape], bool], timeout_s: float = WAIT_TIMEOUT_S
) -> Scrape:
    """Scrape until ``condition`` holds; fails with the last scrape's text otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        last = scrape(url)
        if condition(last):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"the metrics did not get there in {timeout_s} s:\n{last.text}")
        time.sleep(WAIT_INTERVAL_S)


def metrics_url_in(output: Callable[[], str], timeout_s: float = URL_WAIT_TIMEOUT_S) -> str:
    """The endpoint a process logged ("metrics on http://..."), waiting for the line."""
    return found_in(output, _URL, timeout_s).group(1)


def found_in(
    output: Callable[[], str], pattern: re.Pattern[str], timeout_s: float = URL_WAIT_TIMEOUT_S
) -> re.Match[str]:
    """The first match of ``pattern`` in a process's output, waiting for it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = pattern.search(output())
        if found:
            return found
        time.sleep(WAIT_INTERVAL_S)
    raise AssertionError(f"no {pattern.pattern!r} in the output:\n{output()[-3000:]}")


def file_text(path: Path) -> Callable[[], str]:
    return lambda: path.read_text(errors="replace") if path.exists() else ""
