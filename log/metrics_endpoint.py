"""The Prometheus endpoint of a long-running process: ``GET /metrics`` over HTTP/1.1.

Every process that runs for long (a broker or cluster node, a projection runner, a
collector) can serve its own :class:`~prometheus_client.CollectorRegistry` here, in
Prometheus's text format. The registry is the process's own, never the library's
global one, so a test can run several processes' worth of endpoints in one
interpreter. :func:`new_registry` adds the standard ``process_*`` and ``python_*``
figures to it.

**Why trio and h11, not prometheus_client's server.** The library's
``start_http_server`` is a ``ThreadingHTTPServer``: a thread per connection, no
bound on how many, no deadline on a client that sends its request slowly, and
collectors called in those threads. The broker's state (its partitions, its
groups) belongs to the trio thread and is changed by it without locks; the
gauges read at scrape time must be read there too, or a scrape could see a dict
change size under it. So :func:`serve_metrics` is a trio task in the process's own
nursery: a scrape runs its collectors in the trio thread, between two requests,
and sees the state whole. A process that is not a trio program (the projection
runner) runs the same task in a thread of its own (:class:`MetricsThread`); its
collectors read counters that the GIL keeps whole.

**Bounds.** At most ``CONNECTIONS_MAX`` connections at once (further clients wait
in the listen backlog); a request head of at most ``REQUEST_HEAD_BYTES_MAX``
(431 otherwise); ``REQUEST_TIMEOUT_S`` for the whole exchange, from accept to the
last byte of the answer; one request per connection (``Connection: close``), so
an idle scraper holds nothing. A scrape runs the collectors synchronously: what
they cost (a few microseconds per partition) is what a scrape blocks its thread.

The endpoint is off unless asked for: a fixed default port would collide when
several processes share a host, and it is served without authentication.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
from http import HTTPStatus
from typing import Any

import h11
import trio
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger("eventplatform.metrics")

METRICS_PATH = "/metrics"
CONNECTIONS_MAX = 8
"""Scrapes served at once; Prometheus scrapes a target with one connection at a time."""
REQUEST_HEAD_BYTES_MAX = 8 * 1024
REQUEST_TIMEOUT_S = 10.0
"""The whole exchange, from accept to the answer's last byte (Prometheus's own scrape
timeout is 10 s by default)."""
LISTEN_BACKLOG = 16
READ_BYTES = 4096
CLOSE_TIMEOUT_S = 1.0
ACCEPT_RETRY_DELAY_S = 0.1
THREAD_STOP_TIMEOUT_S = 5.0
DEFAULT_HOST = "127.0.0.1"


class MetricsEndpointError(Exception):
    """A ``--metrics-listen`` value that is no address, or one the endpoint cannot bind."""


def parse_metrics_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; an empty host is 127.0.0.1; port 0
    picks a free one); raises :class:`MetricsEndpointError` for anything else."""
    host, separator, port = listen.rpartition(":")
    if not separator or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise MetricsEndpointError(f"{listen!r} is not HOST:PORT (a port from 0 to 65535)")
    return host.strip("[]") or DEFAULT_HOST, int(port)


def new_registry() -> CollectorRegistry:
    """A registry of the process's own, with the standard process, platform and garbage
    collector figures (``process_*``, ``python_*``)."""
    registry = CollectorRegistry()
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


def bind_metrics_socket(host: str, port: int) -> socket.socket:
    """One listening socket on ``host:port``, bound before the process starts its work so
    that a bad address stops it at once; raises :class:`MetricsEndpointError` (an address
    in use, a host that does not resolve or is not this machine's)."""
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise MetricsEndpointError(f"metrics endpoint: cannot resolve {host!r}: {exc}") from exc
    sock = socket.socket(family, kind, protocol)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        reason = "the address is in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise MetricsEndpointError(
            f"metrics endpoint: cannot listen on {_url_host(host)}:{port}: {reason}"
        ) from exc
    return sock


def bound_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{_url_host(host)}:{port}{METRICS_PATH}"


async def serve_metrics(
    registry: CollectorRegistry,
    sock: socket.socket,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``registry`` on the listening socket ``sock`` (:func:`bind_metrics_socket`)
    at ``/metrics`` until cancelled, then close it; reports the bound port through
    ``task_status``."""
    listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    log.info("metrics on %s", bound_url(sock))
    slots = trio.Semaphore(CONNECTIONS_MAX)
    async with listener, trio.open_nursery() as nursery:
        task_status.started(sock.getsockname()[1])
        while True:
            await slots.acquire()
            try:
                stream = await listener.accept()
            except OSError as exc:  # out of descriptors for now: try again shortly
                slots.release()
                log.warning("metrics endpoint cannot accept: %s", exc)
                await trio.sleep(ACCEPT_RETRY_DELAY_S)
                continue
            nursery.start_soon(_serve_connection, stream, registry, slots)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def _serve_connection(
    stream: trio.SocketStream, registry: CollectorRegistry, slots: trio.Semaphore
) -> None:
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=REQUEST_HEAD_BYTES_MAX)
    try:
        with trio.move_on_after(REQUEST_TIMEOUT_S):
            try:
                request = await _next_request(stream, connection)
            except h11.RemoteProtocolError as exc:
                await _send(stream, connection, exc.error_status_hint, b"bad request\n")
                return
            if request is not None:
                status, body = _answer(request, registry)
                await _send(stream, connection, status, body, head=request.method == b"HEAD")
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError):
        pass
    finally:
        slots.release()
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT_S):
            await stream.aclose()


async def _next_request(stream: trio.SocketStream, connection: h11.Connection) -> Any:
    """The request's head, or None when the client closed before sending one; a head that
    is not whole within REQUEST_HEAD_BYTES_MAX read raises (431)."""
    received = 0
    while True:
        event = connection.next_event()
        if received > REQUEST_HEAD_BYTES_MAX:
            raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
        if isinstance(event, h11.Request):
            return event
        if event is not h11.NEED_DATA:
            return None
        data = await stream.receive_some(READ_BYTES)
        received += len(data)
        connection.receive_data(data)


def _answer(request: h11.Request, registry: CollectorRegistry) -> tuple[int, bytes]:
    path = request.target.split(b"?", 1)[0]
    if path != METRICS_PATH.encode():
        return 404, f"the metrics are at {METRICS_PATH}\n".encode()
    if request.method not in (b"GET", b"HEAD"):
        return 405, b"use GET\n"
    return 200, generate_latest(registry)


async def _send(
    stream: trio.SocketStream,
    connection: h11.Connection,
    status: int,
    body: bytes,
    *,
    head: bool = False,
) -> None:
    content_type = CONTENT_TYPE_LATEST if status == 200 else "text/plain; charset=utf-8"
    headers = [
        ("Content-Type", content_type),
        ("Content-Length", str(len(body))),
        ("Connection", "close"),
    ]
    reason = HTTPStatus(status).phrase.encode()
    data = connection.send(h11.Response(status_code=status, headers=headers, reason=reason))
    if not head:
        data += connection.send(h11.Data(data=body))
    data += connection.send(h11.EndOfMessage())
    await stream.send_all(data)


class MetricsThread:
    """:func:`serve_metrics` in a daemon thread of its own, for a process that is not a
    trio program. The socket is bound by the caller (:func:`bind_metrics_socket`), so a
    bad address is reported before the thread starts; :meth:`stop` ends the thread."""

    def __init__(self, registry: CollectorRegistry, sock: socket.socket) -> None:
        self.registry = registry
        self.sock = sock
        self._token: trio.lowlevel.TrioToken | None = None
        self._serving = threading.Event()
        self._scope = trio.CancelScope()
        self._thread = threading.Thread(target=self._run, name="metrics-endpoint", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._serving.wait(THREAD_STOP_TIMEOUT_S)
        token = self._token
        if token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._scope.cancel)
        self._thread.join(THREAD_STOP_TIMEOUT_S)

    def _run(self) -> None:
        trio.run(self._serve)

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._serving.set()
        with self._scope:
            await serve_metrics(self.registry, self.sock)
