"""The controller on a three-voter quorum over loopback: brokers register and heartbeat,
topics are placed round-robin, a silent broker is fenced and loses its leaderships, and
after the active controller dies the next one has the same metadata and goes on fencing;
a voter that was away while the others snapshot and truncate their logs catches up by
snapshot and rebuilds the same image."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import trio
from loopback_quorum import ELECTION_TIMEOUT_S, LoopbackQuorum

from eventplatform.log.cluster.controller import Controller
from eventplatform.log.cluster.controller_methods import controller_methods
from eventplatform.log.cluster.metadata import NO_LEADER
from eventplatform.log.cluster.quorum import QuorumServer

SESSION_MS = 600


class ControlledCluster(LoopbackQuorum):
    def __init__(self, directory: Path, **options: Any) -> None:
        super().__init__(directory, **options)
        self.controllers: dict[int, Controller] = {}

    def created(self, node: int, server: QuorumServer) -> None:
        self.controllers[node] = Controller(server, session_timeout_ms=SESSION_MS)

    def started(self, node: int, nursery: trio.Nursery) -> None:
        nursery.start_soon(self.controllers[node].run)

    async def active(self) -> Controller:
        """The leader's controller, once it has applied the log before its epoch."""
        with trio.fail_after(ELECTION_TIMEOUT_S):
            while True:
                controller = self.controllers[(await self.leader()).id]
                if controller.active:
                    return controller
                await trio.sleep(0.01)

    def images_agree(self) -> bool:
        live = [self.controllers[n] for n in self.servers]
        offsets = {c.quorum.applied for c in live}
        images = [(c.image.brokers, c.image.topics) for c in live]
        return len(offsets) == 1 and all(image == images[0] for image in images)


async def beat(cluster: ControlledCluster, brokers: dict[int, int], stop: trio.Event) -> None:
    while not stop.is_set():
        for broker, epoch in list(brokers.items()):
            with contextlib.suppress(Exception):  # between controllers: the next beat finds one
                (await cluster.active()).heartbeat(broker, epoch)
        await trio.sleep(0.05)


async def fenced(controller: Controller, broker: int) -> None:
    """Until ``broker`` is fenced and leads nothing (two commits: the fence, the moves)."""
    image = controller.image
    with trio.fail_after(ELECTION_TIMEOUT_S):
        while not image.brokers[broker].fenced or any(
            state.leader == broker for topic in image.topics.values() for state in topic.partitions
        ):
            await trio.sleep(0.02)


async def test_register_place_fence_and_fail_over(tmp_path: Path) -> None:
    cluster = ControlledCluster(tmp_path)
    async with trio.open_nursery() as nursery:
        for node in cluster.peers:
            await cluster.start(nursery, node)
        active = await cluster.active()
        epochs = {b: await active.register(b, "127.0.0.1", 9090 + b) for b in (1, 2, 3)}
        assert epochs == {1: 1, 2: 1, 3: 1}
        created = await active.create_topic("orders", 3, 3)
        assert [p.leader for p in created.partitions] == [1, 2, 3]
        again = await active.create_topic("audit", 2, 2)
        assert [p.replicas for p in again.partitions] == [(1, 2), (2, 3)]  # continues round-robin

        alive = {1: epochs[1], 2: epochs[2]}
        stop = trio.Event()
        nursery.start_soon(beat, cluster, alive, stop)
        await fenced(active, 3)
        orders = active.image.topics["orders"].partitions
        assert all(3 not in p.isr and p.leader != 3 for p in orders)
        assert [p.leader for p in orders] == [1, 2, 1]

        # the active controller dies; the next one has the same metadata, and fences too
        cluster.stop(active.quorum.id)
        successor = await cluster.active()
        assert successor is not active
        del alive[2]
        await fenced(successor, 2)
        assert [p.leader for p in successor.image.topics["orders"].partitions] == [1, 1, 1]
        assert successor.image.topics["audit"].partitions[1].leader == NO_LEADER  # 2, 3 fenced
        with trio.fail_after(ELECTION_TIMEOUT_S):
            while not cluster.images_agree():
                await trio.sleep(0.02)
        stop.set()
        nursery.cancel_scope.cancel()
    for storage in cluster.storages.values():
        storage.close()


async def test_a_voter_back_after_the_log_was_truncated_catches_up_by_snapshot(
    tmp_path: Path,
) -> None:
    cluster = ControlledCluster(tmp_path, snapshot_bytes=1_000, segment_bytes=1_024)
    async with trio.open_nursery() as nursery:
        for node in cluster.peers:
            await cluster.start(nursery, node)
        active = await cluster.active()
        brokers = {b: await active.register(b, "127.0.0.1", 9090 + b) for b in (1, 2, 3)}
        stop = trio.Event()
        nursery.start_soon(beat, cluster, brokers, stop)
        away = next(n for n in cluster.peers if n != active.quorum.id)
        end_when_stopped = cluster.servers[away].raft.end_offset
        cluster.stop(away)
        for number in range(40):  # a few kilobytes of records: snapshots, truncation
            await active.create_topic(f"topic-{number}", 2, 3)
        leader = active.quorum.raft
        assert leader.latest_snapshot is not None
        assert leader.log_start > end_when_stopped  # the log no longer holds what it needs
        assert len(list((tmp_path / f"voter-{leader.id}").glob("*.checkpoint"))) == 2

        await cluster.start(nursery, away)
        returned = cluster.controllers[away]
        with trio.fail_after(ELECTION_TIMEOUT_S):
            while not cluster.images_agree():
                await trio.sleep(0.02)
        raft = returned.quorum.raft
        assert raft.log_start > end_when_stopped and raft.latest_snapshot is not None
        assert len(returned.image.topics) == 40
        assert returned.image == active.image
        # and it goes on applying records after the snapshot
        await active.create_topic("after", 1, 3)
        with trio.fail_after(ELECTION_TIMEOUT_S):
            while "after" not in returned.image.topics:
                await trio.sleep(0.02)
        stop.set()
        nursery.cancel_scope.cancel()
    for storage in cluster.storages.values():
        storage.close()


class RebalancingCluster(ControlledCluster):
    """Controllers that give partitions back to their preferred leaders every
    ``interval_s`` (None: never, as with auto.leader.rebalance.enable=false)."""

    def __init__(self, directory: Path, interval_s: float | None) -> None:
        super().__init__(directory)
        self.interval_s = interval_s

    def created(self, node: int, server: QuorumServer) -> None:
        self.controllers[node] = Controller(
            server, session_timeout_ms=SESSION_MS, leader_rebalance_interval_s=self.interval_s
        )


@pytest.mark.parametrize("interval_s", [0.2, None], ids=["rebalancing", "disabled"])
async def test_a_preferred_leader_back_in_the_isr_gets_its_partition_back(
    tmp_path: Path, interval_s: float | None
) -> None:
    cluster = RebalancingCluster(tmp_path, interval_s)
    async with trio.open_nursery() as nursery:
        for node in cluster.peers:
            await cluster.start(nursery, node)
        active = await cluster.active()
        epochs = {b: await active.register(b, "127.0.0.1", 9090 + b) for b in (1, 2, 3)}
        stop = trio.Event()
        nursery.start_soon(beat, cluster, epochs, stop)
        await active.create_topic("orders", 1, 3)

        # broker 1, the preferred leader, stops and comes back: not in the ISR, not leading
        await active.controlled_shutdown(1, epochs[1])
        epochs[1] = await active.register(1, "127.0.0.1", 9091)
        state = active.image.partition("orders", 0)
        assert state.leader == 2 and 1 not in state.isr
        # its leader takes it back into the ISR once it has caught up
        await active.alter_partition(
            "orders",
            0,
            broker=2,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            isr=[1, 2, 3],
        )
        with trio.move_on_after(2.0):
            while active.image.partition("orders", 0).leader != 1:
                await trio.sleep(0.05)
        moved_back = active.image.partition("orders", 0)
        if interval_s is None:
            assert moved_back.leader == 2
        else:
            assert moved_back.leader == 1
            assert moved_back.leader_epoch == state.leader_epoch + 1
        stop.set()
        nursery.cancel_scope.cancel()
    for storage in cluster.storages.values():
        storage.close()


async def test_a_heartbeat_waits_at_the_controller_well_inside_the_session(
    tmp_path: Path,
) -> None:
    # the controller counts a broker alive from each heartbeat's arrival, and the next one
    # arrives once this one is answered: a broker asking to wait longer than its session
    # (broker.heartbeat.interval.ms above broker.session.timeout.ms) must not be fenced for it
    cluster = ControlledCluster(tmp_path)
    async with trio.open_nursery() as nursery:
        for node in cluster.peers:
            await cluster.start(nursery, node)
        active = await cluster.active()
        epoch = await active.register(1, "127.0.0.1", 9091)
        params = {"broker": 1, "epoch": epoch, "offset": active.quorum.applied, "wait_ms": 5_000}
        started = trio.current_time()
        await controller_methods(active)["heartbeat"](params)
        assert trio.current_time() - started < SESSION_MS / 1000 / 2
        assert not active.image.brokers[1].fenced
        nursery.cancel_scope.cancel()
