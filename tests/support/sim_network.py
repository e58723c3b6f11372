"""An in-memory stream network for whole-cluster simulations, under trio's mock clock.

:class:`Fabric` joins named hosts. Each host gets a
:class:`~eventplatform.log.cluster.network.Network` (:meth:`Fabric.host`)
whose ``connect`` and ``listen`` the real broker, controller and replica
code use unchanged. A connection is a pair of byte pipes with TCP's
guarantees (in order, no duplicates) and its failures, all drawn from one
seeded generator:

* **delay**: every write arrives after a random latency, in order;
* **drop**: while the network is faulty, a write may be lost with the rest
  of its connection (a reset: both ends see it broken);
* **partition**: writes between hosts on different sides of a cut are held
  (retransmitted, as TCP does) and flow again when the cut heals, unless the
  connection was reset when the cut began; a connect across a cut hangs
  until it heals;
* **pause**: a paused host's traffic stops both ways and is delivered on
  resume, as a stopped process's sockets are;
* **crash**: a host that dies resets its connections (its kernel does),
  and a connect to a host with no listener is refused.

A request the network lost is retried by whoever sent it; that retry is
how duplicates reach a server over TCP, and the idempotent producer and the
quorum are what keep them harmless.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import trio

CONNECT_REFUSED_DELAY_S = 0.001


class _Pipe:
    """One direction of a connection: writes queue with their delivery times."""

    def __init__(self, fabric: Fabric, source: str, target: str) -> None:
        self.fabric = fabric
        self.source = source
        self.target = target
        self.queue: list[tuple[float, bytearray]] = []
        self.last_at = 0.0
        self.eof = False
        self.broken = False
        self.changed = trio.Event()

    def notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def blocked(self) -> bool:
        return self.fabric.blocked(self.source, self.target)

    def write(self, data: bytes) -> None:
        now = trio.current_time()
        at = max(self.last_at, now + self.fabric.random.uniform(*self.fabric.delay_s))
        self.last_at = at
        self.queue.append((at, bytearray(data)))
        self.notify()

    async def read(self, max_bytes: int) -> bytes:
        while True:
            if self.broken:
                raise trio.BrokenResourceError("connection reset")
            deadline = math.inf
            if self.queue and not self.blocked():
                at, chunk = self.queue[0]
                if at <= trio.current_time():
                    data = bytes(chunk[:max_bytes])
                    del chunk[:max_bytes]
                    if not chunk:
                        self.queue.pop(0)
                    await trio.lowlevel.checkpoint()
                    return data
                deadline = at
            elif not self.queue and self.eof:
                await trio.lowlevel.checkpoint()
                return b""
            changed = self.changed
            with trio.move_on_at(deadline):
                await changed.wait()


class SimStream(trio.abc.Stream):
    """One end of a simulated connection."""

    def __init__(self, connection: _Connection, outbound: _Pipe, inbound: _Pipe) -> None:
        self.connection = connection
        self.outbound = outbound
        self.inbound = inbound
        self.peer = inbound.source
        self.closed = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed:
            raise trio.ClosedResourceError("the stream is closed")
        if self.outbound.broken:
            raise trio.BrokenResourceError("connection reset")
        fabric = self.connection.fabric
        if fabric.faulty and fabric.random.random() < fabric.reset_chance:
            fabric.reset(self.connection)
            raise trio.BrokenResourceError("connection reset")
        if data:
            self.outbound.write(bytes(data))
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def send_eof(self) -> None:
        self.outbound.eof = True
        self.outbound.notify()
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.closed:
            raise trio.ClosedResourceError("the stream is closed")
        return await self.inbound.read(max_bytes or 65_536)

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self.outbound.eof = True
            self.outbound.notify()
            self.inbound.broken = True
            self.inbound.notify()
        await trio.lowlevel.checkpoint()


@dataclass
class _Connection:
    fabric: Fabric
    client: str
    server: str
    up: _Pipe = field(init=False)
    down: _Pipe = field(init=False)

    def __post_init__(self) -> None:
        self.up = _Pipe(self.fabric, self.client, self.server)
        self.down = _Pipe(self.fabric, self.server, self.client)

    def ends(self) -> tuple[SimStream, SimStream]:
        return SimStream(self, self.up, self.down), SimStream(self, self.down, self.up)

    def crosses(self, hosts: set[str]) -> bool:
        return self.client in hosts or self.server in hosts


class SimListener(trio.abc.Listener[trio.abc.Stream]):
    def __init__(self, fabric: Fabric, address: tuple[str, int]) -> None:
        self.fabric = fabric
        self.address = address
        self.send, self.receive = trio.open_memory_channel[trio.abc.Stream](math.inf)

    async def accept(self) -> trio.abc.Stream:
        try:
            return await self.receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError("the listener is closed") from None

    async def aclose(self) -> None:
        if self.fabric.listeners.get(self.address) is self:
            del self.fabric.listeners[self.address]
        self.send.close()
        await trio.lowlevel.checkpoint()


@dataclass
class Fabric:
    """See the module docstring."""

    random: random.Random
    delay_s: tuple[float, float] = (0.0002, 0.003)
    reset_chance: float = 0.0005
    faulty: bool = True
    cut: set[frozenset[str]] = field(default_factory=set)
    paused: set[str] = field(default_factory=set)
    listeners: dict[tuple[str, int], SimListener] = field(default_factory=dict)
    connections: list[_Connection] = field(default_factory=list)
    changed: trio.Event = field(default_factory=trio.Event)
    _ports: int = 30_000

    def host(self, name: str) -> SimHost:
        return SimHost(self, name)

    def blocked(self, a: str, b: str) -> bool:
        return a in self.paused or b in self.paused or frozenset((a, b)) in self.cut

    def _notify(self) -> None:
        self.connections = [c for c in self.connections if not (c.up.broken and c.down.broken)]
        for connection in self.connections:
            connection.up.notify()
            connection.down.notify()
        self.changed.set()
        self.changed = trio.Event()

    def reset(self, connection: _Connection) -> None:
        for pipe in (connection.up, connection.down):
            pipe.broken = True
            pipe.notify()

    def partition(self, side: set[str], everyone: set[str], reset_chance: float = 0.5) -> None:
        """Cut ``side`` off from the rest of ``everyone``; some crossing connections reset."""
        self.cut = {frozenset((a, b)) for a in side for b in everyone - side}
        for connection in list(self.connections):
            crossing = frozenset((connection.client, connection.server)) in self.cut
            if crossing and self.random.random() < reset_chance:
                self.reset(connection)
        self._notify()

    def cut_link(self, a: str, b: str) -> None:
        """Cut ``a`` from ``b`` alone; their connections reset."""
        self.cut.add(frozenset((a, b)))
        for connection in list(self.connections):
            if frozenset((connection.client, connection.server)) == frozenset((a, b)):
                self.reset(connection)
        self._notify()

    def heal(self) -> None:
        self.cut = set()
        self._notify()

    def pause(self, host: str) -> None:
        self.paused.add(host)
        self._notify()

    def resume(self, host: str) -> None:
        self.paused.discard(host)
        self._notify()

    def crash(self, host: str) -> None:
        """``host`` died: its listeners go and its connections reset."""
        for address in [a for a in self.listeners if a[0] == host]:
            listener = self.listeners.pop(address)
            listener.send.close()
        for connection in list(self.connections):
            if connection.crosses({host}):
                self.reset(connection)
        self.paused.discard(host)
        self._notify()

    async def connect(self, source: str, host: str, port: int) -> trio.abc.Stream:
        while self.blocked(source, host):
            await self.changed.wait()
        await trio.sleep(self.random.uniform(*self.delay_s))
        listener = self.listeners.get((host, port))
        if listener is None:
            await trio.sleep(CONNECT_REFUSED_DELAY_S)
            raise ConnectionRefusedError(f"{host}:{port}: connection refused")
        connection = _Connection(self, source, host)
        self.connections.append(connection)
        client, server = connection.ends()
        try:
            listener.send.send_nowait(server)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise ConnectionRefusedError(f"{host}:{port}: connection refused") from None
        return client

    def listen(self, host: str, port: int) -> tuple[list[trio.abc.Listener[trio.abc.Stream]], int]:
        if port == 0:
            self._ports += 1
            port = self._ports
        if (host, port) in self.listeners:
            raise OSError(f"{host}:{port} is in use")
        listener = self.listeners[(host, port)] = SimListener(self, (host, port))
        return [listener], port


@dataclass
class SimHost:
    """One host's view of the fabric: a :class:`~eventplatform.log.cluster.network.Network`."""

    fabric: Fabric
    name: str

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        return await self.fabric.connect(self.name, host, port)

    async def listen(
        self, host: str, port: int
    ) -> tuple[list[trio.abc.Listener[trio.abc.Stream]], int]:
        await trio.lowlevel.checkpoint()
        return self.fabric.listen(self.name, port)
