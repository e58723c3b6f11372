"""The client brokers call the active controller with, on the in-memory network of the
cluster simulation.

It keeps each answered connection for the next call. When the process at the other end
was killed and started again, the kept connection is dead while the address answers; that
is no reason to give the node up for another voter, which may be a stopped former
controller that takes the call and never answers. A broker's heartbeats went that way
for a whole session after a controller change, and the new controller fenced it.
"""

from __future__ import annotations

import random
from typing import Any

import trio
import trio.testing
from sim_network import Fabric

from eventplatform.log.cluster.frames import frame, split_frames
from eventplatform.log.cluster.rpc import NOT_CONTROLLER, ControllerClient

PORT = 9093


async def serve(
    fabric: Fabric, host: str, answer: dict[str, Any], life: trio.CancelScope, *, task_status: Any
) -> None:
    """A voter's port on ``host`` that answers every request with ``answer``, until ``life``
    is cancelled (its process killed)."""
    [listener], _ = fabric.listen(host, PORT)

    async def handle(stream: trio.abc.Stream) -> None:
        buffer = bytearray()
        async with stream:
            while data := await stream.receive_some(65_536):
                buffer += data
                for _ in split_frames(buffer):
                    await stream.send_all(frame(answer))

    with life:
        task_status.started()
        await trio.serve_listeners(handle, [listener])


async def check_a_dead_kept_connection(fabric: Fabric) -> None:
    voters = {1: ("n1", PORT), 2: ("n2", PORT), 3: ("n3", PORT)}
    following = {"error": NOT_CONTROLLER, "message": "not the leader", "leader": 2}
    async with trio.open_nursery() as nursery:
        await nursery.start(serve, fabric, "n1", following, trio.CancelScope())
        await nursery.start(serve, fabric, "n3", following, trio.CancelScope())
        first_life = trio.CancelScope()
        await nursery.start(serve, fabric, "n2", {"result": {"life": 1}}, first_life)
        client = ControllerClient(voters, fabric.host("b1"))
        assert await client.call("heartbeat", {}, timeout_s=1.0) == {"life": 1}
        assert client._idle[2], "the answered connection is kept"

        first_life.cancel()
        await trio.testing.wait_all_tasks_blocked()
        fabric.crash("n2")  # killed: its connections reset
        await nursery.start(serve, fabric, "n2", {"result": {"life": 2}}, trio.CancelScope())
        fabric.pause("n3")  # a stopped former controller: takes a call, never answers
        client.leader, client._next = None, 2  # the round robin is at voter 3
        client.leader = 2

        assert await client.call("heartbeat", {}, timeout_s=1.0) == {"life": 2}
        fabric.resume("n3")
        nursery.cancel_scope.cancel()


def test_a_dead_kept_connection_to_the_controller_is_replaced_not_given_up_for_another_voter() -> (
    None
):
    fabric = Fabric(random.Random(5), faulty=False)
    trio.run(
        check_a_dead_kept_connection, fabric, clock=trio.testing.MockClock(autojump_threshold=0)
    )
