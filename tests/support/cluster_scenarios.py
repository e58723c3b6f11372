"""Scripted cluster runs in the whole-cluster simulation (:mod:`cluster_simulation`): the
historical failure modes, a reassignment across a controller failover, and a leader's full
disk, replayed step by step on a quiet network, then checked."""

from __future__ import annotations

import contextlib
import json
import shutil
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from cluster_simulation import (
    PRODUCE,
    QUORUM_PORT,
    TOPIC,
    Acked,
    ClusterSim,
    SimNode,
    SimulationError,
    seed_trio_scheduler,
)

from eventplatform.log.cluster.controller import Controller
from eventplatform.log.cluster.metadata import PartitionState
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import FETCH
from eventplatform.log.replica.partition import Partition
from eventplatform.log.storage.record_batch import Record, encode_batch


async def produce_once(
    sim: ClusterSim, node_id: int, value: bytes, acks: int, *, partition: int = 0
) -> tuple[int, int]:
    """One plain (not idempotent) batch of ``value`` to ``node_id``: (error, base offset)."""
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 2000,
        "topic_data": [
            {
                "name": TOPIC,
                "partition_data": [
                    {
                        "index": partition,
                        "records": encode_batch([Record(0, sim.clock_ms(), None, value)]),
                    }
                ],
            }
        ],
    }
    response = await sim.request("scenario", node_id, PRODUCE, 8, body)
    answer = response["responses"][0]["partition_responses"][0]
    return answer["error_code"], answer["base_offset"]


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    with trio.move_on_after(timeout_s):
        while not condition():
            await trio.sleep(0.01)
        return
    raise SimulationError(f"{what}: not within {timeout_s} s")


def leader_of(sim: ClusterSim, partition: int = 0) -> tuple[int, int]:
    """(leader id, leader epoch) as the controllers' image has it."""
    for node in sim.brokers():
        assert node.server is not None
        if node.server.controller is not None and node.server.controller.controller.active:
            state = node.server.controller.controller.image.topics[TOPIC].partitions[partition]
            return state.leader, state.leader_epoch
    return -1, -1


@contextlib.asynccontextmanager
async def two_replicas(seed: int, root: Path) -> AsyncIterator[tuple[ClusterSim, int, int]]:
    """A quiet cluster with one partition on two of its nodes, in sync, unclean election
    allowed: yields (the simulation, the leader, the follower), then settles and checks."""
    seed_trio_scheduler(seed)
    configs = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
    sim = ClusterSim(seed, root, partitions=1, topic_configs=configs, replication_factor=2)
    sim.fabric.faulty = False
    try:
        async with sim.running():
            await sim.create_topic()
            await until(lambda: leader_of(sim)[0] > 0, "a first leader")
            await until(lambda: len(sim.partition_replicas(0)) == 2, "both replicas")
            await until(sim.in_sync, "the replicas in sync")
            first, _ = leader_of(sim)
            [second] = [n.node_id for n, _ in sim.partition_replicas(0) if n.node_id != first]
            yield sim, first, second
            await sim.settle(30.0)
            sim.check()
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def double_failover(seed: int, root: Path) -> ClusterSim:
    """KIP-279: two leaders die in turn, each with a suffix the other never had; the replica
    that comes back must truncate to where the new leader's epochs and its own agree."""
    async with two_replicas(seed, root) as (sim, first, second):
        assert await produce_once(sim, first, b"m1", -1) == (ErrorCode.NONE, 0)
        sim.fabric.cut_link(f"node-{first}", f"node-{second}")
        assert await produce_once(sim, first, b"m2", 1) == (ErrorCode.NONE, 1)
        await sim.kill(first)
        sim.fabric.heal()
        await until(lambda: leader_of(sim)[0] == second, "the second leader")
        await until(lambda: _leads(sim, second), "the second leader serving")
        assert await produce_once(sim, second, b"m3", 1) == (ErrorCode.NONE, 1)
        await sim.kill(second)
        await sim.start(first)
        await until(lambda: leader_of(sim)[0] == first, "the first leader again (unclean)")
        await until(lambda: _leads(sim, first), "the first leader serving again")
        assert await produce_once(sim, first, b"m4", 1) == (ErrorCode.NONE, 2)
        await sim.start(second)
    return sim


def _leads(sim: ClusterSim, node_id: int) -> bool:
    return any(node.node_id == node_id and p.is_leader for node, p in sim.partition_replicas(0))


async def restart_before_high_watermark(seed: int, root: Path) -> ClusterSim:
    """KIP-101: a follower restarts holding an acknowledged record whose high watermark it
    never heard of, and then the leader dies. Truncating to the high watermark on restart
    would lose the record; the follower truncates only by leader epoch, against a leader."""
    async with two_replicas(seed, root) as (sim, first, second):
        replicas = {n.node_id: p for n, p in sim.partition_replicas(0)}
        leader, follower = replicas[first], replicas[second]
        for offset, value in enumerate((b"m1", b"m2")):
            results: list[tuple[int, int]] = []

            async def send(value: bytes, results: list[tuple[int, int]]) -> None:
                results.append(await produce_once(sim, first, value, -1))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send, value, results)
                if value == b"m2":
                    # the leader's high watermark covers m2 once the follower asks past
                    # it; the answer that would tell the follower is cut off
                    await until(lambda: leader.high_watermark == 2, "m2 replicated")
                    sim.fabric.cut_link(f"node-{first}", f"node-{second}")
            assert results == [(ErrorCode.NONE, offset)]
            sim.history.acked[value] = Acked(value, 0, offset)
        assert (follower.log.log_end_offset, follower.high_watermark) == (2, 1)
        await sim.kill(second)
        await sim.start(second)
        await until(lambda: sim.nodes[second].up, "the follower back")
        await sim.kill(first)
        sim.fabric.heal()
        await until(lambda: _leads(sim, second), "the follower leading (unclean)")
        await sim.start(first)
    return sim


def active_controller(sim: ClusterSim) -> Controller | None:
    for node in sim.brokers():
        assert node.server is not None
        if node.server.controller is not None and node.server.controller.controller.active:
            return node.server.controller.controller
    return None


def partition_image(sim: ClusterSim) -> PartitionState | None:
    controller = active_controller(sim)
    return None if controller is None else controller.image.partition(TOPIC, 0)


async def reassign_off_the_leader(seed: int, root: Path) -> ClusterSim:
    """The partition moves from (leader, follower) to (follower, third node) while an
    idempotent acks=all producer writes; then the active controller is killed mid-way
    through a move back, and the next one completes that. The first leader must delete its
    copy once the partition has moved away."""
    async with two_replicas(seed, root) as (sim, first, second):
        [third] = [n for n in sim.nodes if n not in (first, second)]
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sim.producer, 0, stop)
            await until(lambda: len(sim.history.acked) >= 20, "records before the move")
            controller = active_controller(sim)
            assert controller is not None
            await controller.reassign([(TOPIC, 0, (second, third))])
            await until(
                lambda: (
                    (state := partition_image(sim)) is not None
                    and state.replicas == (second, third)
                    and state.leader == second
                ),
                "the move off the leader",
            )
            moved = len(sim.history.acked)
            await until(lambda: len(sim.history.acked) >= moved + 20, "records after the move")
            stop.set()
        await until(lambda: _held(sim, first) is None, "the old leader's copy deleted")
        await _move_back_across_a_failover(sim, first, second)
    return sim


async def _move_back_across_a_failover(sim: ClusterSim, first: int, second: int) -> None:
    """Start moving the partition back to ``first`` while ``first`` is down, kill the active
    controller, bring ``first`` back: the next active controller completes the move."""
    await sim.kill(first)
    await until(lambda: active_controller(sim) is not None, "an active controller")
    controller = active_controller(sim)
    assert controller is not None
    await controller.reassign([(TOPIC, 0, (first, second))])
    [active] = [n.node_id for n in sim.brokers() if _controls(n, controller)]
    await sim.kill(active)
    await sim.start(first)
    await until(lambda: sim.nodes[first].up, "the first node back")
    await until(
        lambda: (state := partition_image(sim)) is not None and state.replicas == (first, second),
        "the move back completed by the next controller",
    )
    await sim.start(active)


def _controls(node: SimNode, controller: Controller) -> bool:
    return node.server is not None and (
        node.server.controller is not None and node.server.controller.controller is controller
    )


def _held(sim: ClusterSim, node_id: int) -> Partition | None:
    server = sim.nodes[node_id].server
    assert server is not None and server.broker is not None
    topic = server.broker.topics.get(TOPIC)
    return None if topic is None else topic.partitions[0]


CONTROLLER_PAUSE_S = 6.0
"""Three sessions of the simulation's brokers (``broker.session.timeout.ms`` 2000)."""


@dataclass
class PauseWatch:
    """What the controllers decided while the active one was paused: who was fenced, and
    which ISR lost a broker that went on heartbeating."""

    paused: int = -1
    successor: int = -1
    fenced: set[int] = field(default_factory=set)
    shrunk: set[tuple[int, int]] = field(default_factory=set)


async def paused_controller(seed: int, root: Path) -> tuple[ClusterSim, PauseWatch]:
    """The active controller's node stops (its traffic held both ways, as a stopped
    process's sockets are) for three sessions while an acks=all producer writes, then
    resumes. Another controller takes over; the brokers that went on running must find it
    and keep their sessions: none of them fenced, no ISR without them."""
    seed_trio_scheduler(seed)
    sim = ClusterSim(seed, root)
    sim.fabric.faulty = False
    watch = PauseWatch()
    try:
        async with sim.running():
            await sim.create_topic()
            await until(sim.in_sync, "the replicas in sync")
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sim.producer, 0, stop)
                await until(lambda: len(sim.history.acked) >= 10, "records before the pause")
                [watch.paused] = [n.node_id for n in sim.brokers() if _is_active(n)]
                running = set(sim.nodes) - {watch.paused}
                nursery.start_soon(_watch_fencing, sim, running, watch)
                sim.fabric.pause(f"node-{watch.paused}")
                await trio.sleep(CONTROLLER_PAUSE_S)
                sim.fabric.resume(f"node-{watch.paused}")
                await until(sim.in_sync, "the replicas in sync again")
                acked = len(sim.history.acked)
                await until(lambda: len(sim.history.acked) >= acked + 10, "records after")
                stop.set()
                nursery.cancel_scope.cancel()
            await sim.settle(30.0)
            sim.check()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return sim, watch


def _is_active(node: SimNode) -> bool:
    server = node.server
    return (
        server is not None and server.controller is not None and server.controller.controller.active
    )


async def _watch_fencing(sim: ClusterSim, running: set[int], watch: PauseWatch) -> None:
    """Every few milliseconds, read the image of whichever other controller is active."""
    while True:
        for node in sim.brokers():
            if node.node_id == watch.paused or not _is_active(node):
                continue
            assert node.server is not None and node.server.controller is not None
            watch.successor = node.node_id
            image = node.server.controller.controller.image
            watch.fenced |= {b for b in running if image.brokers[b].fenced}
            for number, state in enumerate(image.topics[TOPIC].partitions):
                watch.shrunk |= {(number, b) for b in running if b not in state.isr}
        await trio.sleep(0.01)


# ---------------------------------------------------------------- forged frames


def replica_fetch(replica: int, epoch: int, fetch_offset: int, topic_id: bytes) -> dict[str, Any]:
    """A Fetch body claiming to come from follower ``replica`` (v11: by its id alone; v15:
    with ``epoch`` as its broker epoch)."""
    partition = {
        "partition": 0,
        "current_leader_epoch": -1,
        "fetch_offset": fetch_offset,
        "log_start_offset": 0,
        "partition_max_bytes": 1 << 20,
    }
    return {
        "replica_id": replica,
        "replica_state": {"replica_id": replica, "replica_epoch": epoch},
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": TOPIC, "topic_id": topic_id, "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


async def spoofed_replica(seed: int, root: Path) -> tuple[ClusterSim, set[int]]:
    """A plain client claims to be the follower, fetching from 2^40 (by id alone, and with
    a stale broker epoch), while the real follower is cut off from the leader. Believed,
    it would move the high watermark: an acks=all produce would be acknowledged with no
    follower holding it, and lost when the leader dies. Returns the error codes the
    spoofed fetches got."""
    codes: set[int] = set()
    async with two_replicas(seed, root) as (sim, first, second):
        assert await produce_once(sim, first, b"m1", -1) == (ErrorCode.NONE, 0)
        sim.history.acked[b"m1"] = Acked(b"m1", 0, 0)
        server = sim.nodes[first].server
        assert server is not None and server.broker is not None
        topic_id = server.broker.topics.topics[TOPIC].topic_id
        leader = server.broker.topics.partition(TOPIC, 0)
        assert leader is not None
        sim.fabric.cut_link(f"node-{first}", f"node-{second}")
        stop = trio.Event()

        async def spoof() -> None:
            while not stop.is_set():
                for version, epoch in ((11, -1), (15, 1_000_000)):
                    body = replica_fetch(second, epoch, 2**40, topic_id)
                    response = await sim.request("spoofer", first, FETCH, version, body)
                    answers = [p for t in response["responses"] for p in t["partitions"]]
                    codes.update(a["error_code"] for a in answers or [response])
                await trio.sleep(0.05)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(spoof)
            error, offset = await produce_once(sim, first, b"m2", -1)
            stop.set()
        if error == ErrorCode.NONE:
            sim.history.acked[b"m2"] = Acked(b"m2", 0, offset)
        assert leader.high_watermark == 1, "the spoofed fetches moved the high watermark"
        await sim.kill(first)
        sim.fabric.heal()
        await until(lambda: _leads(sim, second), "the follower leading")
        await sim.start(first)
    return sim, codes


def quorum_frame(document: object) -> bytes:
    """A frame built with the standard library's JSON, which writes integers of any size."""
    payload = json.dumps(document).encode()
    return struct.pack(">I", len(payload)) + payload


EDGE_EPOCHS = (2**31, 2**32, 2**63 - 1, 2**63, 2**64 + 5, -1)
"""Epochs just past int32 (Kafka's epoch), at and past int64, and below zero."""


def edge_frames(receiver: int, sender: int) -> list[bytes]:
    """Quorum messages and controller requests with epochs and offsets at the edge of their
    ranges and past them, and ids no voter has."""
    frames = []
    for epoch in EDGE_EPOCHS:
        vote = {"epoch": epoch, "candidate": sender, "last_epoch": epoch, "end_offset": 2**63 - 1}
        for kind, body in (
            ("vote_request", vote),
            ("begin_quorum_epoch", {"epoch": epoch, "leader": sender}),
            ("fetch_request", {"epoch": epoch, "offset": epoch, "last_epoch": 0}),
        ):
            message = {"sender": sender, "receiver": receiver, "type": kind, "body": body}
            frames.append(quorum_frame(message))
        heartbeat = {"broker": sender, "epoch": epoch, "offset": epoch, "wait_ms": 0}
        frames.append(quorum_frame({"method": "heartbeat", "params": heartbeat}))
    stranger = {"epoch": 2**31 - 1, "candidate": 99, "last_epoch": 0, "end_offset": 0}
    frames.append(
        quorum_frame({"sender": 99, "receiver": receiver, "type": "vote_request", "body": stranger})
    )
    return frames


async def send_frame(sim: ClusterSim, node_id: int, frame: bytes) -> None:
    """Send ``frame`` to a voter's port and read (bounded) until it closes or answers."""
    with trio.move_on_after(2.0):
        stream = await sim.fabric.host("forger").connect(f"node-{node_id}", QUORUM_PORT)
        try:
            await stream.send_all(frame)
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.receive_some(65_536)
        finally:
            await stream.aclose()


def quorum_epochs(sim: ClusterSim) -> dict[int, int]:
    return {
        node.node_id: node.server.controller.quorum.raft.epoch
        for node in sim.brokers()
        if node.server is not None and node.server.controller is not None
    }


async def epochs_at_the_edge(seed: int, root: Path) -> tuple[ClusterSim, dict[int, int]]:
    """While idempotent acks=all producers write, every voter gets quorum messages and
    controller requests with epochs and offsets at the edge of their ranges and past them:
    all are refused, no voter takes an epoch out of range, and the cluster keeps its
    promises. Returns the quorum epochs at the end."""
    seed_trio_scheduler(seed)
    sim = ClusterSim(seed, root, partitions=1, replication_factor=3)
    sim.fabric.faulty = False
    try:
        async with sim.running():
            await sim.create_topic()
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sim.producer, 0, stop)
                await until(lambda: len(sim.history.acked) >= 10, "records before")
                for receiver in sorted(sim.nodes):
                    sender = next(n for n in sorted(sim.nodes) if n != receiver)
                    for frame in edge_frames(receiver, sender):
                        await send_frame(sim, receiver, frame)
                count = len(sim.history.acked)
                await until(lambda: len(sim.history.acked) >= count + 10, "records after")
                stop.set()
            epochs = quorum_epochs(sim)
            await sim.settle(30.0)
            sim.check()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return sim, epochs


async def full_disk_on_the_leader(seed: int, root: Path) -> ClusterSim:
    """The disk under the leader's partition fills while an idempotent acks=all producer
    writes (RF 3, min.insync.replicas 2): the write that did not fit takes the partition
    offline there, leadership moves to another in-sync replica and the producer goes on
    there; once space returns and the node restarts, it catches up and rejoins the ISR."""
    seed_trio_scheduler(seed)
    sim = ClusterSim(seed, root, partitions=1)
    sim.fabric.faulty = False
    try:
        async with sim.running() as nursery:
            await sim.create_topic()
            await until(lambda: leader_of(sim)[0] > 0, "a first leader")
            await until(sim.in_sync, "the replicas in sync")
            nursery.start_soon(sim.consumer, 0)
            stop = trio.Event()
            async with trio.open_nursery() as clients:
                clients.start_soon(sim.producer, 0, stop)
                await until(lambda: len(sim.history.acked) >= 20, "records before the disk fills")
                full, _ = leader_of(sim)
                partition_directory = sim.nodes[full].data_dir / f"{TOPIC}-0"
                sim.disk.fill(partition_directory, space_bytes=0)
                await until(lambda: leader_of(sim)[0] not in (-1, full), "leadership moved")
                held = _held(sim, full)
                assert held is not None and held.offline, "the full replica is not offline"
                assert sim.disk.refused_writes > 0
                moved = len(sim.history.acked)
                await until(lambda: len(sim.history.acked) >= moved + 20, "records after")
                stop.set()
            sim.disk.free(partition_directory)
            await sim.kill(full)
            await sim.start(full)
            await sim.settle(30.0)
            sim.check()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return sim
