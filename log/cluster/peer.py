"""A broker's Kafka-protocol connections to other brokers (replica fetches, share
state, transaction markers).

One request at a time per connection: send the frame, read the answer's frame,
decode it with the same codec the broker serves with. Any failure closes the
connection; the caller reconnects. :class:`PeerPool` keeps one connection per
other broker for the requests a broker sends now and then (not replica
fetches, which have their own), one request at a time on each.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import trio

from eventplatform.log.cluster.network import TCP, Network
from eventplatform.log.protocol import Api, ProtocolError
from eventplatform.log.protocol.frames import decode_response, encode_request

_SIZE = struct.Struct(">i")
RESPONSE_BYTES_MAX = 256 * 1024 * 1024
CONNECT_TIMEOUT_S = 2.0


class PeerError(Exception):
    """The other broker could not be reached, or answered with something unreadable."""


class PeerConnection:
    """See the module docstring."""

    def __init__(self, host: str, port: int, client_id: str, network: Network = TCP) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.network = network
        self._stream: trio.abc.Stream | None = None
        self._correlation = 0

    async def request(
        self, api: Api, version: int, body: dict[str, Any], *, timeout_s: float
    ) -> dict[str, Any]:
        """Send one request and return the decoded response body; raises PeerError."""
        try:
            with trio.fail_after(timeout_s):
                stream = await self._connect()
                self._correlation += 1
                frame = encode_request(
                    api, version, body, correlation_id=self._correlation, client_id=self.client_id
                )
                await stream.send_all(frame)
                size = _SIZE.unpack(await _receive_exactly(stream, _SIZE.size))[0]
                if not 0 <= size <= RESPONSE_BYTES_MAX:
                    raise PeerError(f"a response of {size} bytes")
                payload = await _receive_exactly(stream, size)
            correlation, response = decode_response(api, version, payload)
            if correlation != self._correlation:
                raise PeerError(f"correlation id {correlation}, expected {self._correlation}")
            return response
        except (OSError, trio.BrokenResourceError, trio.TooSlowError, ProtocolError) as exc:
            await self.aclose()
            raise PeerError(f"{self.host}:{self.port}: {exc!r}") from exc
        except BaseException:
            await self.aclose()
            raise

    async def _connect(self) -> trio.abc.Stream:
        if self._stream is None:
            with trio.fail_after(CONNECT_TIMEOUT_S):
                self._stream = await self.network.connect(self.host, self.port)
        return self._stream

    async def aclose(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await trio.aclose_forcefully(stream)


async def _receive_exactly(stream: trio.abc.Stream, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        data = await stream.receive_some(min(count - len(chunks), 1 << 20))
        if not data:
            raise trio.BrokenResourceError("the peer closed the connection")
        chunks += data
    return bytes(chunks)


Address = Callable[[int], "tuple[str, int] | None"]
"""Where another broker is reached (its registered address), or None if unknown."""


class PeerPool:
    """One connection per other broker, for occasional requests; see the module."""

    def __init__(self, address: Address, client_id: str, network: Network = TCP) -> None:
        self.address = address
        self.client_id = client_id
        self.network = network
        self._peers: dict[int, PeerConnection] = {}
        self._locks: dict[int, trio.Lock] = {}

    async def request(
        self, broker_id: int, api: Api, version: int, body: dict[str, Any], *, timeout_s: float
    ) -> dict[str, Any]:
        """One request to ``broker_id``; raises PeerError (also for an unknown broker)."""
        address = self.address(broker_id)
        if address is None:
            await trio.lowlevel.checkpoint()
            raise PeerError(f"broker {broker_id} is not registered")
        lock = self._locks.setdefault(broker_id, trio.Lock())
        async with lock:
            peer = self._peers.get(broker_id)
            if peer is None or (peer.host, peer.port) != address:
                if peer is not None:
                    await peer.aclose()
                peer = PeerConnection(*address, self.client_id, self.network)
                self._peers[broker_id] = peer
            return await peer.request(api, version, body, timeout_s=timeout_s)

    async def aclose(self) -> None:
        for peer in self._peers.values():
            await peer.aclose()
        self._peers.clear()
