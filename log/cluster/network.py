"""How a node reaches other nodes and takes their connections.

Everything a broker or controller sends between processes (Kafka requests
from clients and replica fetchers, quorum messages, requests to the
controller) goes over a :class:`Network`. :data:`TCP` is the real one; a
simulation gives its nodes an in-memory network instead, so the same code
runs many nodes in one ``trio.run`` under a mock clock.
"""

from __future__ import annotations

import ssl
from typing import Protocol

import trio


class Network(Protocol):
    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        """A stream to ``host:port``; raises OSError when nothing answers there, one that
        :func:`refused` recognises when the host answered that nothing listens there."""
        ...

    async def listen(
        self, host: str, port: int
    ) -> tuple[list[trio.abc.Listener[trio.abc.Stream]], int]:
        """Listeners on ``host:port`` (port 0: any free one; an empty host: every
        interface) and the bound port."""
        ...


class TcpNetwork:
    """The operating system's TCP."""

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        return await trio.open_tcp_stream(host, port)

    async def listen(
        self, host: str, port: int
    ) -> tuple[list[trio.abc.Listener[trio.abc.Stream]], int]:
        listeners = await trio.open_tcp_listeners(port, host=host or None)
        bound = int(listeners[0].socket.getsockname()[1])
        return list[trio.abc.Listener[trio.abc.Stream]](listeners), bound


TCP: Network = TcpNetwork()


def refused(error: OSError) -> bool:
    """Whether a failed connect was refused (no process listens at the address), rather
    than timed out or unreachable. trio reports a refusal as an OSError caused by a group
    of one refusal per address it tried."""
    if isinstance(error, ConnectionRefusedError):
        return True
    cause = error.__cause__
    return isinstance(cause, BaseExceptionGroup) and all(
        isinstance(inner, ConnectionRefusedError) for inner in cause.exceptions
    )


TLS_HANDSHAKE_TIMEOUT_S = 10.0


class TlsNetwork:
    """Another network with mutual TLS on every connection: the cluster's own traffic
    (replica fetches, requests to the controller, the quorum's messages) when the
    inter-broker listener is SSL.

    Both ends present a certificate the cluster's truststore vouches for, and each checks
    the other's, so a process without one cannot fetch as a follower, register as a
    broker or cast a vote. A client also checks that the server's certificate names the
    host it dialled.
    """

    def __init__(
        self, inner: Network, server: ssl.SSLContext | None, client: ssl.SSLContext
    ) -> None:
        """``server`` None: a client only (an operator's tool), which listens nowhere."""
        self.inner = inner
        self.server = server
        self.client = client

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        stream = await self.inner.connect(host, port)
        secured = trio.SSLStream(stream, self.client, server_hostname=host)
        try:
            with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
                await secured.do_handshake()
        except (trio.BrokenResourceError, trio.TooSlowError) as exc:
            await stream.aclose()
            raise OSError(
                f"TLS handshake with {host}:{port} failed: {exc.__cause__ or exc}"
            ) from exc
        return secured

    async def listen(
        self, host: str, port: int
    ) -> tuple[list[trio.abc.Listener[trio.abc.Stream]], int]:
        if self.server is None:
            raise OSError("this network only connects; it has no server certificate")
        server = self.server
        listeners, bound = await self.inner.listen(host, port)
        secured: list[trio.abc.Listener[trio.abc.Stream]] = [
            trio.SSLListener(listener, server) for listener in listeners
        ]
        return secured, bound
