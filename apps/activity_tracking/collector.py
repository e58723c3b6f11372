"""The beacon collector: an HTTP endpoint that turns JSON beacons into activity events.

``POST /v1/beacons`` takes one beacon (a JSON object) or a batch (a JSON
array of objects). A beacon names its kind in ``type`` (``page_viewed``,
``clicked``, ``searched``, ``session_started``, ``session_ended``, or the
full event type) and carries the event's fields; ``at`` defaults to the
moment the collector received it. The answer is:

* ``202 Accepted`` with ``{"accepted": n, "positions": [{"topic", "partition",
  "offset"}, ...]}`` once the log has acknowledged every beacon of the
  request: an accepted beacon is in the log;
* ``400 Bad Request`` with ``{"error": ..., "beacons": [{"index", "errors"}]}``
  when the body is not JSON or any beacon fails validation; nothing of that
  request is appended;
* ``404``, ``405``, ``411``, ``413`` (a body over ``max_body_bytes``) and
  ``503`` (the log did not acknowledge in time) as HTTP says.

``GET /health`` answers 200. Connections are HTTP/1.1 with keep-alive.

Given write keys (each a site's: ``key -> site``), a beacon request must
carry one, in the ``X-Write-Key`` header or as ``?key=`` (a browser's
``navigator.sendBeacon`` cannot set headers): without one it gets ``401``,
with one not given ``403``, and nothing is appended. Given allowed origins,
a request whose ``Origin`` header names another gets ``403``; an allowed one
gets ``Access-Control-Allow-Origin`` back, and ``OPTIONS`` (a browser's
preflight) answers ``204`` with what it may send. A request without
``Origin`` is a server's, not a browser's: only its key is checked. A site
given a signing secret (a server that sends beacons, not a page) must sign
each body: ``X-Signature: sha256=<hex HMAC-SHA256 of the body>``; unsigned
gets ``401``, a signature that does not match ``403``.

Under load, requests queue for one writer task that appends what is queued
as one batch (up to ``batch_beacons``), with up to ``APPENDS_IN_FLIGHT``
appends awaiting the log at once, so a burst becomes a few large appends.
The queue is bounded (``queue_beacons``): when it is full, requests wait for
room instead of being dropped, so clients see latency, not loss.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

import h11
import orjson
import trio
from pydantic import ValidationError

from eventplatform.apps.activity_tracking.events import ACTIVITY_EVENTS, ActivityEvent
from eventplatform.events import EventProducer, EventRef

BEACONS_PATH = "/v1/beacons"
HEALTH_PATH = "/health"
MAX_BODY_BYTES = 1024 * 1024
BATCH_BEACONS = 5_000
QUEUE_BEACONS = 50_000
APPEND_TIMEOUT_S = 30.0
APPENDS_IN_FLIGHT = 4
IDLE_TIMEOUT_S = 60.0
READ_BYTES = 65_536
WRITE_KEY_HEADER = b"x-write-key"
WRITE_KEY_PARAMETER = "key"
SIGNATURE_HEADER = b"x-signature"
SIGNATURE_PREFIX = "sha256="
PREFLIGHT_MAX_AGE_S = 600
COLLECTOR_PRODUCER = {"linger.ms": 1}
"""The collector batches requests itself, so its producer waits only briefly for more."""
KINDS: dict[str, type[ActivityEvent]] = {}
for _event_class in ACTIVITY_EVENTS:
    KINDS[_event_class.event_type] = _event_class
    KINDS[_event_class.event_type.split(".", 1)[1]] = _event_class


COLLECTOR_LABEL = "beacons"
"""The ``collector`` label of the collector's metrics."""


class BeaconError(Exception):
    """A request whose body is not a valid beacon or batch of beacons."""

    def __init__(self, message: str, beacons: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.beacons = beacons or []


def parse_beacons(body: bytes, now: datetime) -> list[ActivityEvent]:
    """The events a request body holds; raises BeaconError naming every bad beacon."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BeaconError(f"the body is not JSON: {exc}") from exc
    items = document if isinstance(document, list) else [document]
    if not items:
        raise BeaconError("the batch is empty")
    events: list[ActivityEvent] = []
    problems: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            problems.append({"index": index, "errors": ["a beacon is a JSON object"]})
            continue
        fields = dict(item)
        kind = KINDS.get(str(fields.pop("type", "")))
        if kind is None:
            known = ", ".join(sorted(name for name in KINDS if "." not in name))
            problems.append({"index": index, "errors": [f"type must be one of {known}"]})
            continue
        fields.setdefault("at", now.isoformat())
        try:
            events.append(kind.model_validate(fields))
        except ValidationError as exc:
            errors = [
                f"{'.'.join(str(part) for part in error['loc']) or 'beacon'}: {error['msg']}"
                for error in exc.errors()
            ]
            problems.append({"index": index, "errors": errors})
    if problems:
        raise BeaconError(f"{len(problems)} of {len(items)} beacons are invalid", problems)
    return events


@dataclass
class _Pending:
    events: list[ActivityEvent]
    done: trio.Event = field(default_factory=trio.Event)
    refs: list[EventRef] = field(default_factory=list)
    error: BaseException | None = None


@dataclass
class CollectorStats:
    requests: int = 0
    """Beacon requests read whole (refused ones are counted apart)."""
    accepted: int = 0
    """Events the log acknowledged."""
    rejected: int = 0
    """Requests whose beacons did not parse or validate."""
    refused: int = 0
    """Requests refused for their origin, their write key or their signature."""
    appends: int = 0
    append_errors: int = 0
    """Appends the log refused or did not answer in time."""


class Collector:
    """Serves beacons into ``producer``; run :meth:`serve` in a trio nursery."""

    def __init__(
        self,
        producer: EventProducer,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        batch_beacons: int = BATCH_BEACONS,
        queue_beacons: int = QUEUE_BEACONS,
        append_timeout_s: float = APPEND_TIMEOUT_S,
        write_keys: Mapping[str, str] | None = None,
        signing_secrets: Mapping[str, bytes] | None = None,
        allowed_origins: Collection[str] = (),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """``write_keys`` (key to site) are required of every beacon request when given;
        the sites in ``signing_secrets`` (site to secret) must sign their bodies;
        ``allowed_origins`` (``https://shop.example``, or ``*``) bound the browsers' when
        given. Without keys, anyone who reaches the port may send beacons."""
        self.producer = producer
        self.write_keys = dict(write_keys) if write_keys is not None else None
        self.signing_secrets = dict(signing_secrets or {})
        unknown = set(self.signing_secrets) - set((write_keys or {}).values())
        if unknown:
            raise ValueError(f"signing secrets for sites without a write key: {sorted(unknown)}")
        self.allowed_origins = frozenset(allowed_origins)
        self.max_body_bytes = max_body_bytes
        self.batch_beacons = batch_beacons
        self.append_timeout_s = append_timeout_s
        self.clock = clock
        self.stats = CollectorStats()
        self._queue_size = queue_beacons
        self._queued = 0
        self._room_changed = trio.Event()
        self._send, self._receive = trio.open_memory_channel[_Pending](math.inf)
        self._in_flight = trio.Semaphore(APPENDS_IN_FLIGHT)

    async def serve(
        self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept connections until cancelled; reports the bound port through ``task_status``."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer)
            task_status.started(listeners[0].socket.getsockname()[1])
            await trio.serve_listeners(self._connection, listeners)

    # ------------------------------------------------------------ appending

    async def submit(self, events: list[ActivityEvent]) -> list[EventRef]:
        """Queue ``events`` for the writer and wait until the log has them all."""
        # Room in the bounded queue: wait for it, never drop (a request larger than the
        # queue goes alone).
        while self._queued and self._queued + len(events) > self._queue_size:
            await self._room_changed.wait()
        self._queued += len(events)
        pending = _Pending(events)
        try:
            await self._send.send(pending)
            with trio.fail_after(self.append_timeout_s):
                await pending.done.wait()
        finally:
            self._queued -= len(events)
            self._room_changed.set()
            self._room_changed = trio.Event()
        if pending.error is not None:
            raise pending.error
        return pending.refs

    async def _writer(self) -> None:
        """Append what is queued, as one batch per append, with a few appends in flight."""
        async with trio.open_nursery() as nursery:
            while True:
                batch = [await self._receive.receive()]
                size = len(batch[0].events)
                while size < self.batch_beacons:
                    try:
                        more = self._receive.receive_nowait()
                    except trio.WouldBlock:
                        break
                    batch.append(more)
                    size += len(more.events)
                await self._in_flight.acquire()
                nursery.start_soon(self._append, batch)

    async def _append(self, batch: list[_Pending]) -> None:
        try:
            events = [event for pending in batch for event in pending.events]
            try:
                refs = await self.producer.append_async(events)
            except Exception as exc:  # the log refused or timed out: every waiter hears it
                self.stats.append_errors += 1
                for pending in batch:
                    pending.error = exc
                    pending.done.set()
                return
            self.stats.appends += 1
            start = 0
            for pending in batch:
                pending.refs = refs[start : start + len(pending.events)]
                start += len(pending.events)
                pending.done.set()
        finally:
            self._in_flight.release()

    # ------------------------------------------------------------ HTTP

    async def _connection(self, stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=16_384)
        try:
            while True:
                request = await self._next_event(stream, connection)
                if not isinstance(request, h11.Request):
                    return
                status, body = await self._respond_to(stream, connection, request)
                extra = self._cors_headers(request, preflight=status == 204)
                await self._send_response(stream, connection, status, body, extra)
                if connection.our_state is h11.MUST_CLOSE:
                    return
                connection.start_next_cycle()
        except (h11.RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            return
        except trio.TooSlowError:
            return
        finally:
            await stream.aclose()

    async def _next_event(self, stream: trio.SocketStream, connection: h11.Connection) -> Any:
        while True:
            event = connection.next_event()
            if event is not h11.NEED_DATA:
                return event
            with trio.fail_after(IDLE_TIMEOUT_S):
                data = await stream.receive_some(READ_BYTES)
            connection.receive_data(data)

    async def _respond_to(
        self, stream: trio.SocketStream, connection: h11.Connection, request: h11.Request
    ) -> tuple[int, dict[str, Any]]:
        target = request.target.decode("ascii", "replace").split("?", 1)[0]
        method = request.method.decode("ascii", "replace")
        if target == HEALTH_PATH:
            await self._drain(stream, connection)
            return (200, {"status": "ok"}) if method == "GET" else (405, {"error": "use GET"})
        if target != BEACONS_PATH:
            await self._drain(stream, connection)
            return 404, {"error": f"no such path; beacons go to POST {BEACONS_PATH}"}
        headers = dict(request.headers)
        refused = self._refusal(request, headers)
        if refused is not None:  # answered at once: the body is not read, the connection closes
            self.stats.refused += 1
            return refused
        site = self._site(request, headers)
        if method == "OPTIONS":
            await self._drain(stream, connection)
            return 204, {}
        if method != "POST":
            await self._drain(stream, connection)
            return 405, {"error": f"use POST {BEACONS_PATH}"}
        length = headers.get(b"content-length")
        if length is None and headers.get(b"transfer-encoding") is None:
            return 411, {"error": "send a Content-Length"}
        if length is not None and int(length) > self.max_body_bytes:
            return 413, {"error": f"the body is over {self.max_body_bytes} bytes"}
        body = await self._body(stream, connection)
        if body is None:
            return 413, {"error": f"the body is over {self.max_body_bytes} bytes"}
        unsigned = self._signature_refusal(site, headers, body)
        if unsigned is not None:
            self.stats.refused += 1
            return unsigned
        self.stats.requests += 1
        try:
            events = parse_beacons(body, self.clock())
        except BeaconError as exc:
            self.stats.rejected += 1
            return 400, {"error": str(exc), "beacons": exc.beacons}
        try:
            refs = await self.submit(events)
        except trio.TooSlowError:
            return 503, {"error": "the log did not acknowledge in time; send again"}
        except Exception as exc:
            return 503, {"error": f"the log refused the beacons: {exc}; send again"}
        self.stats.accepted += len(refs)
        positions = [
            {
                "topic": r.position.topic,
                "partition": r.position.partition,
                "offset": r.position.offset,
            }
            for r in refs
        ]
        return 202, {"accepted": len(refs), "positions": positions}

    def _refusal(
        self, request: h11.Request, headers: dict[bytes, bytes]
    ) -> tuple[int, dict[str, Any]] | None:
        """Why a beacon request is refused (its origin, its write key), if it is."""
        origin = headers.get(b"origin")
        if origin is not None and not self._origin_allowed(origin):
            return 403, {"error": f"the origin {origin.decode('ascii', 'replace')} is not allowed"}
        if self.write_keys is None or request.method == b"OPTIONS":
            return None
        key = _write_key(request, headers)
        if not key:
            return 401, {
                "error": f"send the site's write key in X-Write-Key or as ?{WRITE_KEY_PARAMETER}="
            }
        if key not in self.write_keys:
            return 403, {"error": "unknown write key"}
        return None

    def _site(self, request: h11.Request, headers: dict[bytes, bytes]) -> str | None:
        """The site whose (known) write key the request carries."""
        if self.write_keys is None:
            return None
        return self.write_keys.get(_write_key(request, headers))

    def _signature_refusal(
        self, site: str | None, headers: dict[bytes, bytes], body: bytes
    ) -> tuple[int, dict[str, Any]] | None:
        """Why a signing site's body is refused (no signature, or one that does not match)."""
        secret = self.signing_secrets.get(site) if site is not None else None
        if secret is None:
            return None
        given = headers.get(SIGNATURE_HEADER, b"").decode("ascii", "replace")
        if not given.startswith(SIGNATURE_PREFIX):
            return 401, {
                "error": f"{site} signs its beacons: send X-Signature: {SIGNATURE_PREFIX}"
                "<hex HMAC-SHA256 of the body with the site's signing secret>"
            }
        wanted = hmac.new(secret, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(given[len(SIGNATURE_PREFIX) :].lower(), wanted):
            return 403, {"error": "the signature does not match the body"}
        return None

    def _origin_allowed(self, origin: bytes) -> bool:
        allowed = self.allowed_origins
        return not allowed or "*" in allowed or origin.decode("ascii", "replace") in allowed

    def _cors_headers(self, request: h11.Request, *, preflight: bool) -> list[tuple[str, str]]:
        """The CORS headers for an allowed browser's request (none without an allow-list)."""
        origin = dict(request.headers).get(b"origin")
        if origin is None or not self.allowed_origins or not self._origin_allowed(origin):
            return []
        headers = [("access-control-allow-origin", origin.decode("ascii")), ("vary", "Origin")]
        if preflight:
            headers += [
                ("access-control-allow-methods", "POST, OPTIONS"),
                ("access-control-allow-headers", "content-type, x-write-key"),
                ("access-control-max-age", str(PREFLIGHT_MAX_AGE_S)),
            ]
        return headers

    async def _body(self, stream: trio.SocketStream, connection: h11.Connection) -> bytes | None:
        parts: list[bytes] = []
        size = 0
        while True:
            event = await self._next_event(stream, connection)
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.max_body_bytes:
                    return None
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            else:
                raise h11.RemoteProtocolError("the request ended early")

    async def _drain(self, stream: trio.SocketStream, connection: h11.Connection) -> None:
        while not isinstance(await self._next_event(stream, connection), h11.EndOfMessage):
            pass

    async def _send_response(
        self,
        stream: trio.SocketStream,
        connection: h11.Connection,
        status: int,
        body: dict[str, Any],
        extra: Sequence[tuple[str, str]] = (),
    ) -> None:
        payload = orjson.dumps(body) if status != 204 else b""
        headers = [("content-length", str(len(payload))), *extra]
        if payload:
            headers.append(("content-type", "application/json"))
        if connection.their_state is not h11.DONE:
            headers.append(("connection", "close"))  # the rest of the body is not read
        response = h11.Response(status_code=status, headers=headers)
        head, data, end = (
            connection.send(part) or b""
            for part in (response, h11.Data(data=payload), h11.EndOfMessage())
        )
        await stream.send_all(head + data + end)


def _write_key(request: h11.Request, headers: dict[bytes, bytes]) -> str:
    """The write key a request carries, in its header or its query ('' for none)."""
    key = headers.get(WRITE_KEY_HEADER, b"").decode("ascii", "replace")
    if not key:
        query = request.target.decode("ascii", "replace").partition("?")[2]
        key = (parse_qs(query).get(WRITE_KEY_PARAMETER) or [""])[0]
    return key


class CollectorMetrics:
    """The collector's figures for its metrics endpoint, read when scraped
    (``collector="beacons"``; docs/metrics.md)."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def collect(self) -> Iterator[Any]:
        from eventplatform.cli_support import ingest_counters

        stats = self.collector.stats
        yield from ingest_counters(
            COLLECTOR_LABEL,
            (
                ("requests_received", "Beacon requests read whole.", stats.requests),
                ("requests_rejected", "Requests whose beacons did not parse.", stats.rejected),
                (
                    "requests_refused",
                    "Requests refused for their origin, write key or signature.",
                    stats.refused,
                ),
                ("events_appended", "Events the log acknowledged.", stats.accepted),
                (
                    "append_errors",
                    "Appends the log refused or did not answer in time.",
                    stats.append_errors,
                ),
            ),
        )
