"""librdkafka's own test suite as data: its catalogue, a run's results, and our expectations.

librdkafka's ``tests/test.c`` lists every test as a ``_TEST(<number>_<name>, <flags>, ...)``
entry. The ones that talk to a broker are those without ``TEST_F_LOCAL`` or
``TEST_F_MANUAL``; a ``.scenario`` names the broker setup they need (``noautocreate``:
``auto.create.topics.enable=false``). The test runner ends with a summary table, one
``| <name> | <STATE> | <seconds>s | <reason>`` line per test it ran or skipped.

The expectations file (``tests/compat/expectations.toml``) lists the tests that are not
expected to pass on a setup, each with a reason from :data:`REASONS`. A run is good when
every other test passed and every listed test did not: a listed test that passes means
the list is stale, and fails the run as a failure does, so the list stays true.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

FIRST_NUMBER = 1
LAST_NUMBER = 150
"""The range of test numbers run (0001-0150)."""

SETUPS = ("single", "cluster", "secured")
DEFAULT_SETUPS = ("single", "cluster")
"""Where an entry of the expectations file applies when it names no setups: the
secured setup runs a chosen few tests, each listed for it by name."""
REASONS = {
    "sasl": "needs a SASL listener, which the single and cluster setups do not serve",
    "ssl": "needs an SSL listener, which the single and cluster setups do not serve",
    "acls": "needs an authorizer, or Kafka's kafka-acls.sh",
    "java-tools": "needs Kafka's own Java tools or Java client",
    "mock-cluster": "runs against librdkafka's mock cluster, not a broker",
    "known-issue": "librdkafka skips it everywhere as a known issue of its own",
    "three-brokers": "needs replication factor 3, so three brokers: it runs on the cluster",
    "kafka-version": "librdkafka skips it for Kafka 4.0, which removed what it tests",
}
"""Why a test may be expected not to pass, and what that means."""

PASSED = "PASSED"
FAILED = "FAILED"
SKIPPED = "SKIPPED"
TIMED_OUT = "TIMEOUT"
CRASHED = "CRASHED"
"""Outcomes: the runner's own three, and ours for a runner killed or dead before its summary."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SUMMARY_LINE = re.compile(
    r"^\|\s*(?P<name>\d{4}_\w+)\s*\|\s*(?P<state>[A-Z]+)\s*\|\s*(?P<seconds>[\d.]+)s\s*\|(?P<why>.*)$"
)
_FAILURE = re.compile(
    r'^### Test "(?P<name>\d{4}_\w+)(?: \((?P<subtest>.*)\))?" failed at (?P<where>\S+) at .*###$'
)
_ENTRY_START = "_TEST("
_SCENARIO = re.compile(r'\.scenario\s*=\s*"([^"]*)"')


class ExpectationsError(Exception):
    """The expectations file is unreadable or names an unknown reason, setup or test."""


@dataclass(frozen=True)
class SuiteTest:
    """One broker test of the catalogue."""

    name: str
    flags: str
    scenario: str

    @property
    def number(self) -> str:
        return self.name[:4]


@dataclass(frozen=True)
class Result:
    name: str
    outcome: str
    seconds: float
    why: str = ""


@dataclass(frozen=True)
class Expectation:
    name: str
    reason: str
    setups: tuple[str, ...]
    detail: str


def _entries(source: str) -> Iterable[str]:
    """The text of each ``_TEST(...)`` entry of the ``tests[]`` array, parentheses balanced."""
    start = source.index("struct test tests[] = {")
    position = source.find(_ENTRY_START, start)
    while position != -1:
        depth = 0
        for end in range(position + len(_ENTRY_START) - 1, len(source)):
            depth += {"(": 1, ")": -1}.get(source[end], 0)
            if depth == 0:
                yield source[position + len(_ENTRY_START) : end]
                break
        position = source.find(_ENTRY_START, end)


def broker_tests(test_c: str) -> list[SuiteTest]:
    """The broker tests numbered FIRST_NUMBER..LAST_NUMBER in ``test.c``'s text, in order."""
    tests = []
    for entry in _entries(test_c):
        name, _, rest = entry.partition(",")
        name = name.strip()
        flags = rest.split(",")[0].strip()
        if not re.fullmatch(r"\d{4}_\w+", name):
            continue
        if not FIRST_NUMBER <= int(name[:4]) <= LAST_NUMBER:
            continue
        if "TEST_F_LOCAL" in flags or "TEST_F_MANUAL" in flags:
            continue
        scenario = _SCENARIO.search(entry)
        tests.append(SuiteTest(name, flags, scenario.group(1) if scenario else "default"))
    return tests


def runs(tests: Sequence[SuiteTest]) -> list[tuple[str, str]]:
    """(number, scenario) pairs, one runner invocation each: a number's tests that need
    another scenario run apart, against a broker set up for it. A test listing several
    scenarios (``default,ak23``) runs in the first."""
    pairs: list[tuple[str, str]] = []
    for test in tests:
        pair = (test.number, test.scenario.split(",")[0])
        if pair not in pairs:
            pairs.append(pair)
    return pairs


def parse_summary(output: str) -> list[Result]:
    """The runner's summary table: one result per test line (the ``<MAIN>`` line left out)."""
    results = []
    for raw in output.splitlines():
        match = _SUMMARY_LINE.match(_ANSI.sub("", raw).strip())
        if match:
            why = match.group("why").strip()
            results.append(
                Result(
                    match.group("name"), match.group("state"), float(match.group("seconds")), why
                )
            )
    return results


def first_failures(output: str) -> dict[str, str]:
    """Each test's first ``### Test "<name>" failed at <where>`` report with the line after
    it: what is left of a failure when the runner aborts before its summary (it does when
    a failed test leaves librdkafka threads behind)."""
    lines = [_ANSI.sub("", line).strip() for line in output.splitlines()]
    failures: dict[str, str] = {}
    for index, line in enumerate(lines):
        match = _FAILURE.match(line)
        if match and match.group("name") not in failures:
            after = lines[index + 1] if index + 1 < len(lines) else ""
            subtest = f"[{match.group('subtest')}] " if match.group("subtest") else ""
            failures[match.group("name")] = f"{subtest}{match.group('where')}: {after}"
    return failures


def load_expectations(path: Path, known: Iterable[str]) -> dict[str, Expectation]:
    """The expectations file, checked: known tests, reasons and setups, and a detail each."""
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ExpectationsError(f"{path}: {exc}") from exc
    names = set(known)
    expectations: dict[str, Expectation] = {}
    for entry in document.get("expected", []):
        name = str(entry.get("test", ""))
        reason = str(entry.get("reason", ""))
        setups = tuple(str(s) for s in entry.get("setups", DEFAULT_SETUPS))
        detail = str(entry.get("detail", "")).strip()
        if name not in names:
            raise ExpectationsError(f"{path}: {name!r} is not a broker test of the suite")
        if reason not in REASONS:
            raise ExpectationsError(f"{path}: {name}: reason {reason!r} is not one of {REASONS}")
        if not setups or not set(setups) <= set(SETUPS):
            raise ExpectationsError(f"{path}: {name}: setups {setups} are not among {SETUPS}")
        if not detail:
            raise ExpectationsError(f"{path}: {name}: a detail saying what it needs is required")
        if name in expectations:
            raise ExpectationsError(f"{path}: {name} is listed twice")
        expectations[name] = Expectation(name, reason, setups, detail)
    return expectations


def verdicts(
    results: Sequence[Result], expectations: dict[str, Expectation], setup: str
) -> tuple[list[Result], list[Result]]:
    """(unexpected, stale): tests that did not pass and are not expected not to pass on
    ``setup``, and listed tests that passed there."""
    unexpected = []
    stale = []
    for result in results:
        expected = expectations.get(result.name)
        listed = expected is not None and setup in expected.setups
        if result.outcome == PASSED and listed:
            stale.append(result)
        elif result.outcome != PASSED and not listed:
            unexpected.append(result)
    return unexpected, stale
