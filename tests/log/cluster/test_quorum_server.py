"""The controller quorum over real loopback sockets: three voters elect a leader, commit
proposals everywhere in one order, survive the leader's death and bring it back up to
date from its disk; garbage on a voter's port closes only that connection."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import trio
from loopback_quorum import ELECTION_TIMEOUT_S, LoopbackQuorum

from eventplatform.log.cluster.quorum import (
    FrameError,
    decode_message,
    encode_message,
)
from eventplatform.log.cluster.raft import (
    BeginQuorumEpoch,
    DivergingEpoch,
    Entry,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)


@pytest.mark.parametrize(
    "body",
    [
        VoteRequest(3, 1, 2, 10),
        VoteResponse(3, True),
        BeginQuorumEpoch(4, 2),
        FetchRequest(4, 7, 3),
        FetchResponse(4, 2, 7, (Entry(4, b"\x00\xff"), Entry(4, b"")), 6, None),
        FetchResponse(4, None, 7, diverging=DivergingEpoch(2, 5)),
        FetchResponse(4, 2, 7, high_watermark=30, snapshot=SnapshotId(30, 3)),
        FetchSnapshotRequest(4, SnapshotId(30, 3), 1024),
        FetchSnapshotResponse(4, 2, SnapshotId(30, 3), 1024, b"\x00chunk\xff", 4096),
        FetchSnapshotResponse(4, 2, SnapshotId(30, 3), 0),
    ],
)
def test_messages_round_trip_through_frames(body: object) -> None:
    message = Message(1, 2, body)  # type: ignore[arg-type]
    frame = encode_message(message)
    assert decode_message(frame[4:], 2, (1, 2, 3)) == message


@pytest.mark.parametrize("payload", [b"", b"{}", b'{"type": "vote_request", "body": {}}'])
def test_junk_is_a_frame_error(payload: bytes) -> None:
    with pytest.raises(FrameError):
        decode_message(payload, 2, (1, 2, 3))


async def test_three_voters_commit_in_one_order_through_a_leader_s_death(tmp_path: Path) -> None:
    cluster = LoopbackQuorum(tmp_path)
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
    cluster = LoopbackQuorum(tmp_path)
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


def _forged(document: dict[str, object]) -> bytes:
    """A frame built with the standard library's JSON, which writes integers of any size."""
    payload = json.dumps(document).encode()
    return struct.pack(">I", len(payload)) + payload


FORGED_VOTE = {
    "sender": 2,
    "receiver": 1,
    "type": "vote_request",
    "body": {"epoch": 2**64 + 5, "candidate": 2, "last_epoch": 2**64 + 5, "end_offset": 10**6},
}


async def _send_and_wait_closed(address: tuple[str, int], frame: bytes) -> None:
    """Send ``frame`` to a voter and wait (bounded) until the voter closes the connection."""
    stream = await trio.open_tcp_stream(*address)
    try:
        await stream.send_all(frame)
        with trio.fail_after(ELECTION_TIMEOUT_S):
            while await stream.receive_some(65_536):
                pass
    finally:
        await stream.aclose()


async def test_a_forged_vote_with_an_epoch_past_64_bits_is_refused_and_persists_nothing(
    tmp_path: Path,
) -> None:
    cluster = LoopbackQuorum(tmp_path)
    frame = _forged(FORGED_VOTE)
    async with trio.open_nursery() as nursery:
        for node in cluster.peers:
            await cluster.start(nursery, node)
        await cluster.propose([b"before"])
        epochs = {node: server.raft.epoch for node, server in cluster.servers.items()}
        for node in cluster.peers:
            await _send_and_wait_closed(cluster.peers[node], frame)
        await cluster.propose([b"after"])
        for node, server in cluster.servers.items():
            assert server.raft.epoch < 2**31, f"voter {node} took the forged epoch"
            assert server.raft.epoch == epochs[node]
        cluster.stop(1)
        for node in cluster.peers:
            state = json.loads((tmp_path / f"voter-{node}" / "quorum-state").read_text())
            assert state["epoch"] < 2**31
        await cluster.start(nursery, 1)  # restarts cleanly from what it persisted
        await cluster.propose([b"after the restart"])
        nursery.cancel_scope.cancel()
    for storage in cluster.storages.values():
        storage.close()
