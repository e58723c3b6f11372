"""Syslog ingest: RFC 5424 messages parsed field by field, framed on TCP, and received over
real UDP and TCP sockets into the broker and the projection while garbage frames and
datagrams are counted, logged and never hold back the good messages."""

from __future__ import annotations

import logging
import ssl
import subprocess
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
import trio
from sqlalchemy import text

from eventplatform.apps.log_aggregation import app
from eventplatform.apps.log_aggregation.events import TOPIC
from eventplatform.apps.log_aggregation.projections import lines as lines_projection
from eventplatform.apps.log_aggregation.syslog import (
    FramingError,
    SyslogError,
    SyslogIngest,
    SyslogListener,
    frames,
    parse_message,
    tls_context,
)
from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.projections.database import create_store_engine
from eventplatform.runtime import running_projections, wait_caught_up
from eventplatform.testing import fresh_database, running_broker

NOW = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
DRAIN_TIMEOUT_S = 30.0
FULL = (
    b'<165>1 2026-11-20T08:59:58.5+01:00 web-1 nginx 4242 ID47 [exampleSDID@32473 iut="3" '
    b'eventSource="App\\"lication\\]"][meta sequenceId="7"] \xef\xbb\xbfGET /health 200'
)


def test_a_full_message_maps_to_a_line() -> None:
    line = parse_message(FULL, "10.0.0.9", NOW)
    assert (line.service, line.host, line.level) == ("nginx", "web-1", "info")
    assert line.message == "GET /health 200"
    assert line.at == datetime(2026, 11, 20, 7, 59, 58, 500000, tzinfo=UTC)
    assert line.attributes == {
        "exampleSDID@32473.iut": "3",
        "exampleSDID@32473.eventSource": 'App"lication]',
        "meta.sequenceId": "7",
        "syslog.facility": "20",
        "syslog.procid": "4242",
        "syslog.msgid": "ID47",
    }


def test_nil_fields_take_their_defaults() -> None:
    line = parse_message(b"<11>1 - - - - - -", "10.0.0.9", NOW)
    assert (line.service, line.host, line.level, line.message, line.at) == (
        "syslog",
        "10.0.0.9",
        "error",
        "",
        NOW,
    )
    assert line.attributes == {"syslog.facility": "1"}


@pytest.mark.parametrize(
    ("severity", "level"),
    [(0, "fatal"), (2, "fatal"), (3, "error"), (4, "warn"), (5, "info"), (7, "debug")],
)
def test_severities_map_to_levels(severity: int, level: str) -> None:
    assert parse_message(f"<{8 + severity}>1 - h app - - - x".encode(), "s", NOW).level == level


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"hello world", "no RFC 5424 header"),
        (b"<34>Oct 11 22:14:15 mymachine su: 'su root' failed", "no RFC 5424 header"),
        (b"<999>1 - h a - - - x", "bad priority"),
        (b"<13>1 yesterday h a - - - x", "bad timestamp"),
        (b"<13>1 2026-11-20T08:00:00 h a - - - x", "bad timestamp"),
        (b"<13>1 - h a - - [broken x", "bad structured data"),
        (b'<13>1 - h a - - [id k="v x', "bad structured data"),
        (b"<13>1 - h a - - nostructured", "bad structured data"),
        (b"<13>1 - h\xff a - - - x", "not UTF-8"),
        (b"<13>1 - h a@b - - - x", "invalid line"),
    ],
)
def test_garbage_names_its_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(SyslogError) as raised:
        parse_message(raw, "s", NOW)
    assert raised.value.reason == reason


def test_tcp_frames_by_octet_count_or_newline() -> None:
    message = b"<13>1 - h a - - - hello"
    buffer = bytearray(
        b"%d %s<13>1 - h a - - - second\n%d %s" % (len(message), message, len(message), message[:5])
    )
    assert frames(buffer) == [message, b"<13>1 - h a - - - second"]
    assert buffer == b"%d %s" % (len(message), message[:5])  # the incomplete frame waits
    buffer.extend(message[5:])
    assert frames(buffer) == [message] and buffer == b""
    with pytest.raises(FramingError):
        frames(bytearray(b"99999999 x"))


def test_garbage_is_counted_and_logged_a_few_times(caplog: pytest.LogCaptureFixture) -> None:
    ingest = SyslogIngest(clock=lambda: NOW)
    with caplog.at_level(logging.WARNING):
        for _ in range(30):
            assert ingest.line(b"junk", "s") is None
        assert ingest.line(b"<14>1 - h a - - - ok", "s") is not None
    assert ingest.stats.garbage == Counter({"no RFC 5424 header": 30})
    assert caplog.text.count("bad syslog message") == 10


async def test_udp_and_tcp_syslog_reach_the_projection_despite_garbage(tmp_path: Path) -> None:
    expected: Counter[str] = Counter()
    with running_broker(tmp_path / "broker", ["num.partitions=2"]) as broker:
        with EventProducer(broker.bootstrap) as producer:
            listener = SyslogListener(producer, batch_lines=50)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(listener.run_writer)
                udp = await nursery.start(listener.serve_udp, "127.0.0.1", 0)
                tcp = await nursery.start(listener.serve_tcp, "127.0.0.1", 0)
                sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
                with sock:
                    for number in range(100):
                        message = f"<14>1 - host-{number % 3} api - - - udp {number}"
                        expected[f"udp {number}"] += 1
                        await sock.sendto(message.encode(), ("127.0.0.1", udp))
                        if number % 10 == 0:
                            await sock.sendto(b"\x00\xffgarbage", ("127.0.0.1", udp))
                good = await trio.open_tcp_stream("127.0.0.1", tcp)
                broken = await trio.open_tcp_stream("127.0.0.1", tcp)
                await broken.send_all(b"<14>1 - h api - - - before the break\n99999999 oops")
                expected["before the break"] += 1
                for number in range(100):
                    message = f"<14>1 - host-9 worker - - - tcp {number}".encode()
                    expected[f"tcp {number}"] += 1
                    framed = b"%d %s" % (len(message), message) if number % 2 else message + b"\n"
                    await good.send_all(framed)
                    if number % 25 == 0:
                        await good.send_all(b"not syslog at all\n")
                await good.aclose()
                with trio.fail_after(DRAIN_TIMEOUT_S):
                    while listener.queue.stats.appended < sum(expected.values()):
                        await trio.sleep(0.02)
                nursery.cancel_scope.cancel()
        stats = listener.stats
        assert stats.garbage == Counter(
            {"not UTF-8": 10, "no RFC 5424 header": 4, "bad frame length": 1}
        )
        assert stats.closed_for_framing == 1 and listener.queue.stats.dropped == 0
        with fresh_database("postgresql", tmp_path) as url:
            migrate.upgrade(url, [app])
            names = [lines_projection.name]
            with running_projections(names, [app], url, broker.bootstrap):
                wait_caught_up(names, url, broker.bootstrap, [TOPIC], DRAIN_TIMEOUT_S)
            assert _messages(url) == expected


def _messages(url: str) -> Counter[str]:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT message FROM logs_recent"))
            return Counter(row[0] for row in rows)
    finally:
        engine.dispose()


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by the openssl tool."""
    certificate, key = directory / "syslog.crt", directory / "syslog.key"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    files = ["-keyout", str(key), "-out", str(certificate)]
    subprocess.run(["openssl", *request, *subject, *files], check=True, capture_output=True)
    return certificate, key


async def test_syslog_over_tls_takes_trusted_clients_and_refuses_plaintext(
    tmp_path: Path,
) -> None:
    certificate, key = self_signed(tmp_path)
    client = ssl.create_default_context(cafile=str(certificate))
    with running_broker(tmp_path / "broker", ["num.partitions=1"]) as broker:
        with EventProducer(broker.bootstrap) as producer:
            listener = SyslogListener(producer, batch_lines=10)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(listener.run_writer)
                port = await nursery.start(
                    listener.serve_tls, "127.0.0.1", 0, tls_context(str(certificate), str(key))
                )
                plaintext = await trio.open_tcp_stream("127.0.0.1", port)
                await plaintext.send_all(b"<14>1 - h api - - - in the clear\n")
                secured = await trio.open_ssl_over_tcp_stream("127.0.0.1", port, ssl_context=client)
                for number in range(20):
                    message = f"<14>1 - host api - - - tls {number}".encode()
                    await secured.send_all(b"%d %s" % (len(message), message))
                await secured.aclose()
                with trio.fail_after(DRAIN_TIMEOUT_S):
                    while listener.queue.stats.appended < 20 or not listener.stats.tls_refused:
                        await trio.sleep(0.02)
                with trio.move_on_after(1):  # nothing of the plaintext sender comes later
                    while listener.queue.stats.appended == 20:
                        await trio.sleep(0.02)
                await plaintext.aclose()
                nursery.cancel_scope.cancel()
        assert listener.queue.stats.appended == 20
        assert listener.stats.tls_refused == 1
        assert listener.stats.lines == 20


def test_a_tls_context_needs_a_certificate_and_key_that_load(tmp_path: Path) -> None:
    certificate, key = self_signed(tmp_path)
    with pytest.raises(ssl.SSLError):
        tls_context(str(key), str(key))
    with pytest.raises(FileNotFoundError):
        tls_context(str(tmp_path / "missing.crt"), str(key))
    assert tls_context(str(certificate), str(key)).minimum_version == ssl.TLSVersion.TLSv1_2
