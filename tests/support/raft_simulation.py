"""A deterministic simulation of a Raft quorum: nodes, a faulty network, crashes, a checker.

Everything is driven by one seeded generator and a virtual clock (an event
queue in milliseconds), so a seed replays exactly. The network delays each
message by 1 to 20 ms, and drops or duplicates some; a partition cuts a set
of nodes off from the rest; a crash discards a node's memory and keeps its
storage, and a restart builds a new node from that storage. A client
proposes payloads to whichever node believes it leads.

Each node applies its committed entries to a state of its own (a running
digest of the entries, by offset) and, every few entries (a number drawn per
seed), keeps that state as a snapshot, so logs are truncated, and nodes that
crashed or were cut off catch up by snapshot. A node restarted, or sent a
snapshot, restores its state from it and applies on from there.

The checker holds, at every step:

* **election safety**: at most one leader per epoch;
* **committed logs agree**: what every node's log still holds below its high
  watermark is at the same offsets in one committed log, and each node's
  applied state (restored from its snapshots, or not) equals that log's at
  every offset, so nothing committed is ever lost or changed;
* **acknowledged means committed**: a proposal acknowledged to the client
  (its leader's high watermark passed it) is in the committed log, at its
  offset, at the end of the run;

and, once the faults stop and the network heals, **liveness**: a leader is
elected, and a new proposal commits, within a bounded time.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from eventplatform.log.cluster.raft import (
    Entry,
    MemoryStorage,
    Message,
    NotLeaderError,
    RaftConfig,
    RaftNode,
    Role,
    SnapshotId,
)

TICK_MS = 10
PROPOSE_EVERY_MS = 25
DELAY_MS = (1, 20)
HEAL_WITHIN_MS = 15_000
SNAPSHOT_EVERY = (10, 25, 60)
"""A node snapshots its state after this many applied entries (one drawn per seed)."""
SNAPSHOT_CHUNK_BYTES = (8, 32, 1024 * 1024)


class SafetyError(AssertionError):
    """A Raft safety property broke; the message names the seed to replay."""


@dataclass(frozen=True)
class Faults:
    drop: float = 0.05
    duplicate: float = 0.02
    crash_every_ms: int = 1500
    """On average; a crashed node restarts 100 to 2,000 ms later."""
    partition_every_ms: int = 2000
    """On average; a partition heals 200 to 3,000 ms later."""


@dataclass(order=True)
class _Event:
    at_ms: int
    sequence: int
    action: Callable[[], None] = field(compare=False)


@dataclass
class Outcome:
    seed: int
    leaders: dict[int, int]
    committed: int
    acknowledged: int
    proposed: int
    crashes: int
    partitions: int
    snapshots: int = 0
    installs: int = 0
    """Snapshots a running node took from its leader (not restored at a restart)."""


def _next_digest(digest: bytes, entry: Entry) -> bytes:
    return hashlib.sha256(digest + entry.epoch.to_bytes(8, "big") + entry.payload).digest()


@dataclass
class _Applied:
    """A node's state machine: how far it applied, and the digest of what it applied."""

    offset: int = 0
    digest: bytes = b""
    since_snapshot: int = 0
    started: bool = False
    """Past its first application: a snapshot restored from now on came from the leader."""


class Simulation:
    def __init__(
        self,
        seed: int,
        voters: int = 3,
        *,
        faults: Faults | None = None,
        config: RaftConfig | None = None,
    ) -> None:
        self.seed = seed
        self.random = random.Random(seed)
        self.faults = faults or Faults()
        # small fetches (some seeds) let followers stop between any two entries
        self.config = config or RaftConfig(
            fetch_entries_max=self.random.choice([1, 2, 3, 500]),
            snapshot_chunk_bytes=self.random.choice(SNAPSHOT_CHUNK_BYTES),
        )
        self.snapshot_every = self.random.choice(SNAPSHOT_EVERY)
        self.ids = list(range(1, voters + 1))
        self.storages = {node: MemoryStorage() for node in self.ids}
        self.nodes: dict[int, RaftNode | None] = {}
        self.now_ms = 0
        self._queue: list[_Event] = []
        self._sequence = 0
        self.cut: set[frozenset[int]] = set()
        self.leaders: dict[int, int] = {}
        self.committed: list[Entry] = []
        self.digests: list[bytes] = [b""]
        """The digest of the committed log's first ``n`` entries, by ``n``."""
        self.applied: dict[int, _Applied] = {}
        self.snapshots = 0
        self.installs = 0
        self.pending: dict[bytes, tuple[int, int, int]] = {}
        self.acknowledged: dict[bytes, int] = {}
        self.proposed = 0
        self.crashes = 0
        self.partitions = 0
        self.faulty = True
        for node in self.ids:
            self._start(node)

    # ------------------------------------------------------------ the clock

    def at(self, delay_ms: int, action: Callable[[], None]) -> None:
        self._sequence += 1
        heapq.heappush(self._queue, _Event(self.now_ms + delay_ms, self._sequence, action))

    def run_until(self, end_ms: int, stop: Callable[[], bool] | None = None) -> bool:
        while self._queue and self._queue[0].at_ms <= end_ms:
            event = heapq.heappop(self._queue)
            self.now_ms = event.at_ms
            event.action()
            self._check()
            if stop is not None and stop():
                return True
        self.now_ms = end_ms
        return False

    # ------------------------------------------------------------ nodes

    def _start(self, node: int) -> None:
        self.nodes[node] = RaftNode(
            node, self.ids, self.storages[node], self.now_ms, config=self.config, seed=self.seed
        )
        self.applied[node] = _Applied()
        self.at(self.random.randrange(1, TICK_MS + 1), lambda: self._tick(node))

    def _tick(self, node: int) -> None:
        raft = self.nodes.get(node)
        if raft is None:
            return
        self._send(raft.tick(self.now_ms))
        self._note_leader(raft)
        self.at(TICK_MS, lambda: self._tick(node))

    def _deliver(self, message: Message) -> None:
        if self._is_cut(message.sender, message.receiver):
            return
        raft = self.nodes.get(message.receiver)
        if raft is None:  # a crashed voter's port refuses the sender's connection
            sender = self.nodes.get(message.sender)
            if sender is not None:
                self._send(sender.peer_refused(message.receiver, self.now_ms))
            return
        self._send(raft.receive(message, self.now_ms))
        self._note_leader(raft)

    def _send(self, messages: list[Message]) -> None:
        for message in messages:
            if self._is_cut(message.sender, message.receiver):
                continue
            if self.faulty and self.random.random() < self.faults.drop:
                continue
            copies = 2 if self.faulty and self.random.random() < self.faults.duplicate else 1
            for _ in range(copies):
                delay = self.random.randint(*DELAY_MS)
                self.at(delay, lambda m=message: self._deliver(m))  # type: ignore[misc]

    def _is_cut(self, a: int, b: int) -> bool:
        return frozenset((a, b)) in self.cut

    def _note_leader(self, raft: RaftNode) -> None:
        if raft.role is Role.LEADER:
            known = self.leaders.setdefault(raft.epoch, raft.id)
            if known != raft.id:
                raise SafetyError(
                    f"seed {self.seed}: nodes {known} and {raft.id} both lead epoch {raft.epoch}"
                )

    # ------------------------------------------------------------ the client

    def _propose(self) -> None:
        for raft in self.nodes.values():
            if raft is not None and raft.role is Role.LEADER:
                payload = f"p{self.proposed}".encode()
                try:
                    offset = raft.propose([payload])
                except NotLeaderError:
                    continue
                self.proposed += 1
                self.pending[payload] = (raft.id, raft.epoch, offset)
        if self.faulty:
            self.at(PROPOSE_EVERY_MS, self._propose)

    def _acknowledge(self) -> None:
        """A proposal is acknowledged once its leader, still leading the same epoch, has a
        high watermark past it."""
        for payload, (node, epoch, offset) in list(self.pending.items()):
            raft = self.nodes.get(node)
            if raft is None or raft.epoch != epoch or raft.role is not Role.LEADER:
                continue
            # below the log start it is in a snapshot: a leader never overwrites its own
            held = offset < raft.log_start or raft.entry(offset).payload == payload
            if raft.high_watermark > offset and held:
                self.acknowledged[payload] = offset
                del self.pending[payload]

    # ------------------------------------------------------------ faults

    def _crash(self) -> None:
        alive = [node for node, raft in self.nodes.items() if raft is not None]
        if self.faulty and alive:
            node = self.random.choice(alive)
            self.nodes[node] = None
            self.crashes += 1
            self.at(self.random.randint(100, 2000), lambda: self._start(node))
        if self.faulty:
            self.at(self._every(self.faults.crash_every_ms), self._crash)

    def _partition(self) -> None:
        if self.faulty and not self.cut:
            side = set(self.random.sample(self.ids, self.random.randint(1, len(self.ids) - 1)))
            self.cut = {frozenset((a, b)) for a in side for b in self.ids if b not in side}
            self.partitions += 1
            self.at(self.random.randint(200, 3000), self._heal)
        if self.faulty:
            self.at(self._every(self.faults.partition_every_ms), self._partition)

    def _heal(self) -> None:
        self.cut = set()

    def _every(self, mean_ms: int) -> int:
        return max(1, int(self.random.expovariate(1 / mean_ms)))

    # ------------------------------------------------------------ the checker

    def _check(self) -> None:
        self._acknowledge()
        for raft in self.nodes.values():
            if raft is None:
                continue
            self._apply(raft)
            mine = raft.committed()
            theirs = self.committed[raft.log_start : raft.log_start + len(mine)]
            if mine[: len(theirs)] != theirs:
                raise SafetyError(
                    f"seed {self.seed}: node {raft.id}'s committed log disagrees between "
                    f"offsets {raft.log_start} and {raft.high_watermark} at {self.now_ms} ms"
                )

    def _apply(self, raft: RaftNode) -> None:
        """Bring ``raft``'s state up to its high watermark (from its latest snapshot when
        that is further), checking it against the committed log's at every offset; take
        a snapshot every ``snapshot_every`` entries."""
        state = self.applied[raft.id]
        snapshot = raft.latest_snapshot
        if snapshot is not None and snapshot.end_offset > state.offset:
            self.installs += state.started
            self._restore(raft, state, snapshot)
        state.started = True
        while state.offset < raft.high_watermark:
            entry = raft.entry(state.offset)
            state.digest = _next_digest(state.digest, entry)
            state.offset += 1
            state.since_snapshot += 1
            if state.offset > len(self.committed):
                self.committed.append(entry)
                self.digests.append(state.digest)
            elif self.digests[state.offset] != state.digest:
                raise SafetyError(
                    f"seed {self.seed}: node {raft.id} applied another entry at "
                    f"{state.offset - 1} than the committed one, at {self.now_ms} ms"
                )
        if state.since_snapshot >= self.snapshot_every:
            raft.snapshot(state.offset, f"{state.offset}:{state.digest.hex()}".encode())
            state.since_snapshot = 0
            self.snapshots += 1

    def _restore(self, raft: RaftNode, state: _Applied, snapshot: SnapshotId) -> None:
        offset, _, digest = raft.read_snapshot(snapshot).decode().partition(":")
        if int(offset) != snapshot.end_offset or snapshot.end_offset >= len(self.digests):
            raise SafetyError(f"seed {self.seed}: node {raft.id} holds a bad {snapshot}")
        if bytes.fromhex(digest) != self.digests[snapshot.end_offset]:
            raise SafetyError(
                f"seed {self.seed}: node {raft.id}'s {snapshot} is not the committed state"
            )
        state.offset, state.digest = snapshot.end_offset, bytes.fromhex(digest)
        state.since_snapshot = 0

    def run(self, faulty_ms: int = 20_000) -> Outcome:
        """Faults for ``faulty_ms``, then a healed network: a leader and a new commit must
        follow within :data:`HEAL_WITHIN_MS`."""
        self.at(PROPOSE_EVERY_MS, self._propose)
        self.at(self._every(self.faults.crash_every_ms), self._crash)
        self.at(self._every(self.faults.partition_every_ms), self._partition)
        self.run_until(faulty_ms)
        self.faulty = False
        self.cut = set()
        for node, raft in self.nodes.items():
            if raft is None:
                self._start(node)
        deadline = self.now_ms + HEAL_WITHIN_MS
        if not self.run_until(deadline, self._has_leader):
            raise SafetyError(f"seed {self.seed}: no leader {HEAL_WITHIN_MS} ms after healing")
        before = len(self.committed)
        self._propose()
        if not self.run_until(deadline + HEAL_WITHIN_MS, lambda: len(self.committed) > before):
            raise SafetyError(f"seed {self.seed}: nothing commits after healing")
        for payload, offset in self.acknowledged.items():
            if offset >= len(self.committed) or self.committed[offset].payload != payload:
                raise SafetyError(f"seed {self.seed}: acknowledged {payload!r} at {offset} lost")
        return Outcome(
            self.seed,
            dict(self.leaders),
            len(self.committed),
            len(self.acknowledged),
            self.proposed,
            self.crashes,
            self.partitions,
            self.snapshots,
            self.installs,
        )

    def _has_leader(self) -> bool:
        return any(r is not None and r.role is Role.LEADER for r in self.nodes.values())


def run_seed(seed: int, **options: Any) -> Outcome:
    return Simulation(seed, **options).run()
