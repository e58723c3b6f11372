"""A broker behind the controller's log start: real nodes in one process over loopback.

One node is the only controller voter, snapshotting after a few hundred bytes of
records; it commits metadata until its log no longer starts at 0. A broker that
registers only then (a new broker; a restarted or long-partitioned one is at the
same place) cannot be sent the records it lacks: it gets the whole image, then
follows the records from there, and serves what the image says.

A broker that restarts knows its logs on disk before it knows their layout: it answers
clients only once it has applied the metadata (it once answered a topic it held with
no partitions, and a client cached that count)."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
from loopback_quorum import free_ports

from eventplatform.log.broker.server import BrokerServer
from eventplatform.log.cluster.controller import Controller
from eventplatform.log.cluster.node import BrokerMember
from eventplatform.log.config import BrokerConfig
from eventplatform.log.protocol import ErrorCode, decode_response, encode_request
from eventplatform.log.protocol.apis import METADATA

WAIT_S = 15.0


def node_config(node: int, roles: str, voters: str, data_dir: Path, port: int) -> BrokerConfig:
    properties = {
        "node.id": node,
        "process.roles": roles,
        "controller.quorum.voters": voters,
        "controller.quorum.election.timeout.ms": "200",
        "controller.quorum.fetch.timeout.ms": "600",
        "broker.heartbeat.interval.ms": "100",
        "broker.session.timeout.ms": "30000",
        "metadata.log.max.record.bytes.between.snapshots": "300",
        "metadata.log.segment.bytes": "1024",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
    }
    config = BrokerConfig.from_properties(properties)
    return dataclasses.replace(config, data_dir=data_dir, listen_host="127.0.0.1", listen_port=port)


def two_nodes(tmp_path: Path) -> tuple[BrokerServer, Callable[[], BrokerServer]]:
    """Node 1, the only controller voter and a broker; and a maker of node 2, a broker
    only (each call a new server on the same data directory and port, as a restart)."""
    quorum_port, first_port, second_port = free_ports(3)
    voters = f"1@127.0.0.1:{quorum_port}"
    first = BrokerServer(
        node_config(1, "broker,controller", voters, tmp_path / "node-1", first_port)
    )

    def second() -> BrokerServer:
        return BrokerServer(node_config(2, "broker", voters, tmp_path / "node-2", second_port))

    return first, second


async def active_controller(server: BrokerServer) -> Controller:
    with trio.fail_after(WAIT_S):
        while server.controller is None or not server.controller.controller.active:
            await trio.sleep(0.02)
    return server.controller.controller


async def test_a_broker_registering_after_truncation_gets_the_whole_image(
    tmp_path: Path,
) -> None:
    first, second = two_nodes(tmp_path)
    late = second()
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        controller = await active_controller(first)
        for number in range(12):
            await controller.create_topic(f"early-{number}", 1, 1)
        raft = controller.quorum.raft
        assert raft.log_start > 0, "the controller's log was not truncated"

        await nursery.start(late.run)
        assert late.broker is not None and isinstance(late.broker.membership, BrokerMember)
        link = late.broker.membership.link
        with trio.fail_after(WAIT_S):
            await link.caught_up.wait()
        assert link.offset >= raft.log_start
        assert link.image.topics == controller.image.topics
        assert link.image.brokers[2].host == "127.0.0.1"  # its own registration, after

        # from there on, records: a topic with a partition on the late broker reaches it
        await controller.create_topic("after", 2, 1)  # round-robin: one partition each
        assert {p.replicas for p in controller.image.topics["after"].partitions} == {(1,), (2,)}
        with trio.fail_after(WAIT_S):
            while late.broker.topics.get("after") is None:
                await trio.sleep(0.02)
        assert link.image.topics["after"] == controller.image.topics["after"]
        nursery.cancel_scope.cancel()


METADATA_VERSION = 12
EARLY_WAIT_S = 1.0


async def ask_metadata(stream: trio.SocketStream, topic: str) -> None:
    body = {
        "topics": [{"topic_id": bytes(16), "name": topic}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    await stream.send_all(encode_request(METADATA, METADATA_VERSION, body, correlation_id=1))


async def metadata_answer(stream: trio.SocketStream) -> dict[str, Any]:
    frame = bytearray()
    while len(frame) < 4 or len(frame) < 4 + struct.unpack(">i", frame[:4])[0]:
        data = await stream.receive_some(1 << 16)
        assert data, "the broker closed the connection"
        frame += data
    return decode_response(METADATA, METADATA_VERSION, bytes(frame[4:]))[1]


async def test_a_restarted_broker_answers_clients_only_once_it_has_the_metadata(
    tmp_path: Path,
) -> None:
    first, second = two_nodes(tmp_path)
    second_port = second().config.listen_port
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        controller = await active_controller(first)
        async with trio.open_nursery() as running:
            before = second()
            await running.start(before.run)
            await controller.create_topic("kept", 2, 2)
            with trio.fail_after(WAIT_S):
                while before.broker is None or before.broker.topics.get("kept") is None:
                    await trio.sleep(0.02)
            running.cancel_scope.cancel()

        # Node 2 comes back; the controller holds its heartbeats, so after registering
        # it has its logs on disk and no metadata applied.
        assert first.controller is not None
        methods = first.controller._methods  # the controller's request table
        heartbeat = methods["heartbeat"]
        released = trio.Event()

        async def held_heartbeat(params: dict[str, Any]) -> dict[str, Any]:
            if int(params["broker"]) == 2:
                await released.wait()
            return await heartbeat(params)

        methods["heartbeat"] = held_heartbeat
        restarted = second()
        serving = trio.Event()

        async def restart() -> None:
            await nursery.start(restarted.run)
            serving.set()

        nursery.start_soon(restart)
        with trio.fail_after(WAIT_S):
            while (
                restarted.broker is None
                or getattr(restarted.broker.membership, "link", None) is None
                or restarted.broker.membership.link.epoch is None
            ):
                await trio.sleep(0.02)
        assert restarted.broker.topics.get("kept") is not None  # its logs, loaded

        stream = await trio.open_tcp_stream("127.0.0.1", second_port)
        await ask_metadata(stream, "kept")
        with trio.move_on_after(EARLY_WAIT_S) as early:
            answer = await metadata_answer(stream)
        assert early.cancelled_caught, f"answered before it had the metadata: {answer}"
        assert not serving.is_set()

        released.set()
        with trio.fail_after(WAIT_S):
            answer = await metadata_answer(stream)
            await serving.wait()
        (topic,) = answer["topics"]
        assert topic["error_code"] == ErrorCode.NONE
        assert len(topic["partitions"]) == 2
        assert {b["node_id"] for b in answer["brokers"]} == {1, 2}
        await stream.aclose()
        nursery.cancel_scope.cancel()
