"""A broker behind the controller's log start: real nodes in one process over loopback.

One node is the only controller voter, snapshotting after a few hundred bytes of
records; it commits metadata until its log no longer starts at 0. A broker that
registers only then (a new broker; a restarted or long-partitioned one is at the
same place) cannot be sent the records it lacks: it gets the whole image, then
follows the records from there, and serves what the image says."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import trio
from loopback_quorum import free_ports

from eventplatform.log.broker.server import BrokerServer
from eventplatform.log.cluster.controller import Controller
from eventplatform.log.cluster.node import BrokerMember
from eventplatform.log.config import BrokerConfig

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


async def active_controller(server: BrokerServer) -> Controller:
    with trio.fail_after(WAIT_S):
        while server.controller is None or not server.controller.controller.active:
            await trio.sleep(0.02)
    return server.controller.controller


async def test_a_broker_registering_after_truncation_gets_the_whole_image(
    tmp_path: Path,
) -> None:
    quorum_port, first_port, late_port = free_ports(3)
    voters = f"1@127.0.0.1:{quorum_port}"
    first = BrokerServer(
        node_config(1, "broker,controller", voters, tmp_path / "node-1", first_port)
    )
    late = BrokerServer(node_config(2, "broker", voters, tmp_path / "node-2", late_port))
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
