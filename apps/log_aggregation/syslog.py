"""Syslog ingest: RFC 5424 messages over UDP and TCP, turned into log lines.

A message is ``<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID
STRUCTURED-DATA [MSG]``, each header field ``-`` when absent.
:func:`parse_message` maps it to a :class:`~.events.LogLine`:

* the service is APP-NAME (``syslog`` when absent), the host HOSTNAME (the
  sender's address when absent);
* the severity (PRI mod 8) gives the level: emergency, alert and critical
  are ``fatal``, error ``error``, warning ``warn``, notice and
  informational ``info``, debug ``debug``;
* the facility, PROCID and MSGID, and every structured-data parameter (as
  ``sd-id.name``), become attributes; the time is TIMESTAMP, or the moment
  of receipt when absent;
* secrets in known shapes are masked first (:mod:`.secrets`).

UDP carries one message per datagram. TCP frames them by octet counting
(``LENGTH SP MESSAGE``, RFC 6587) or, when a frame does not start with a
digit, by newline; TLS (RFC 5425) carries the same framing, from clients
that complete the handshake within ``TLS_HANDSHAKE_TIMEOUT_S`` (a plaintext
sender or a client without an accepted certificate is counted in
``tls_refused`` and dropped). A message that does not parse (:class:`SyslogError`) is
counted by reason and logged a few times per reason; a TCP frame length
that cannot be right ends that connection, since nothing after it can be
framed, and no other connection or datagram notices.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import trio
from prometheus_client.core import CounterMetricFamily
from pydantic import ValidationError

from eventplatform.apps.log_aggregation.events import ATTRIBUTES_MAX, Level, LogLine
from eventplatform.apps.log_aggregation.secrets import redact_line
from eventplatform.cli_support import append_queue_metrics, ingest_counters
from eventplatform.events import (
    BATCH_EVENTS_DEFAULT,
    QUEUE_EVENTS_DEFAULT,
    AppendQueue,
    EventProducer,
    serve_datagrams,
)

log = logging.getLogger(__name__)

FRAME_BYTES_MAX = 64 * 1024
COLLECTOR_LABEL = "syslog"
READ_BYTES = 65_536
IDLE_TIMEOUT_S = 300.0
TLS_HANDSHAKE_TIMEOUT_S = 10.0
LOGGED_PER_REASON = 10
SEVERITY_LEVELS: tuple[Level, ...] = (
    "fatal",
    "fatal",
    "fatal",
    "error",
    "warn",
    "info",
    "info",
    "debug",
)
HEADER = re.compile(
    r"^<(?P<pri>\d{1,3})>(?P<version>[1-9]\d{0,2}) (?P<timestamp>\S+) (?P<hostname>\S+) "
    r"(?P<app>\S+) (?P<procid>\S+) (?P<msgid>\S+) "
)
SD_NAME = re.compile(r"[^\s=\]\"]{1,32}")
BOM = "\ufeff"
NIL = "-"


class SyslogError(ValueError):
    """A message that is not RFC 5424; ``reason`` is a short category for counting."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def parse_message(raw: bytes, sender: str, now: datetime) -> LogLine:
    """The log line of one RFC 5424 message; raises :class:`SyslogError`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SyslogError("not UTF-8", repr(raw[:60])) from None
    text = text.rstrip("\r\n")
    header = HEADER.match(text)
    if header is None:
        raise SyslogError("no RFC 5424 header", repr(text[:60]))
    priority = int(header["pri"])
    if priority > 191:
        raise SyslogError("bad priority", f"<{priority}> is over 191")
    attributes, rest = _structured_data(text[header.end() :])
    attributes["syslog.facility"] = str(priority // 8)
    for name in ("procid", "msgid"):
        if header[name] != NIL:
            attributes[f"syslog.{name}"] = header[name]
    at = _timestamp(header["timestamp"]) or now
    message = rest[1:] if rest.startswith(" ") else rest
    try:
        text, attributes = redact_line(message.removeprefix(BOM), attributes, ATTRIBUTES_MAX)
        return LogLine(
            service=_or(header["app"], "syslog"),
            host=_or(header["hostname"], sender),
            level=SEVERITY_LEVELS[priority % 8],
            message=text,
            attributes=attributes,
            at=at,
        )
    except ValidationError as exc:
        problems = "; ".join(error["msg"] for error in exc.errors())
        raise SyslogError("invalid line", problems) from None


def _or(value: str, default: str) -> str:
    return default if value == NIL else value


def _timestamp(value: str) -> datetime | None:
    if value == NIL:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise SyslogError("bad timestamp", repr(value[:40])) from None
    if moment.tzinfo is None:
        raise SyslogError("bad timestamp", f"{value[:40]!r} has no offset")
    return moment


def _structured_data(text: str) -> tuple[dict[str, str], str]:
    """The structured data's parameters as attributes, and the text after it."""
    if text.startswith(NIL):
        return {}, text[1:]
    attributes: dict[str, str] = {}
    position = 0
    while text.startswith("[", position):
        position = _element(text, position + 1, attributes)
    if position == 0:
        raise SyslogError("bad structured data", repr(text[:60]))
    return attributes, text[position:]


def _element(text: str, position: int, into: dict[str, str]) -> int:
    """Read one SD-ELEMENT's id and parameters (after its ``[``); the index past its ``]``."""
    sd_id = SD_NAME.match(text, position)
    if sd_id is None:
        raise SyslogError("bad structured data", repr(text[position : position + 40]))
    position = sd_id.end()
    while True:
        if text.startswith("]", position):
            return position + 1
        if not text.startswith(" ", position):
            raise SyslogError("bad structured data", repr(text[position : position + 40]))
        name = SD_NAME.match(text, position + 1)
        if name is None or not text.startswith('="', name.end()):
            raise SyslogError("bad structured data", repr(text[position : position + 40]))
        value, position = _param_value(text, name.end() + 2)
        into[f"{sd_id.group()}.{name.group()}"] = value


def _param_value(text: str, position: int) -> tuple[str, int]:
    parts: list[str] = []
    while position < len(text):
        char = text[position]
        if char == '"':
            return "".join(parts), position + 1
        if char == "\\" and text[position + 1 : position + 2] in {'"', "\\", "]"}:
            parts.append(text[position + 1])
            position += 2
            continue
        parts.append(char)
        position += 1
    raise SyslogError("bad structured data", "a parameter value is not closed")


@dataclass
class SyslogStats:
    datagrams: int = 0
    messages: int = 0
    lines: int = 0
    garbage: Counter[str] = field(default_factory=Counter)
    connections: int = 0
    closed_for_framing: int = 0
    tls_refused: int = 0


class SyslogIngest:
    """Messages to lines, with the garbage counted and logged."""

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.clock = clock
        self.stats = SyslogStats()

    def line(self, raw: bytes, sender: str) -> LogLine | None:
        self.stats.messages += 1
        try:
            parsed = parse_message(raw, sender, self.clock())
        except SyslogError as exc:
            self.garbage(exc)
            return None
        self.stats.lines += 1
        return parsed

    def garbage(self, exc: SyslogError) -> None:
        self.stats.garbage[exc.reason] += 1
        seen = self.stats.garbage[exc.reason]
        if seen <= LOGGED_PER_REASON:
            last = seen == LOGGED_PER_REASON
            more = " (further ones of this kind are only counted)" if last else ""
            log.warning("bad syslog message: %s%s", exc, more)


class FramingError(SyslogError):
    """A TCP frame whose length cannot be right: the rest of the stream cannot be framed.
    ``frames`` are the complete frames before it."""

    frames: list[bytes]


def frames(buffer: bytearray) -> list[bytes]:
    """Take the complete frames off the front of ``buffer`` (RFC 6587): octet-counted
    ``LENGTH SP MESSAGE``, or a line ending in LF; raises FramingError."""
    found: list[bytes] = []
    try:
        _take_frames(buffer, found)
    except FramingError as exc:
        exc.frames = found
        raise
    return found


def _take_frames(buffer: bytearray, found: list[bytes]) -> None:
    while buffer:
        if buffer[:1].isdigit():
            space = buffer.find(b" ", 0, 8)
            if space < 0:
                if len(buffer) >= 8:
                    raise FramingError("bad frame length", repr(bytes(buffer[:8])))
                break
            digits = bytes(buffer[:space])
            if not digits.isdigit() or int(digits) > FRAME_BYTES_MAX:
                raise FramingError("bad frame length", repr(digits[:8]))
            end = space + 1 + int(digits)
            if len(buffer) < end:
                break
            found.append(bytes(buffer[space + 1 : end]))
            del buffer[:end]
        else:
            newline = buffer.find(b"\n")
            if newline < 0:
                if len(buffer) > FRAME_BYTES_MAX:
                    raise FramingError("frame too long", f"{len(buffer)} bytes without a newline")
                break
            frame = bytes(buffer[:newline])
            del buffer[: newline + 1]
            if frame.strip():
                found.append(frame)


class SyslogListener:
    """Receives syslog over UDP and TCP and appends the lines; run :meth:`serve_udp` and
    :meth:`serve_tcp` in a nursery, with :meth:`run_writer`."""

    def __init__(
        self,
        producer: EventProducer,
        *,
        ingest: SyslogIngest | None = None,
        batch_lines: int = BATCH_EVENTS_DEFAULT,
        queue_lines: int = QUEUE_EVENTS_DEFAULT,
    ) -> None:
        self.ingest = ingest or SyslogIngest()
        self.queue = AppendQueue(producer, batch_events=batch_lines, queue_events=queue_lines)

    @property
    def stats(self) -> SyslogStats:
        return self.ingest.stats

    async def run_writer(self) -> None:
        await self.queue.run()

    async def serve_udp(
        self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        await serve_datagrams(
            host,
            port,
            self._take_datagram,
            task_status=task_status,
        )

    async def serve_tcp(
        self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._connection, listeners)

    async def serve_tls(
        self,
        host: str,
        port: int,
        context: ssl.SSLContext,
        *,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Syslog over TLS (RFC 5425): the TCP framing, inside TLS with ``context``
        (:func:`tls_context`)."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        secured = [trio.SSLListener(listener, context) for listener in listeners]
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._tls_connection, secured)

    async def _tls_connection(self, stream: trio.SSLStream[trio.SocketStream]) -> None:
        try:
            with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
                await stream.do_handshake()
        except (trio.BrokenResourceError, trio.TooSlowError) as exc:
            self.stats.tls_refused += 1
            log.info("syslog over TLS: refused %s: %s", _peer(stream.transport_stream), exc)
            await trio.aclose_forcefully(stream)
            return
        await self._connection(stream, _peer(stream.transport_stream))

    async def _connection(self, stream: trio.abc.Stream, sender: str | None = None) -> None:
        self.stats.connections += 1
        if sender is None:
            assert isinstance(stream, trio.SocketStream)
            sender = _peer(stream)
        buffer = bytearray()
        try:
            while True:
                with trio.fail_after(IDLE_TIMEOUT_S):
                    data = await stream.receive_some(READ_BYTES)
                if not data:
                    if buffer.strip():
                        self._take([bytes(buffer)], sender)
                    return
                buffer.extend(data)
                self._take(frames(buffer), sender)
        except FramingError as exc:
            self._take(exc.frames, sender)
            self.stats.closed_for_framing += 1
            self.ingest.garbage(exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            pass
        finally:
            await stream.aclose()

    def _take_datagram(self, datagram: bytes, sender: str) -> None:
        self.stats.datagrams += 1
        self._take([datagram], sender)

    def _take(self, messages: list[bytes], sender: str) -> None:
        lines = [line for raw in messages if (line := self.ingest.line(raw, sender)) is not None]
        self.queue.put(lines)


class SyslogCollector:
    """The listener's figures for its metrics endpoint, read when scraped
    (``collector="syslog"``; docs/metrics.md)."""

    def __init__(self, listener: SyslogListener) -> None:
        self.listener = listener

    def collect(self) -> Iterator[Any]:
        stats = self.listener.stats
        yield from ingest_counters(
            COLLECTOR_LABEL,
            (
                ("datagrams_received", "UDP datagrams received.", stats.datagrams),
                (
                    "lines_received",
                    "Syslog messages received over UDP, TCP and TLS.",
                    stats.messages,
                ),
                ("connections", "TCP and TLS connections accepted.", stats.connections),
            ),
        )
        errors = CounterMetricFamily(
            "eventplatform_ingest_errors",
            "Messages that did not parse, frames that could not be framed, and TLS "
            "handshakes refused, by reason.",
            labels=["collector", "reason"],
        )
        for reason, count in sorted(stats.garbage.items()):
            errors.add_metric([COLLECTOR_LABEL, reason], count)
        errors.add_metric([COLLECTOR_LABEL, "tls refused"], stats.tls_refused)
        yield errors
        yield from append_queue_metrics(COLLECTOR_LABEL, self.listener.queue)


def tls_context(certificate: str, key: str, client_ca: str | None = None) -> ssl.SSLContext:
    """A server context for syslog over TLS: the certificate chain and its key (PEM
    files), TLS 1.2 or later, and, given ``client_ca``, client certificates it
    signed required (mutual TLS)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certificate, key)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _peer(stream: trio.SocketStream) -> str:
    return str(stream.socket.getpeername()[0])
