"""The collectors' metrics endpoints: a real ``platform apps metrics statsd`` and a real
``platform apps logs syslog``, each with ``--metrics-listen``, fed over UDP (and TCP) on
loopback, appending to a real broker; ``/metrics`` scraped over HTTP and parsed. The
figures must count what was sent: datagrams and lines received, the bad ones by reason,
and the events the log acknowledged."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from metrics_scrape import file_text, found_in, metrics_url_in, scrape_until

from eventplatform.testing import BrokerProcess, running_broker
from eventplatform.testing.broker_process import PLATFORM

STOP_TIMEOUT_S = 30.0
GOOD_DATAGRAMS = 20
LINES_PER_DATAGRAM = 3
BAD_LINES = ("no_type:1", "bad:x|c")
SYSLOG_UDP_MESSAGES = 15
SYSLOG_TCP_MESSAGES = 5
STATSD_PORT = re.compile(r"receiving StatsD on udp://[\d.]+:(\d+)")
SYSLOG_UDP_PORT = re.compile(r"receiving syslog on udp://[\d.]+:(\d+)")
SYSLOG_TCP_PORT = re.compile(r"receiving syslog on tcp://[\d.]+:(\d+)")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("broker")) as process:
        yield process


@contextmanager
def collector(arguments: Sequence[str], output: Path) -> Iterator[subprocess.Popen[bytes]]:
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [str(PLATFORM), "apps", *arguments, "--metrics-listen", "127.0.0.1:0"],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)


def send_udp(port: int, datagrams: Sequence[bytes]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for datagram in datagrams:
            sock.sendto(datagram, ("127.0.0.1", port))


def test_statsd_counts_datagrams_lines_errors_and_appends(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    output = tmp_path / "statsd.log"
    arguments = ["metrics", "statsd", "--listen", "127.0.0.1:0", "--bootstrap", broker.bootstrap]
    with collector(arguments, output):
        url = metrics_url_in(file_text(output))
        port = int(found_in(file_text(output), STATSD_PORT).group(1))
        good = [
            b"\n".join(f"requests.{n}.{line}:1|c".encode() for line in range(LINES_PER_DATAGRAM))
            for n in range(GOOD_DATAGRAMS)
        ]
        send_udp(port, [*good, "\n".join(BAD_LINES).encode()])
        labels = {"collector": "statsd"}
        points = GOOD_DATAGRAMS * LINES_PER_DATAGRAM
        scraped = scrape_until(
            url,
            lambda s: s.get("eventplatform_ingest_events_appended_total", **labels) == points,
        )
    assert scraped.value("eventplatform_ingest_datagrams_received_total", **labels) == (
        GOOD_DATAGRAMS + 1
    )
    assert scraped.value("eventplatform_ingest_lines_received_total", **labels) == (
        points + len(BAD_LINES)
    )
    assert scraped.value("eventplatform_ingest_errors_total", reason="no type", **labels) == 1
    assert scraped.value("eventplatform_ingest_errors_total", reason="bad value", **labels) == 1
    assert scraped.value("eventplatform_ingest_events_queued_total", **labels) == points
    assert scraped.value("eventplatform_ingest_events_dropped_total", **labels) == 0
    assert scraped.value("eventplatform_ingest_append_errors_total", **labels) == 0
    assert scraped.value("eventplatform_ingest_events_waiting", **labels) == 0


def syslog_message(number: int) -> bytes:
    return f"<14>1 2026-01-01T00:00:00Z web-1 shop - - - line {number}".encode()


def test_syslog_counts_messages_over_udp_and_tcp_and_garbage(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    output = tmp_path / "syslog.log"
    arguments = ["logs", "syslog", "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0"]
    with collector([*arguments, "--bootstrap", broker.bootstrap], output):
        url = metrics_url_in(file_text(output))
        udp = int(found_in(file_text(output), SYSLOG_UDP_PORT).group(1))
        tcp = int(found_in(file_text(output), SYSLOG_TCP_PORT).group(1))
        send_udp(udp, [*map(syslog_message, range(SYSLOG_UDP_MESSAGES)), b"not syslog"])
        with socket.create_connection(("127.0.0.1", tcp)) as stream:
            stream.sendall(b"".join(syslog_message(n) + b"\n" for n in range(SYSLOG_TCP_MESSAGES)))
        labels = {"collector": "syslog"}
        lines = SYSLOG_UDP_MESSAGES + SYSLOG_TCP_MESSAGES
        scraped = scrape_until(
            url,
            lambda s: s.get("eventplatform_ingest_events_appended_total", **labels) == lines,
        )
    assert scraped.value("eventplatform_ingest_datagrams_received_total", **labels) == (
        SYSLOG_UDP_MESSAGES + 1
    )
    assert scraped.value("eventplatform_ingest_lines_received_total", **labels) == lines + 1
    assert scraped.value("eventplatform_ingest_connections_total", **labels) == 1
    errors = scraped.matching("eventplatform_ingest_errors_total", **labels)
    assert sum(errors.values()) == 1
    assert scraped.value("eventplatform_ingest_events_dropped_total", **labels) == 0


BEACON_REQUESTS = 6
BEACONS_PER_REQUEST = 2
BEACONS_PORT = re.compile(r"collecting beacons on http://[\d.]+:(\d+)")


def post_beacons(port: int, body: bytes) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/beacons",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=STOP_TIMEOUT_S) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_the_beacon_collector_counts_requests_rejections_and_appends(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    output = tmp_path / "beacons.log"
    arguments = ["activity", "collect", "--listen", "127.0.0.1:0", "--open"]
    with collector([*arguments, "--bootstrap", broker.bootstrap], output):
        url = metrics_url_in(file_text(output))
        port = int(found_in(file_text(output), BEACONS_PORT).group(1))
        for request in range(BEACON_REQUESTS):
            beacons = [
                {
                    "type": "page_viewed",
                    "url": f"https://shop.example/page-{request}-{n}",
                    "session_id": f"s{request}",
                    "anonymous_id": f"a{request}",
                    "at": "2026-11-20T10:00:00Z",
                }
                for n in range(BEACONS_PER_REQUEST)
            ]
            assert post_beacons(port, json.dumps(beacons).encode()) < 300
        assert post_beacons(port, b"not json") == 400
        labels = {"collector": "beacons"}
        appended = BEACON_REQUESTS * BEACONS_PER_REQUEST
        scraped = scrape_until(
            url,
            lambda s: s.get("eventplatform_ingest_events_appended_total", **labels) == appended,
        )
    assert scraped.value("eventplatform_ingest_requests_received_total", **labels) == (
        BEACON_REQUESTS + 1
    )
    assert scraped.value("eventplatform_ingest_requests_rejected_total", **labels) == 1
    assert scraped.value("eventplatform_ingest_requests_refused_total", **labels) == 0
    assert scraped.value("eventplatform_ingest_append_errors_total", **labels) == 0
