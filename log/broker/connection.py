"""One client connection: read frames, run handlers in order, write responses in order.

The reader decodes each request and runs its handler to completion before it
reads the next frame, so requests on one connection take effect in the order
they were sent (Kafka's guarantee; pipelined produces to one partition stay
in order). Responses go through a bounded channel to the writer task, which
sends them in that same order; at most ``max.in.flight.requests.per.connection``
answered-but-unsent responses wait, after which the reader stops reading.

A handler may answer with a :class:`~eventplatform.log.broker.context.Deferred`
body (an acks=all produce waiting for its replicas, its batches appended
already): the writer waits for it in its turn, while the reader goes on with
the requests behind it, so a connection's acks=all produces replicate
together instead of one round trip after another.

Record data in a response is a ``FileRegion`` with its own duplicate file
descriptor; the writer sends it with ``os.sendfile`` and closes the
descriptor, so a segment deleted meanwhile is still read correctly.

Garbage framing (a negative or oversized size, a header or body that does not
decode, an API key no table knows) is logged and closes this connection only.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import socket
import time
from typing import Any

import trio

from eventplatform.log.broker.broker import Broker
from eventplatform.log.broker.context import Deferred, Handler, RequestContext
from eventplatform.log.broker.dispatcher import known_api, unsupported_version_response
from eventplatform.log.broker.handlers.sasl_authenticate import exchange_step
from eventplatform.log.broker.memory_pool import MemoryPool
from eventplatform.log.broker.metrics import ApiStats
from eventplatform.log.broker.regions import OwnedRegion
from eventplatform.log.invariants import require
from eventplatform.log.protocol import (
    FRAME_SIZE,
    Chunk,
    ProtocolError,
    chunks_length,
    decode_request_body,
    decode_request_header,
    encode_response,
)
from eventplatform.log.protocol.apis import API_VERSIONS
from eventplatform.log.security.session import SaslStage, Session

log = logging.getLogger("eventplatform.broker.connection")

READ_AHEAD_BYTES = 64 * 1024
"""What one read asks for while looking for the next frame's size: small frames
arrive several to a read, and a connection never holds more than this outside
the request memory pool."""
RECEIVE_BYTES_MAX = 4 * 1024 * 1024
SEND_TIMEOUT_S = 30.0
UNAUTHENTICATED_FRAME_BYTES_MAX = 512 * 1024
"""The largest frame a connection may send before it has authenticated (Kafka's
``sasl.server.max.receive.size``): a stranger cannot make the broker reserve
``socket.request.max.bytes``."""
_connection_ids = itertools.count(1)


class _Pending:
    """A deferred response in the writer's queue, encoded once its body is ready.

    It keeps its request's pool bytes (``reserved_bytes``) until it is sent: the
    body it waits for may still refer to the request frame. Its API's figures
    (``stats``) hear of it once its body is ready."""

    __slots__ = (
        "api",
        "correlation_id",
        "deferred",
        "reserved_bytes",
        "started",
        "stats",
        "version",
    )

    def __init__(
        self,
        api: Any,
        version: int,
        correlation_id: int,
        deferred: Deferred,
        stats: ApiStats,
        started: float,
    ) -> None:
        self.api = api
        self.version = version
        self.correlation_id = correlation_id
        self.deferred = deferred
        self.reserved_bytes = 0
        self.stats = stats
        self.started = started

    async def chunks(self) -> list[Chunk]:
        body = await self.deferred.body()
        chunks = encode_response(self.api, self.version, self.correlation_id, body)
        self.stats.answered(time.perf_counter() - self.started, _framed_length(chunks))
        return chunks


Response = list[Chunk] | _Pending


class FrameTooLargeError(ProtocolError):
    """A frame size below zero, over ``socket.request.max.bytes`` or over the whole
    ``queued.max.request.bytes`` pool."""


class FrameReader:
    """Splits a byte stream into size-prefixed frames, bounded by ``frame_bytes_max``.

    With a ``pool``, each frame's bytes are reserved there after its size is read
    and before its body is: while the pool is short, this connection reads nothing.
    Beyond the frame in hand, the reader holds at most ``READ_AHEAD_BYTES`` read
    with a size prefix. The caller owns the reservation of the frame returned
    (:meth:`take_reservation`) and releases it once the request is answered.
    """

    def __init__(
        self,
        stream: trio.abc.ReceiveStream,
        frame_bytes_max: int,
        pool: MemoryPool | None = None,
    ) -> None:
        self.stream = stream
        self.frame_bytes_max = frame_bytes_max
        self.pool = pool
        self.buffer = bytearray()
        self._reserved_bytes = 0

    async def next_frame(self) -> bytearray | None:
        """The next frame without its size prefix, or None at a clean end of stream."""
        require(self._reserved_bytes == 0, "the previous frame's reservation was not taken")
        if not await self._fill(FRAME_SIZE.size):
            if self.buffer:
                raise ProtocolError("connection closed inside a frame size")
            return None
        size = FRAME_SIZE.unpack_from(self.buffer)[0]
        if size < 0 or size > self.frame_bytes_max:
            raise FrameTooLargeError(
                f"frame size {size} is outside [0, socket.request.max.bytes={self.frame_bytes_max}]"
            )
        if self.pool is not None:
            if not self.pool.fits(size):
                raise FrameTooLargeError(
                    f"frame size {size} is larger than the whole request memory pool "
                    f"(queued.max.request.bytes={self.pool.capacity_bytes})"
                )
            await self.pool.reserve(size)
            self._reserved_bytes = size
        try:
            return await self._read_body(size)
        except BaseException:
            self._release()
            raise

    def take_reservation(self) -> int:
        """The pool bytes of the frame just returned, now the caller's to release."""
        reserved, self._reserved_bytes = self._reserved_bytes, 0
        return reserved

    def _release(self) -> None:
        if self.pool is not None:
            self.pool.release(self.take_reservation())

    async def _fill(self, count: int) -> bool:
        while len(self.buffer) < count:
            data = await self.stream.receive_some(READ_AHEAD_BYTES)
            if not data:
                return False
            self.buffer += data
        return True

    async def _read_body(self, size: int) -> bytearray:
        """The frame's ``size`` bytes after its prefix: read exactly, never past its end,
        into one buffer of the frame's size (the bytes the pool reserved)."""
        start = FRAME_SIZE.size
        buffered = self.buffer[start : start + size]
        del self.buffer[: start + len(buffered)]
        if len(buffered) == size:
            return buffered
        frame = bytearray(size)
        frame[: len(buffered)] = buffered
        filled = len(buffered)
        del buffered
        view = memoryview(frame)
        while filled < size:
            received = await self._receive_into(view[filled : filled + RECEIVE_BYTES_MAX])
            if not received:
                raise ProtocolError("connection closed inside a frame")
            filled += received
        view.release()
        return frame

    async def _receive_into(self, target: memoryview) -> int:
        """Receive straight into the frame: a socket's bytes are never copied, nor is a
        receive buffer allocated beside the frame the pool reserved."""
        if isinstance(self.stream, trio.SocketStream):
            try:
                return await self.stream.socket.recv_into(target)
            except OSError as exc:
                raise trio.BrokenResourceError from exc
        data = await self.stream.receive_some(len(target))
        target[: len(data)] = data
        return len(data)


class Connection:
    """See the module docstring."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        broker: Broker,
        handlers: dict[int, Handler],
        session: Session,
        *,
        peer: str | None = None,
    ) -> None:
        self.stream = stream
        self.broker = broker
        self.handlers = handlers
        self.session = session
        self.id = next(_connection_ids)
        self.peer = peer if peer is not None else peer_host(stream)
        self.idle = True
        self._stopping = False
        self._read_scope = trio.CancelScope()

    def stop_when_idle(self) -> None:
        """Finish the request in hand (if any), send what is queued, then close."""
        self._stopping = True
        if self.idle:
            self._read_scope.cancel()

    async def run(self) -> None:
        config = self.broker.config
        send, receive = trio.open_memory_channel[Response](
            config.max_in_flight_requests_per_connection
        )
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_responses, receive)
                async with send:
                    await self._read_requests(send)
        # The nursery wraps what its body and writer raise in an ExceptionGroup.
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except* ProtocolError as group:
            reason = group.exceptions[0]
            log.warning("closing connection %d from %s: %s", self.id, self.peer, reason)
        except* Exception:
            # A handler bug: this client loses its connection, everyone else keeps theirs.
            log.exception(
                "closing connection %d from %s after an internal error", self.id, self.peer
            )
        finally:
            self.broker.shares.connection_closed(self.id)
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self.stream.aclose()

    async def _read_requests(self, send: trio.MemorySendChannel[Response]) -> None:
        pool = self.broker.request_memory
        reader = FrameReader(self.stream, self.broker.config.socket_request_max_bytes, pool)
        idle_timeout_s = self.broker.config.connections_max_idle_ms / 1000
        while not self._stopping and self.session.stage is not SaslStage.FAILED:
            if self.session.muted_until > trio.current_time():
                await trio.sleep_until(self.session.muted_until)  # a quota's throttle
            self.idle = True
            reader.frame_bytes_max = self._frame_bytes_max()
            with trio.move_on_after(idle_timeout_s) as self._read_scope:
                frame = await reader.next_frame()
            self.idle = False
            if self._read_scope.cancelled_caught:
                if not self._stopping:
                    log.info("closing idle connection %d from %s", self.id, self.peer)
                return
            if frame is None:
                return
            reserved = reader.take_reservation()
            try:
                response = await self._answer(frame)
            except BaseException:
                pool.release(reserved)
                raise
            del frame
            if isinstance(response, _Pending):
                response.reserved_bytes = reserved
            else:
                pool.release(reserved)
            if response is not None:
                await send.send(response)

    def _frame_bytes_max(self) -> int:
        limit = self.broker.config.socket_request_max_bytes
        if self.session.authenticated:
            return limit
        return min(limit, UNAUTHENTICATED_FRAME_BYTES_MAX)

    async def _answer(self, frame: bytearray) -> Response | None:
        if self.session.reads_bare_tokens:
            return await self._bare_token(bytes(frame))
        started = time.perf_counter()
        header, position = decode_request_header(frame)
        api = known_api(header.api_key)
        if api is None:
            raise ProtocolError(f"unknown API key {header.api_key}")
        stats = self.broker.request_stats.received(header.api_key, len(frame) + FRAME_SIZE.size)
        refusal = self.session.permits(header.api_key, trio.current_time())
        if refusal is not None:
            raise ProtocolError(f"{api.name} refused: {refusal}")
        handler = self.handlers.get(header.api_key)
        chunks: list[Chunk]
        if handler is None or not handler.accepts(header.api_version):
            chunks = self._unsupported(header.api_key, header.api_version, header.correlation_id)
        else:
            request = decode_request_body(api, header.api_version, frame, position)
            context = RequestContext(self.broker, header, self.peer, self.id, self.session)
            body = await handler.handle(context, request)
            if body is None:
                stats.answered(time.perf_counter() - started, 0)
                return None
            if isinstance(body, Deferred):
                return _Pending(
                    api, header.api_version, header.correlation_id, body, stats, started
                )
            chunks = encode_response(api, header.api_version, header.correlation_id, body)
        stats.answered(time.perf_counter() - started, _framed_length(chunks))
        return chunks

    async def _bare_token(self, token: bytes) -> Response | None:
        """One SASL token after a v0 handshake, answered bare; a failure closes the
        connection without an answer, since v0 has no way to say why."""
        answer, refusal = await exchange_step(self.broker, self.session, self.peer, self.id, token)
        if refusal is not None:
            self.session.fail()
            return None
        return [answer]

    def _unsupported(self, api_key: int, version: int, correlation_id: int) -> list[Chunk]:
        api = known_api(api_key)
        assert api is not None
        if api is API_VERSIONS:
            body: dict[str, Any] = {
                "error_code": 35,
                "api_keys": advertised_versions(self.handlers),
            }
            return encode_response(api, 0, correlation_id, body)
        if version not in api.versions:
            raise ProtocolError(f"{api.name} v{version} is beyond every known version")
        error_body = unsupported_version_response(api, version)
        if error_body is None:
            raise ProtocolError(f"{api.name} v{version} is not served and has no error field")
        return encode_response(api, version, correlation_id, error_body)

    async def _write_responses(self, receive: trio.MemoryReceiveChannel[Response]) -> None:
        try:
            async for response in receive:
                try:
                    await self._write_response(response)
                finally:
                    self._release_request(response)
        finally:
            receive.close()
            while True:
                try:
                    response = receive.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                _close_regions(response)
                self._release_request(response)

    async def _write_response(self, response: Response) -> None:
        chunks = await response.chunks() if isinstance(response, _Pending) else response
        try:
            with trio.fail_after(SEND_TIMEOUT_S):
                await self._send(chunks)
        finally:
            _close_regions(chunks)

    def _release_request(self, response: Response) -> None:
        """Give a deferred response's request bytes back to the pool (once)."""
        if isinstance(response, _Pending):
            self.broker.request_memory.release(response.reserved_bytes)
            response.reserved_bytes = 0

    async def _send(self, chunks: list[Chunk]) -> None:
        pending = bytearray(FRAME_SIZE.pack(chunks_length(chunks)))
        for chunk in chunks:
            if isinstance(chunk, bytes):
                pending += chunk
                continue
            if pending:
                await self.stream.send_all(pending)
                pending = bytearray()
            await self._sendfile(chunk)
        if pending:
            await self.stream.send_all(pending)

    async def _sendfile(self, region: Any) -> None:
        """Send a file region with ``os.sendfile``, waiting for the socket when it is full;
        a stream that is not a socket gets the region's bytes read for it."""
        if not isinstance(self.stream, trio.SocketStream):
            data = os.pread(region.descriptor, region.length, region.position)
            if len(data) != region.length:
                raise ProtocolError("file region shorter than announced")
            await self.stream.send_all(data)
            return
        sock = self.stream.socket
        descriptor = sock.fileno()
        position = region.position
        remaining = region.length
        while remaining > 0:
            try:
                sent = os.sendfile(descriptor, region.descriptor, position, remaining)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
                continue
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                    raise trio.BrokenResourceError from exc
                raise
            if sent == 0:
                raise ProtocolError("file region shorter than announced")
            position += sent
            remaining -= sent
        await trio.lowlevel.checkpoint()


def _framed_length(chunks: list[Chunk]) -> int:
    return FRAME_SIZE.size + chunks_length(chunks)


def _close_regions(chunks: Response) -> None:
    if isinstance(chunks, _Pending):
        return
    for chunk in chunks:
        if isinstance(chunk, OwnedRegion):
            chunk.close()


def advertised_versions(handlers: dict[int, Handler]) -> list[dict[str, int]]:
    """What ApiVersions lists: every API the broker serves but this log's own."""
    return [
        {"api_key": key, "min_version": handler.versions.low, "max_version": handler.versions.high}
        for key, handler in sorted(handlers.items())
        if handler.advertised
    ]


def peer_host(stream: trio.abc.Stream) -> str:
    """The client's address: the connection quotas count connections by it."""
    if isinstance(stream, trio.SocketStream):
        with contextlib.suppress(OSError):
            return str(stream.socket.getpeername()[0])
    return str(getattr(stream, "peer", "?"))


def configure_socket(sock: trio.socket.SocketType) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
