"""The controller quorum over real loopback sockets: three voters elect a leader, commit
proposals everywhere in one order, survive the leader's death and bring it back up to
date from its disk; garbage on a voter's port closes only that connection."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from eventplatform.log.cluster.quorum import (
    FrameError,
    QuorumServer,
    decode_message,
    encode_message,
)
from eventplatform.log.cluster.quorum_storage import SegmentQuorumStorage
from eventplatform.log.cluster.raft import (
    BeginQuorumEpoch,
    DivergingEpoch,
    Entry,
    FetchRequest,
    FetchResponse,
    Message,
    NotLeaderError,
    RaftConfig,
    VoteRequest,
    VoteResponse,
)

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


@pytest.mark.parametrize(
    "body",
    [
        VoteRequest(3, 1, 2, 10),
        VoteResponse(3, True),
        BeginQuorumEpoch(4, 2),
        FetchRequest(4, 7, 3),
        FetchResponse(4, 2, 7, (Entry(4, b"\x00\xff"), Entry(4, b"")), 6, None),
        FetchResponse(4, None, 7, diverging=DivergingEpoch(2, 5)),
    ],
)
def test_messages_round_trip_through_frames(body: object) -> None:
    message = Message(1, 2, body)  # type: ignore[arg-type]
    frame = encode_message(message)
    assert decode_message(frame[4:]) == message


@pytest.mark.parametrize("payload", [b"", b"{}", b'{"type": "vote_request", "body": {}}'])
def test_junk_is_a_frame_error(payload: bytes) -> None:
    with pytest.raises(FrameError):
        decode_message(payload)


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.peers = {
            n: ("127.0.0.1", port) for n, port in zip((1, 2, 3), free_ports(3), strict=True)
        }
        self.directory = directory
        self.servers: dict[int, QuorumServer] = {}
        self.scopes: dict[int, trio.CancelScope] = {}
        self.storages: dict[int, SegmentQuorumStorage] = {}
        self.applied: dict[int, list[tuple[int, Entry]]] = {n: [] for n in self.peers}

    async def start(self, nursery: trio.Nursery, node: int) -> None:
        storage = SegmentQuorumStorage(self.directory / f"voter-{node}")
        self.storages[node] = storage
        self.applied[node] = []
        server = QuorumServer(
            node,
            self.peers,
            storage,
            config=CONFIG,
            on_commit=lambda offset, entry: self.applied[node].append((offset, entry)),
        )
        self.servers[node] = server
        scope = trio.CancelScope()
        self.scopes[node] = scope

        async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await server.serve(task_status=task_status)

        await nursery.start(run)

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


async def test_three_voters_commit_in_one_order_through_a_leader_s_death(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    async with trio.open_nursery() as nursery:
        for node in cluster.peers:
            await cluster.start(nursery, node)
        first = await cluster.propose([f"a{n}".encode() for n in range(50)])
        old = (await cluster.leader()).id
        cluster.stop(old)
        await cluster.propose([b"after the failover"])
        assert (await cluster.leader()).id != old
        await cluster.start(nursery, old)  # from its disk: it catches up
        await cluster.propose([b"with everyone back"])
        with trio.fail_after(ELECTION_TIMEOUT_S):
            while len({len(entries) for entries in cluster.applied.values()}) != 1:
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()
    for storage in cluster.storages.values():
        storage.close()
    logs = [[entry for _, entry in entries] for entries in cluster.applied.values()]
    assert logs[0] == logs[1] == logs[2]
    payloads = [entry.payload for entry in logs[0] if entry.payload]
    assert payloads == [
        *(f"a{n}".encode() for n in range(50)),
        b"after the failover",
        b"with everyone back",
    ]
    assert logs[0][first].payload == b"a0"


async def test_garbage_on_a_voter_s_port_does_not_disturb_the_quorum(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    async with trio.open_nursery() as nursery:
        for node in cluster.peers:
            await cluster.start(nursery, node)
        await cluster.propose([b"before"])
        for junk in (b"\xff\xff\xff\xff", b"\x00\x00\x00\x05{oops", b"GET / HTTP/1.1\r\n\r\n"):
            stream = await trio.open_tcp_stream(*cluster.peers[1])
            await stream.send_all(junk)
            await stream.aclose()
        await cluster.propose([b"after"])
        nursery.cancel_scope.cancel()
    for storage in cluster.storages.values():
        storage.close()
