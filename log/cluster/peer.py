"""A broker's Kafka-protocol connection to another broker (replica fetches).

One request at a time: send the frame, read the answer's frame, decode it
with the same codec the broker serves with. Any failure closes the
connection; the caller reconnects.
"""

from __future__ import annotations

import struct
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
