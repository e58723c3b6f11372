"""``platform apps metrics`` and ``platform apps logs`` from the command line: simulate into a
broker, correct the faulty agent, ingest stdin, redact and prune, and the usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from eventplatform.apps.log_aggregation import app as logs
from eventplatform.apps.log_aggregation.events import TOPIC as LOGS_TOPIC
from eventplatform.apps.metrics import app as metrics
from eventplatform.apps.metrics.events import TOPIC as METRICS_TOPIC
from eventplatform.cli import main
from eventplatform.projections import migrate
from eventplatform.projections.query import run_query
from eventplatform.runtime import running_projections, wait_caught_up
from eventplatform.testing import fresh_database, running_broker

APPLY_TIMEOUT_S = 120.0


def invoke(*arguments: str, stdin: str | None = None) -> str:
    result = CliRunner().invoke(main, list(arguments), input=stdin)
    assert result.exit_code == 0, result.output
    return result.output


def apply(url: str, bootstrap: str, name: str, topic: str, app: object) -> None:
    with running_projections([name], [app], url, bootstrap):  # type: ignore[list-item]
        wait_caught_up([name], url, bootstrap, [topic], APPLY_TIMEOUT_S)


def scalar(url: str, sql: str) -> object:
    return run_query(url, sql, allow_superuser=True).rows[0][0]


def test_metrics_simulate_then_correct_the_faulty_agent(tmp_path: Path) -> None:
    with (
        running_broker(tmp_path / "broker", ["num.partitions=2"]) as broker,
        fresh_database("sqlite", tmp_path) as url,
    ):
        common = ["--bootstrap", broker.bootstrap]
        out = invoke(
            "apps", "metrics", "simulate", *common, "--hours", "0.25", "--start", "2026-11-21T13:00"
        )
        assert "faulty agent: cpu.utilization{host=catalog-2,service=catalog}" in out
        migrate.upgrade(url, [metrics])
        apply(url, broker.bootstrap, "metrics.rollups", METRICS_TOPIC, metrics)
        series = "cpu.utilization{host=catalog-2,service=catalog}"
        worst = f"SELECT MAX(maximum) FROM metrics_rollups WHERE series = '{series}'"
        assert float(scalar(url, worst)) > 100  # type: ignore[arg-type]

        window = ["--start", "2026-11-21T13:07:30", "--end", "2026-11-21T13:17:30"]
        dry = invoke(
            "apps",
            "metrics",
            "correct",
            series,
            *window,
            "--scale",
            "0.01",
            "--reason",
            "x100",
            "--dry-run",
            "--database",
            url,
            *common,
        )
        assert dry.startswith("would replace 45 points")
        done = invoke(
            "apps",
            "metrics",
            "correct",
            series,
            *window,
            "--scale",
            "0.01",
            "--reason",
            "x100",
            "--database",
            url,
            *common,
        )
        assert done.startswith("replaced 45 points") and "with 45 points" in done
        apply(url, broker.bootstrap, "metrics.rollups", METRICS_TOPIC, metrics)
        assert float(scalar(url, worst)) <= 100  # type: ignore[arg-type]


def test_logs_stdin_then_redact_and_prune(tmp_path: Path) -> None:
    with (
        running_broker(tmp_path / "broker", ["num.partitions=2"]) as broker,
        fresh_database("sqlite", tmp_path) as url,
    ):
        common = ["--bootstrap", broker.bootstrap]
        lines = "".join(f"INFO request {n} ok\n" for n in range(40)) + "ERROR token=abc123 leaked\n"
        invoke("apps", "logs", "ingest", "--service", "api", "--host", "h1", *common, stdin=lines)
        migrate.upgrade(url, [logs])
        apply(url, broker.bootstrap, "logs.lines", LOGS_TOPIC, logs)
        assert scalar(url, "SELECT COUNT(*) FROM logs_recent") == 41

        pending = ["--pending-dir", str(tmp_path / "redactions")]
        with running_projections(["logs.lines"], [logs], url, broker.bootstrap):
            redacted = invoke(
                "apps", "logs", "redact", "token=", "--reason", "a token", "--database", url,
                *pending, *common,
            )  # fmt: skip
        assert redacted.strip() == (
            "retracted 1 line from the tables and erased 1 record from the log"
        )
        apply(url, broker.bootstrap, "logs.lines", LOGS_TOPIC, logs)
        assert scalar(url, "SELECT COUNT(*) FROM logs_recent") == 40
        assert scalar(url, "SELECT COUNT(*) FROM logs_errors") == 0
        pruned = invoke("apps", "logs", "prune", "--database", url, *common)
        assert pruned.startswith("pruned 0 lines")


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        (["metrics", "statsd", "--listen", "nowhere"], "is not host:port"),
        (["metrics", "scrape", "--target", "ftp://x/metrics"], "is not an http(s) URL"),
        (["metrics", "scrape"], "give --target or --targets-file"),
        (
            ["metrics", "correct", "s", "--start", "soon", "--end", "2026-01-01", "--reason", "r"],
            "is not an ISO 8601 time",
        ),
        (
            [
                "metrics",
                "correct",
                "s",
                "--start",
                "2026-01-02",
                "--end",
                "2026-01-01",
                "--reason",
                "r",
            ],
            "end must come after its start",
        ),
        (["logs", "syslog", "--udp", "", "--tcp", ""], "give --udp, --tcp or --tls"),
        (
            ["logs", "syslog", "--udp", "", "--tcp", "", "--tls", "127.0.0.1:0"],
            "--tls needs --tls-cert and --tls-key",
        ),
        (["logs", "redact", "", "--reason", "r"], "give the text the lines hold"),
        (["metrics", "simulate", "--hours", "0"], "x>0"),
    ],
)
def test_usage_errors_say_what_is_wrong(arguments: list[str], complaint: str) -> None:
    result = CliRunner().invoke(main, ["apps", *arguments])
    assert result.exit_code == 2, result.output
    assert complaint in result.output
