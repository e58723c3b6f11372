"""The controller quorum's real trio shell on a simulated network, under a mock clock.

:class:`SimulatedNetwork` is a :class:`~eventplatform.log.cluster.quorum.Transport`:
it delivers each message after a random delay, and drops, duplicates or
holds back (a partition) some, all drawn from one seeded generator.
:func:`run_quorum` runs three :class:`~eventplatform.log.cluster.quorum.QuorumServer`
voters on it inside the calling ``trio.run`` (which a test gives a
``MockClock(autojump_threshold=0)``), with crashes and restarts (each voter
keeps a :class:`~eventplatform.log.cluster.raft.MemoryStorage`), partitions,
and a client proposing through whoever leads. Each voter applies what it
commits to a state of its own (a running digest of the entries) and
snapshots it every few hundred bytes of entries (a threshold drawn per
seed), so logs truncate and a voter that was away catches up by snapshot.
It checks what ``raft_simulation`` checks, on the shell's own commit and
restore callbacks: one leader per epoch, committed entries that agree,
restored states equal to the committed log's at their offset, acknowledged
proposals kept, and a leader and a new commit soon after the faults stop.

Trio shuffles runnable tasks with a generator of its own; the run seeds it
too, so a seed replays exactly.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from eventplatform.log.cluster.quorum import PROPOSE_TIMEOUT_S, QuorumServer
from eventplatform.log.cluster.raft import (
    Entry,
    MemoryStorage,
    Message,
    NotLeaderError,
    RaftConfig,
)

VOTERS = (1, 2, 3)
FAULTY_S = 20.0
RECOVERY_S = 15.0
CHECK_INTERVAL_S = 0.005
PROPOSE_INTERVAL_S = 0.03
CONFIG = RaftConfig(snapshot_chunk_bytes=32)
SNAPSHOT_BYTES = (60, 200)
"""A voter snapshots after this many bytes of applied entries (one drawn per seed)."""


class SimulatedSafetyError(AssertionError):
    """A safety or liveness property broke; the message names the seed."""


@dataclass
class SimulatedNetwork:
    random: random.Random
    drop: float = 0.05
    duplicate: float = 0.02
    delay_s: tuple[float, float] = (0.001, 0.020)
    cut: set[frozenset[int]] = field(default_factory=set)
    faulty: bool = True
    _deliver: dict[int, Callable[[Message], None]] = field(default_factory=dict)
    _refused: dict[int, Callable[[int], None]] = field(default_factory=dict)

    async def run(
        self,
        node: int,
        deliver: Callable[[Message], None],
        outboxes: Mapping[int, trio.MemoryReceiveChannel[Message]],
        refused: Callable[[int], None],
        *,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        self._deliver[node] = deliver
        self._refused[node] = refused
        try:
            async with trio.open_nursery() as nursery:
                for outbox in outboxes.values():
                    nursery.start_soon(self._pump, outbox, nursery)
                task_status.started(None)
        finally:
            if self._deliver.get(node) is deliver:
                del self._deliver[node]
                del self._refused[node]

    async def _pump(
        self, outbox: trio.MemoryReceiveChannel[Message], nursery: trio.Nursery
    ) -> None:
        async for message in outbox:
            if self._blocked(message) or (self.faulty and self.random.random() < self.drop):
                continue
            copies = 2 if self.faulty and self.random.random() < self.duplicate else 1
            for _ in range(copies):
                nursery.start_soon(self._later, message, self.random.uniform(*self.delay_s))

    async def _later(self, message: Message, delay_s: float) -> None:
        await trio.sleep(delay_s)
        if self._blocked(message):
            return
        deliver = self._deliver.get(message.receiver)
        if deliver is not None:
            deliver(message)
        elif (refused := self._refused.get(message.sender)) is not None:
            refused(message.receiver)  # a crashed voter's port refuses the connection

    def _blocked(self, message: Message) -> bool:
        return frozenset((message.sender, message.receiver)) in self.cut


@dataclass
class QuorumRun:
    seed: int
    committed: list[Entry] = field(default_factory=list)
    leaders: dict[int, int] = field(default_factory=dict)
    acknowledged: dict[bytes, int] = field(default_factory=dict)
    crashes: int = 0
    partitions: int = 0
    digests: list[bytes] = field(default_factory=lambda: [b""])
    """The digest of the committed log's first ``n`` entries, by ``n``."""
    snapshots: int = 0
    installs: int = 0
    """States a running voter restored from a snapshot its leader sent."""


@dataclass
class VoterState:
    """What one voter's applied entries built: their count and digest."""

    offset: int = 0
    digest: bytes = b""
    started: bool = False


def _next_digest(digest: bytes, entry: Entry) -> bytes:
    return hashlib.sha256(digest + entry.epoch.to_bytes(8, "big") + entry.payload).digest()


async def run_quorum(seed: int) -> QuorumRun:
    """One seeded run; raises SimulatedSafetyError when a property breaks."""
    draw = random.Random(seed)
    _seed_trio_scheduler(seed)
    snapshot_bytes = draw.choice(SNAPSHOT_BYTES)
    network = SimulatedNetwork(draw)
    storages = {node: MemoryStorage() for node in VOTERS}
    servers: dict[int, QuorumServer] = {}
    scopes: dict[int, trio.CancelScope] = {}
    run = QuorumRun(seed)

    def committed(node: int, state: VoterState) -> Callable[[int, Entry], None]:
        def check(offset: int, entry: Entry) -> None:
            if offset != state.offset:
                raise SimulatedSafetyError(
                    f"seed {seed}: voter {node} applied {offset} after {state.offset}"
                )
            state.started = True
            state.offset, state.digest = offset + 1, _next_digest(state.digest, entry)
            if offset < len(run.committed):
                if run.committed[offset] != entry:
                    raise SimulatedSafetyError(
                        f"seed {seed}: voter {node} committed {entry} at {offset}, "
                        f"not {run.committed[offset]}"
                    )
            else:
                run.committed.append(entry)
                run.digests.append(state.digest)

        return check

    def take_snapshot(state: VoterState) -> Callable[[], bytes]:
        def take() -> bytes:
            run.snapshots += 1
            return f"{state.offset}:{state.digest.hex()}".encode()

        return take

    def restore(node: int, state: VoterState) -> Callable[[bytes], None]:
        def restore_from(data: bytes) -> None:
            offset, _, digest = data.decode().partition(":")
            end = int(offset)
            if end >= len(run.digests) or run.digests[end].hex() != digest:
                raise SimulatedSafetyError(
                    f"seed {seed}: voter {node} restored a state at {end} that is not the "
                    f"committed log's"
                )
            run.installs += state.started
            state.offset, state.digest, state.started = end, bytes.fromhex(digest), True

        return restore_from

    async def start(nursery: trio.Nursery, node: int) -> None:
        state = VoterState()
        server = QuorumServer(
            node,
            VOTERS,
            storages[node],
            network,
            config=CONFIG,
            on_commit=committed(node, state),
            snapshot_bytes=snapshot_bytes,
            take_snapshot=take_snapshot(state),
            restore=restore(node, state),
        )
        scope = trio.CancelScope()

        async def voter(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await server.serve(task_status=task_status)

        servers[node], scopes[node] = server, scope
        await nursery.start(voter)

    def leading() -> list[QuorumServer]:
        return [server for server in servers.values() if server.is_leader]

    async def monitor() -> None:
        while True:
            for server in leading():
                known = run.leaders.setdefault(server.raft.epoch, server.id)
                if known != server.id:
                    epoch = server.raft.epoch
                    raise SimulatedSafetyError(
                        f"seed {seed}: voters {known} and {server.id} lead epoch {epoch}"
                    )
            await trio.sleep(CHECK_INTERVAL_S)

    async def propose(number: int) -> None:
        """Through whoever leads now; returns at once when nobody does."""
        payload = f"p{number}".encode()
        for server in leading():
            try:
                offset = await server.propose([payload])
            except (NotLeaderError, trio.TooSlowError):
                return
            run.acknowledged[payload] = offset
            return

    async def client(nursery: trio.Nursery) -> None:
        number = 0
        while True:
            nursery.start_soon(propose, number)
            number += 1
            await trio.sleep(PROPOSE_INTERVAL_S)

    async def crashes(nursery: trio.Nursery) -> None:
        while True:
            await trio.sleep(draw.expovariate(1 / 1.5))
            alive = sorted(node for node in servers if node in scopes)
            if not alive:
                continue
            node = draw.choice(alive)
            scopes.pop(node).cancel()
            del servers[node]
            run.crashes += 1
            await trio.sleep(draw.uniform(0.1, 2.0))
            await start(nursery, node)

    async def partitions() -> None:
        while True:
            await trio.sleep(draw.expovariate(1 / 2.0))
            side = set(draw.sample(VOTERS, draw.randint(1, len(VOTERS) - 1)))
            network.cut = {frozenset((a, b)) for a in side for b in VOTERS if b not in side}
            run.partitions += 1
            await trio.sleep(draw.uniform(0.2, 3.0))
            network.cut = set()

    async with trio.open_nursery() as nursery:
        for node in VOTERS:
            await start(nursery, node)
        nursery.start_soon(monitor)
        async with trio.open_nursery() as faults:
            faults.start_soon(client, faults)
            faults.start_soon(crashes, nursery)
            faults.start_soon(partitions)
            await trio.sleep(FAULTY_S)
            faults.cancel_scope.cancel()
        network.faulty, network.cut = False, set()
        for node in VOTERS:
            if node not in scopes:
                await start(nursery, node)
        with trio.move_on_after(RECOVERY_S) as waited:
            while not leading():
                await trio.sleep(CHECK_INTERVAL_S)
        if waited.cancelled_caught:
            raise SimulatedSafetyError(f"seed {seed}: no leader {RECOVERY_S} s after healing")
        before = len(run.committed)
        with trio.move_on_after(RECOVERY_S + PROPOSE_TIMEOUT_S):
            while len(run.committed) <= before:
                await propose(10**6 + len(run.committed))
                await trio.sleep(CHECK_INTERVAL_S)  # no leader just now: do not spin
        if len(run.committed) <= before:
            raise SimulatedSafetyError(f"seed {seed}: nothing commits after healing")
        nursery.cancel_scope.cancel()
    for payload, offset in run.acknowledged.items():
        if offset >= len(run.committed) or run.committed[offset].payload != payload:
            raise SimulatedSafetyError(f"seed {seed}: acknowledged {payload!r} at {offset} lost")
    return run


def _seed_trio_scheduler(seed: int) -> None:
    """Trio shuffles each batch of runnable tasks with a module-level generator."""
    generator = getattr(trio._core._run, "_r", None)
    if isinstance(generator, random.Random):
        generator.seed(seed)
