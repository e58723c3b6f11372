"""A quorum of three voters on loopback, each a :class:`QuorumServer` on its own disk, that
a test can start, stop and ask for its leader."""

from __future__ import annotations

import socket
from pathlib import Path

import trio

from eventplatform.log.cluster.quorum import QuorumServer, RequestHandler
from eventplatform.log.cluster.quorum_storage import SEGMENT_BYTES_DEFAULT, SegmentQuorumStorage
from eventplatform.log.cluster.raft import Entry, NotLeaderError, RaftConfig

CONFIG = RaftConfig(election_timeout_ms=300, fetch_timeout_ms=900, request_timeout_ms=200)
ELECTION_TIMEOUT_S = 10.0


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


class LoopbackQuorum:
    """Three voters; with ``snapshot_bytes``, each snapshots its state that often, on a
    metadata log of ``segment_bytes`` segments."""

    def __init__(
        self,
        directory: Path,
        *,
        snapshot_bytes: int | None = None,
        segment_bytes: int = SEGMENT_BYTES_DEFAULT,
    ) -> None:
        self.snapshot_bytes = snapshot_bytes
        self.segment_bytes = segment_bytes
        self.peers = {
            n: ("127.0.0.1", port) for n, port in zip((1, 2, 3), free_ports(3), strict=True)
        }
        self.directory = directory
        self.servers: dict[int, QuorumServer] = {}
        self.scopes: dict[int, trio.CancelScope] = {}
        self.storages: dict[int, SegmentQuorumStorage] = {}
        self.applied: dict[int, list[tuple[int, Entry]]] = {n: [] for n in self.peers}

    async def start(self, nursery: trio.Nursery, node: int) -> None:
        storage = SegmentQuorumStorage(
            self.directory / f"voter-{node}", segment_bytes=self.segment_bytes
        )
        self.storages[node] = storage
        self.applied[node] = []
        server = QuorumServer.over_tcp(
            node,
            self.peers,
            storage,
            self.requests(node),
            config=CONFIG,
            on_commit=lambda offset, entry: self.applied[node].append((offset, entry)),
            snapshot_bytes=self.snapshot_bytes,
        )
        self.servers[node] = server
        self.created(node, server)
        scope = trio.CancelScope()
        self.scopes[node] = scope

        async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                async with trio.open_nursery() as inner:
                    await inner.start(server.serve)
                    self.started(node, inner)
                    task_status.started()

        await nursery.start(run)

    def requests(self, node: int) -> RequestHandler | None:
        """A hook: what answers the requests (:mod:`~eventplatform.log.cluster.rpc`) that
        reach ``node``'s port; None: it takes none."""
        return None

    def created(self, node: int, server: QuorumServer) -> None:
        """A hook: ``server`` exists and has not started."""

    def started(self, node: int, nursery: trio.Nursery) -> None:
        """A hook: start more of the voter's tasks in ``nursery`` (stopped with it)."""

    def stop(self, node: int) -> None:
        self.scopes.pop(node).cancel()
        self.servers.pop(node)
        self.storages.pop(node).close()

    async def leader(self) -> QuorumServer:
        with trio.fail_after(ELECTION_TIMEOUT_S):
            while True:
                leaders = [s for s in self.servers.values() if s.is_leader]
                if len(leaders) == 1:
                    return leaders[0]
                await trio.sleep(0.02)

    async def propose(self, payloads: list[bytes]) -> int:
        while True:
            try:
                return await (await self.leader()).propose(payloads)
            except NotLeaderError:
                await trio.sleep(0.05)
