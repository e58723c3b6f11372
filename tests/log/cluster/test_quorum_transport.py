"""The quorum's TCP transport keeps one outgoing connection per peer. A follower seldom
writes on its connection to another follower, so when that peer's process dies and starts
again, the connection is dead before anything is sent on it; the kernel still takes the
next write, and that message (a vote request, in the case that cost an election round)
would vanish. The transport reads the connection, which the peer never writes on, to see
it close, and connects again at once."""

from __future__ import annotations

import socket

import trio

from eventplatform.log.cluster.quorum import TcpTransport
from eventplatform.log.cluster.raft import Message, VoteRequest

WAIT_S = 3.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_message_after_the_peer_restarted_reaches_the_new_process() -> None:
    peers = {1: ("127.0.0.1", _free_port()), 2: ("127.0.0.1", _free_port())}
    received: list[Message] = []
    send, outbox = trio.open_memory_channel[Message](10)

    async def peer(life: trio.CancelScope, *, task_status: trio.TaskStatus[None]) -> None:
        with life:
            await TcpTransport(peers).run(
                2, received.append, {}, lambda _: None, task_status=task_status
            )

    async def arrived(count: int) -> None:
        with trio.fail_after(WAIT_S):
            while len(received) < count:
                await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        first_life = trio.CancelScope()
        await nursery.start(peer, first_life)
        sender = TcpTransport(peers)
        await nursery.start(sender.run, 1, received.append, {2: outbox}, lambda _: None)
        await send.send(Message(1, 2, VoteRequest(1, 1, 0, 0)))
        await arrived(1)

        first_life.cancel()  # the peer's process dies: its sockets close
        await trio.sleep(0.3)
        await nursery.start(peer, trio.CancelScope())  # and starts again
        await trio.sleep(0.5)

        await send.send(Message(1, 2, VoteRequest(2, 1, 0, 0)))
        await arrived(2)
        assert received[1].body == VoteRequest(2, 1, 0, 0)
        nursery.cancel_scope.cancel()
