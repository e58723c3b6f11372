"""How a node reaches other nodes and takes their connections.

Everything a broker or controller sends between processes (Kafka requests
from clients and replica fetchers, quorum messages, requests to the
controller) goes over a :class:`Network`. :data:`TCP` is the real one; a
simulation gives its nodes an in-memory network instead, so the same code
runs many nodes in one ``trio.run`` under a mock clock.
"""

from __future__ import annotations

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
