"""Suite-wide rules. Under ``CI=true`` a skipped test fails: CI installs every tool
and service the suite needs, so a skip there means a missing install step.

Tests marked ``alone`` run in a pytest process of their own (``make pytest``), one at a
time, and the rest on two workers: every test of tests/cluster, tests/interop and
tests/spark_projections is ``alone`` (clusters, Spark jobs and real clients would only
compete for the two cores and stretch each other's timeouts), and so is any module
elsewhere that sets ``pytestmark = pytest.mark.alone`` for the same reason."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventplatform.events import EventRef
from eventplatform.testing import BrokerProcess, running_broker

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
ALONE_DIRECTORIES = ("cluster", "interop", "spark_projections")
"""The suite's folders whose every test runs alone."""
SUITE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(SUITE).parts
        if parts[0] in ALONE_DIRECTORIES:
            item.add_marker(pytest.mark.alone)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped under CI=true, which allows no skips: {reason}"


@pytest.fixture(scope="module")
def activity_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker for the activity app's tests (one per module)."""
    import activity_dataset

    broker = tmp_path_factory.mktemp("broker")
    with running_broker(broker, activity_dataset.BROKER_OVERRIDES) as process:
        yield process


@pytest.fixture(scope="module")
def activity_day(activity_broker: BrokerProcess) -> list[EventRef]:
    """The hand-worked day of activity (``activity_dataset``), appended to the broker."""
    import activity_dataset

    refs: list[EventRef] = activity_dataset.append_day(activity_broker.bootstrap)
    return refs
