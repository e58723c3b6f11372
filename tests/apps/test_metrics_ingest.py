"""Metrics ingest: the StatsD line protocol and the Prometheus text format, parsed by hand
cases, then through a real UDP socket and a real HTTP target into the broker and the
rollups. Bad lines and garbage datagrams are counted and logged and never stop or hold
back the good ones."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import metrics_reference as reference
import pytest
import trio
from projection_threads import running_projection

from eventplatform.apps.metrics import app
from eventplatform.apps.metrics.events import TOPIC
from eventplatform.apps.metrics.projections import metric_rollups
from eventplatform.apps.metrics.prometheus import (
    ExpositionError,
    PointMaker,
    Scraper,
    Target,
    TargetError,
    parse_exposition,
    read_targets,
)
from eventplatform.apps.metrics.statsd import (
    BadLineError,
    Sample,
    StatsdIngest,
    StatsdListener,
    parse_line,
)
from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.runtime import wait_caught_up
from eventplatform.testing import BrokerProcess, fresh_database, running_broker

NOW = datetime(2026, 11, 20, 10, 0, 0, tzinfo=UTC)
DRAIN_TIMEOUT_S = 30.0


@pytest.mark.parametrize(
    ("line", "sample"),
    [
        ("hits:1|c", Sample("hits", {}, 1.0, "counter")),
        ("hits:3|c|@0.5", Sample("hits", {}, 6.0, "counter")),
        ("temp:21.5|g|#room:lab", Sample("temp", {"room": "lab"}, 21.5, "gauge")),
        ("temp:-2|g", Sample("temp", {}, -2.0, "gauge", relative=True)),
        (
            "db.query:12.5|ms|@0.1|#db:main,env:",
            Sample("db.query", {"db": "main", "env": ""}, 12.5, "histogram"),
        ),
        ("size:1024|h", Sample("size", {}, 1024.0, "histogram")),
        ("size:7|d", Sample("size", {}, 7.0, "histogram")),
    ],
)
def test_statsd_lines_parse(line: str, sample: Sample) -> None:
    assert parse_line(line) == sample


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("hits", "no name"),
        (":1|c", "no name"),
        ("hits:1", "no type"),
        ("hits:1|x", "unknown type"),
        ("users:alice|s", "unknown type"),
        ("hits:one|c", "bad value"),
        ("hits:nan|c", "bad value"),
        ("hits:1|c|@2", "bad sample rate"),
        ("hits:1|c|@zero", "bad value"),
        ("hits:1|c|oops", "unknown field"),
        ("hits:1|c|#,a:b", "bad tags"),
    ],
)
def test_bad_statsd_lines_name_their_reason(line: str, reason: str) -> None:
    with pytest.raises(BadLineError) as raised:
        parse_line(line)
    assert raised.value.reason == reason


def test_bad_lines_are_counted_and_logged_and_the_good_ones_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ingest = StatsdIngest(clock=lambda: NOW)
    datagram = b"\n".join(
        [
            b"ok.a:1|c",
            b"\xff\xfe garbage",
            b"temp:20|g",
            b"bad name!:1|c",
            b"x" * 5000 + b":1|c",
            b"temp:+2.5|g",
            b"",
            b"ok.b:5|ms|#svc:api",
        ]
    )
    with caplog.at_level(logging.WARNING):
        points = ingest.points(datagram)
    assert [(p.series, p.value, p.kind) for p in points] == [
        ("ok.a", 1.0, "counter"),
        ("temp", 20.0, "gauge"),
        ("temp", 22.5, "gauge"),
        ("ok.b{svc=api}", 5.0, "histogram"),
    ]
    assert dict(ingest.stats.bad_lines) == {
        "not UTF-8": 1,
        "invalid point": 1,
        "line too long": 1,
    }
    assert ingest.stats.lines == 7 and ingest.stats.points == 4
    assert "bad StatsD line: not UTF-8" in caplog.text


def test_the_log_of_bad_lines_stops_after_a_few_per_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ingest = StatsdIngest(clock=lambda: NOW)
    with caplog.at_level(logging.WARNING):
        for _ in range(50):
            ingest.points(b"nope")
    assert ingest.stats.bad_lines["no name"] == 50
    assert caplog.text.count("bad StatsD line") == 10


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "broker", ["num.partitions=2"]) as process:
        yield process


async def test_statsd_over_udp_lands_in_the_rollups_despite_garbage(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    good = 0
    with EventProducer(broker.bootstrap) as producer:
        listener = StatsdListener(producer, batch_points=100)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(listener.serve, "127.0.0.1", 0)
            sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
            with sock:
                for number in range(200):
                    lines = [f"requests:1|c|#route:r{number % 4}", f"latency:{number}|ms"]
                    good += 2
                    if number % 10 == 0:
                        lines.append("broken line")
                    await sock.sendto("\n".join(lines).encode(), ("127.0.0.1", port))
                    if number % 25 == 0:
                        await sock.sendto(bytes(range(256)) * 4, ("127.0.0.1", port))
                    await trio.sleep(0)
            with trio.fail_after(DRAIN_TIMEOUT_S):
                while listener.queue.stats.appended < good:
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    stats, appending = listener.stats, listener.queue.stats
    assert (appending.appended, appending.dropped, appending.append_errors) == (good, 0, 0)
    # each binary datagram splits at its newlines into one line of control bytes (no name)
    # and four that are not UTF-8
    assert dict(stats.bad_lines) == {"no name": 20 + 8, "not UTF-8": 4 * 8}
    with fresh_database("sqlite", tmp_path) as url:
        migrate.upgrade(url, [app])
        _apply_everything(url, broker.bootstrap)
        views = reference.read_views(url, ["series"])["series"]
    assert {name: row[1] for name, row in views.items()} == {
        "latency": 200,
        **{f"requests{{route=r{route}}}": 50 for route in range(4)},
    }


def _apply_everything(url: str, bootstrap: str) -> None:
    with running_projection(metric_rollups.name, [app], url, bootstrap):
        wait_caught_up([metric_rollups.name], url, bootstrap, [TOPIC], 60.0)


EXPOSITION = """\
# HELP http_requests_total Requests served.
# TYPE http_requests_total counter
http_requests_total{method="GET",path="/a \\"quoted\\""} %(requests)s
# TYPE temperature gauge
temperature{room="lab"} %(temperature)s 1795000000000
# TYPE rpc_seconds histogram
rpc_seconds_bucket{le="0.1"} %(fast)s
rpc_seconds_bucket{le="+Inf"} %(all)s
rpc_seconds_sum %(sum)s
rpc_seconds_count %(all)s
# TYPE q summary
q{quantile="0.5"} NaN
untyped_thing 3
"""


def exposition(**values: Any) -> str:
    defaults = {"requests": 10, "temperature": 21.5, "fast": 4, "all": 5, "sum": 0.9}
    return EXPOSITION % {**defaults, **values}


def test_the_exposition_format_parses() -> None:
    samples = parse_exposition(exposition())
    by_name = {(s.name, tuple(sorted(s.labels.items()))): s for s in samples}
    requests = by_name["http_requests_total", (("method", "GET"), ("path", '/a "quoted"'))]
    assert (requests.value, requests.family_type) == (10.0, "counter")
    temperature = by_name["temperature", (("room", "lab"),)]
    assert (temperature.timestamp_ms, temperature.family_type) == (1795000000000, "gauge")
    assert by_name["rpc_seconds_bucket", (("le", "+Inf"),)].family_type == "histogram"
    assert by_name["untyped_thing", ()].family_type == "untyped"


@pytest.mark.parametrize(
    "line",
    ['x{a="1"', "x{a=1} 2", "x 1 2 3", "x one", '{a="b"} 1', 'x{a="\\q"} 1', "x"],
)
def test_malformed_expositions_name_the_line(line: str) -> None:
    with pytest.raises(ExpositionError, match="line 2"):
        parse_exposition(f"ok 1\n{line}\n")


def test_a_targets_file_lists_urls_with_optional_jobs() -> None:
    text = "# fleet\nhttp://a:9100/metrics node\n\nhttps://b:8443/metrics  # default job\n"
    assert read_targets(text, "prom") == [
        Target("http://a:9100/metrics", "node"),
        Target("https://b:8443/metrics", "prom"),
    ]
    with pytest.raises(TargetError, match="line 1: 'a:9100' is not an http"):
        read_targets("a:9100", "prom")
    with pytest.raises(TargetError, match="line 2: expected 'URL \\[job\\]'"):
        read_targets("http://a/m\nhttp://b/m job extra", "prom")


def test_counters_become_increases_and_restarts_count_whole() -> None:
    maker = PointMaker()
    tags = {"job": "j", "instance": "h:1"}
    first = maker.points(parse_exposition(exposition()), tags, NOW)
    assert {p.name for p in first} == {"temperature", "untyped_thing"}
    second = maker.points(
        parse_exposition(exposition(requests=15, fast=6, all=8, sum=1.5)), tags, NOW
    )
    values = {(p.name, p.tags.get("le")): (p.kind, p.value) for p in second}
    assert values["http_requests_total", None] == ("counter", 5.0)
    assert values["rpc_seconds_bucket", "0.1"] == ("counter", 2.0)
    assert values["rpc_seconds_count", None] == ("counter", 3.0)
    assert values["rpc_seconds_sum", None][1] == pytest.approx(0.6)
    restarted = maker.points(parse_exposition(exposition(requests=2)), tags, NOW)
    assert {p.name: p.value for p in restarted}["http_requests_total"] == 2.0
    assert maker.stats.skipped >= 3 + 5  # three NaN quantiles, the first round's baselines


class _Target(BaseHTTPRequestHandler):
    bodies: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        body = (self.bodies.pop(0) if self.bodies else "garbage{").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_scrape_appends_points_and_survives_a_bad_target(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    _Target.bodies = [exposition(), exposition(requests=25), "not an exposition {{{"]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Target)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    dead = "http://127.0.0.1:1/metrics"
    try:
        with EventProducer(broker.bootstrap) as producer:
            scraper = Scraper(producer, [Target(url, "app"), Target(dead, "app")], interval_s=0.01)
            appended = list(scraper.run(scrapes=3))
    finally:
        server.shutdown()
    assert appended == [2, 7, 0]  # gauges only, then gauges and increases, then a bad body
    assert scraper.makers[url].stats.failed == 1 and scraper.makers[dead].stats.failed == 3
    with fresh_database("sqlite", tmp_path) as database:
        migrate.upgrade(database, [app])
        _apply_everything(database, broker.bootstrap)
        series = reference.read_views(database, ["series"])["series"]
    instance = f"127.0.0.1:{server.server_address[1]}"
    requests = f'http_requests_total{{instance={instance},job=app,method=GET,path=/a "quoted"}}'
    assert series[requests][:2] == ("counter", 1)


async def test_a_full_append_queue_drops_and_counts_instead_of_blocking() -> None:
    from eventplatform.events.batching import AppendQueue

    queue = AppendQueue(None, queue_events=3)  # type: ignore[arg-type]  # never appends here
    point = StatsdIngest(clock=lambda: NOW).points(b"a:1|c")
    assert queue.put(point * 2)
    assert not queue.put(point * 2)
    assert (queue.stats.queued, queue.stats.dropped) == (2, 2)
