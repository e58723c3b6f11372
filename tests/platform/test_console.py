"""``platform console`` in a real browser, against a real broker and a projection database.

One test drives every page in one Chromium (Debian's, driven by Playwright): the
shared test app's projection has applied a few ticks and parked a poison one, and
more ticks wait unapplied, so every page has something to show. Each page's
screenshot is saved to the test's own folder, or, with
``EVENTPLATFORM_CONSOLE_SCREENSHOTS=docs/console``, to the folder docs/console.md
shows them from.

Without Chromium or Playwright the test skips, except under ``CI=true``, where
it fails and says what is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import projection_test_app
import projection_threads
import pytest
from click.testing import CliRunner
from projection_test_app import APP_NAME, POISON_LABEL, Tick

from eventplatform.cli import main
from eventplatform.console.chart import BARS_MAX, bar_chart
from eventplatform.events import EventProducer
from eventplatform.projections.migrate import upgrade
from eventplatform.projections.operations import projection_status
from eventplatform.testing import BrokerProcess

pytestmark = pytest.mark.alone  # tests/conftest.py: Spark, clusters, timed kills or a browser

PLATFORM = Path(sys.executable).with_name("platform")
SUPPORT = Path(__file__).resolve().parents[1] / "support"
SCREENSHOTS_ENV = "EVENTPLATFORM_CONSOLE_SCREENSHOTS"
CHROMIUM = Path("/usr/bin/chromium")
NAME = projection_test_app.totals_projection.name
APPS = [projection_test_app.app]
STARTUP_LINES_MAX = 5
STOP_TIMEOUT_S = 15.0
PAGE_TIMEOUT_MS = 20_000
VIEWPORT = {"width": 1280, "height": 900}
UNAPPLIED_TICKS = 3


def group_id(url: str) -> str:
    """The consumer group the projection's runner joined, as the database records it."""
    [status] = projection_status(APPS, database_url=url, bootstrap=None, name=NAME)
    return status.group_id


@pytest.fixture
def chromium() -> str:
    """The system's Chromium, for Playwright to drive. Missing it (or Playwright) fails the
    test under CI, where it must run, and skips it elsewhere."""
    found = str(CHROMIUM) if CHROMIUM.exists() else shutil.which("chromium")
    missing = [] if found else ["Debian's chromium (apt-get install chromium)"]
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -e '.[dev]')")
    if found and not missing:
        return found
    message = f"the console's browser test needs {' and '.join(missing)}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def console_url(broker: BrokerProcess, tmp_path: Path) -> Iterator[tuple[str, str, int, str]]:
    """The console of a database where the projection applied two ticks and parked one,
    with :data:`UNAPPLIED_TICKS` more in the log; its URL, the ticks' entity and partition,
    and the database's URL."""
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    upgrade(url, APPS)
    entity = f"console-{uuid.uuid4().hex[:8]}"
    with EventProducer(broker.bootstrap) as producer:
        labels = ["red", POISON_LABEL, "blue"]
        refs = producer.append(
            Tick(entity=entity, amount=n, label=label) for n, label in enumerate(labels, 1)
        )
        projection_threads.apply_all(NAME, APPS, url, broker.bootstrap, refs)
        producer.append(Tick(entity=entity, amount=1, label="late") for _ in range(UNAPPLIED_TICKS))
    python_path = os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")]))
    arguments = ["console", "--listen", "127.0.0.1:0", "--bootstrap", broker.bootstrap]
    arguments += ["--database", url, "--app", projection_test_app.__name__, "--operator"]
    process = subprocess.Popen(
        [str(PLATFORM), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": python_path, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline()]
        for _ in range(STARTUP_LINES_MAX):
            if lines[-1].startswith("console at ") or not lines[-1]:
                break
            lines.append(process.stdout.readline())
        assert lines[-1].startswith("console at http://127.0.0.1:"), "".join(lines)
        yield lines[-1].split()[2], entity, refs[0].position.partition, url
    finally:
        process.terminate()
        rest, _ = process.communicate(timeout=STOP_TIMEOUT_S)
    assert process.returncode == 0, rest  # SIGTERM ends it cleanly, as Ctrl-C does
    assert "Traceback" not in rest and "ERROR" not in rest, rest


def test_the_console_shows_cluster_groups_projections_and_records(
    chromium: str,
    console_url: tuple[str, str, int, str],
    broker: BrokerProcess,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect, sync_playwright

    base, entity, partition, url = console_url
    SCREENSHOTS = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path)  # noqa: N806
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    topic = Tick.event_topic
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(PAGE_TIMEOUT_MS)

            page.goto(base)
            broker_port = broker.bootstrap.rsplit(":", 1)[1]
            expect(page.locator("#brokers")).to_contain_text(broker_port)
            node = page.locator("#brokers td").first.inner_text()
            row = page.locator(f'#topics tr[data-topic="{topic}"][data-partition="{partition}"]')
            expect(row.locator(".leader")).to_have_text(node)
            expect(row.locator(".isr")).to_have_text(node)
            expect(page.locator("#error")).to_have_count(0)
            page.screenshot(path=SCREENSHOTS / "cluster.png", full_page=True)

            page.click("text=Groups")
            group = page.locator(f'section.group[data-group="{group_id(url)}"]')
            expect(group.locator(".state")).to_be_visible()
            lag = group.locator(f'tr[data-topic="{topic}"][data-partition="{partition}"] .lag')
            expect(lag).to_have_text(str(UNAPPLIED_TICKS))
            page.screenshot(path=SCREENSHOTS / "groups.png", full_page=True)

            page.click("text=Projections")
            projection = page.locator(f'section.projection[data-projection="{NAME}"]')
            expect(projection.locator(".status")).to_have_text("stopped")
            expect(projection.locator(".parked")).to_contain_text("1")
            expect(projection.locator('tr[data-table="pt_totals"] .count')).not_to_have_text("0")
            expect(projection.locator(".lag")).to_contain_text(f"{UNAPPLIED_TICKS} events")
            expect(page.locator("svg.chart").first).to_be_visible()
            page.screenshot(path=SCREENSHOTS / "projections.png", full_page=True)
            projection.locator("text=Retry parked events").click()
            expect(page.locator("#message")).to_have_text(f"{NAME}: 0 retried, 1 still parked")

            page.click("text=Topics")
            page.select_option("#browse select[name=topic]", topic)
            page.fill("#browse input[name=partition]", str(partition))
            page.click("#browse button")
            expect(page.locator("#range")).to_contain_text(f"{topic}[{partition}]")
            records = page.locator("#records tr[data-offset]")
            expect(records.first).to_be_visible()
            expect(page.locator("#records")).to_contain_text(entity)
            expect(page.locator("#records .event-type").first).to_contain_text(Tick.event_type)
            page.screenshot(path=SCREENSHOTS / "topics.png", full_page=True)

            page.click("text=Apps")
            page.click(f"#apps >> text={APP_NAME}")
            panel = page.locator(f'section.panel[data-query="{APP_NAME}.labels"]')
            expect(panel.locator("svg.chart")).to_be_visible()
            expect(panel.locator("svg.chart")).to_contain_text("total")
            expect(panel.locator("table")).to_contain_text("ticks")
            expect(page.locator("#error")).to_have_count(0)
            page.screenshot(path=SCREENSHOTS / "apps.png", full_page=True)
        finally:
            browser.close()


def test_the_console_refuses_an_address_it_cannot_listen_on_in_one_line(tmp_path: Path) -> None:
    database = ["--database", f"sqlite:///{tmp_path / 'projections.db'}"]
    malformed = CliRunner().invoke(main, ["console", "--listen", "nowhere", *database])
    assert malformed.exit_code == 2
    assert "Invalid value for --listen: 'nowhere' is not host:port" in malformed.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        result = CliRunner().invoke(main, ["console", "--listen", listen, *database])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines() == [
        f"Error: cannot listen on {listen}: Address already in use"
    ]


def test_a_bar_chart_escapes_its_labels_and_draws_at_most_its_bound() -> None:
    bars = [(f"<table {index}>", index) for index in range(BARS_MAX + 3)]
    svg = bar_chart(bars, title="Rows & more")
    assert "<table" not in svg and "&lt;table 0&gt;" in svg and "Rows &amp; more" in svg
    assert svg.count('class="bar"') == BARS_MAX
    assert "and 3 more" in svg
    assert "nothing to show" in bar_chart([], title="Lag")


def test_a_dashboard_charts_a_result_by_its_shape() -> None:
    from datetime import date
    from decimal import Decimal

    from eventplatform.console.dashboards import _chart
    from eventplatform.projections.query import QueryResult

    per_row = QueryResult(
        ["day", "views", "note"], [(date(2026, 1, 1), 5, "a"), (date(2026, 1, 2), 7, "b")]
    )
    chart = _chart("app.views", per_row, per_row.rows)
    assert chart is not None and chart.count("<rect") == 2 and "2026-01-02" in chart
    funnel = QueryResult(["landed", "signed_up"], [(Decimal(100), Decimal("12.5"))])
    chart = _chart("app.funnel", funnel, funnel.rows)
    assert (
        chart is not None and chart.count("<rect") == 2 and "signed_up" in chart and "12.5" in chart
    )
    words = QueryResult(["word"], [("a",), ("b",)])
    assert _chart("app.words", words, words.rows) is None


def test_a_console_without_operator_refuses_actions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    upgrade(url, APPS)
    arguments = ["console", "--listen", "127.0.0.1:0", "--database", url]
    process = subprocess.Popen(
        [str(PLATFORM), *arguments, "--bootstrap", "127.0.0.1:9"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        line = ""
        for _ in range(STARTUP_LINES_MAX):
            line = process.stdout.readline()
            if line.startswith("console at ") or not line:
                break
        assert line.startswith("console at http://127.0.0.1:"), line
        request = urllib.request.Request(
            line.split()[2] + f"projections/{NAME}/retry", data=b"", method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=STOP_TIMEOUT_S)
        assert refused.value.code == 403
        assert b"only reads" in refused.value.read()
    finally:
        process.terminate()
        process.communicate(timeout=STOP_TIMEOUT_S)
