"""Who the leader believes about a follower's log end: real nodes in one process over
loopback. A plain client on the Kafka port that sends Fetch with a follower's replica id
and an offset past the log end must not move the high watermark (or acks=all would
answer for records no follower has); a replica fetch is believed only from a replica of
the partition with its broker's current epoch (Fetch v15's ReplicaState), and never past
the leader's log end. The real follower, which sends its epoch, still moves it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import trio
from loopback_quorum import free_ports

from eventplatform.log.broker.server import BrokerServer
from eventplatform.log.cluster.controller import Controller
from eventplatform.log.cluster.peer import PeerConnection
from eventplatform.log.config import BrokerConfig
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import FETCH, PRODUCE
from eventplatform.log.replica.partition import Partition
from eventplatform.log.storage.record_batch import Record, encode_batch

WAIT_S = 15.0
TOPIC = "orders"


def node_config(node: int, voters: str, data_dir: Path, port: int) -> BrokerConfig:
    properties = {
        "node.id": node,
        "process.roles": "broker,controller" if node == 1 else "broker",
        "controller.quorum.voters": voters,
        "controller.quorum.election.timeout.ms": "200",
        "controller.quorum.fetch.timeout.ms": "600",
        "broker.heartbeat.interval.ms": "100",
        "broker.session.timeout.ms": "30000",
        "replica.lag.time.max.ms": "30000",
        "replica.fetch.wait.max.ms": "100",
        "default.replication.factor": "2",
        "offsets.topic.replication.factor": "1",
    }
    config = BrokerConfig.from_properties(properties)
    return dataclasses.replace(config, data_dir=data_dir, listen_host="127.0.0.1", listen_port=port)


async def until(condition: Any, what: str) -> None:
    with trio.fail_after(WAIT_S):
        while not condition():
            await trio.sleep(0.02)
    assert condition(), what


def leader_partition(server: BrokerServer) -> Partition:
    assert server.broker is not None
    partition = server.broker.topics.partition(TOPIC, 0)
    assert partition is not None
    return partition


async def produce(port: int, value: bytes) -> None:
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 2000,
        "topic_data": [
            {
                "name": TOPIC,
                "partition_data": [
                    {"index": 0, "records": encode_batch([Record(0, 0, None, value)])}
                ],
            }
        ],
    }
    connection = PeerConnection("127.0.0.1", port, "a-producer")
    try:
        response = await connection.request(PRODUCE, 8, body, timeout_s=WAIT_S)
    finally:
        await connection.aclose()
    assert response["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NONE


def fetch_body(fetch_offset: int, replica_id: int, replica_epoch: int, topic_id: bytes) -> Any:
    return {
        "replica_id": replica_id,
        "replica_state": {"replica_id": replica_id, "replica_epoch": replica_epoch},
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": TOPIC,
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": fetch_offset,
                        "log_start_offset": 0,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


async def spoof(port: int, version: int, body: Any) -> int:
    """Send one Fetch as a plain client; the partition's error code (the request's, when
    it names no partition)."""
    connection = PeerConnection("127.0.0.1", port, "a-plain-client")
    try:
        response = await connection.request(FETCH, version, body, timeout_s=WAIT_S)
    finally:
        await connection.aclose()
    if not response["responses"]:
        top: int = response["error_code"]
        return top
    code: int = response["responses"][0]["partitions"][0]["error_code"]
    return code


async def test_a_spoofed_replica_fetch_does_not_move_the_high_watermark(tmp_path: Path) -> None:
    quorum_port, first_port, second_port = free_ports(3)
    voters = f"1@127.0.0.1:{quorum_port}"
    leader = BrokerServer(node_config(1, voters, tmp_path / "node-1", first_port))
    async with trio.open_nursery() as nursery:
        await nursery.start(leader.run)
        follower_scope = trio.CancelScope()

        async def follow(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with follower_scope:
                follower = BrokerServer(node_config(2, voters, tmp_path / "node-2", second_port))
                await follower.run(task_status=task_status)

        await nursery.start(follow)
        assert leader.controller is not None
        controller: Controller = leader.controller.controller
        await until(lambda: len(controller.image.live_brokers()) == 2, "both brokers live")
        await controller.create_topic(TOPIC, 1, 2)
        await until(lambda: leader.broker and leader.broker.topics.get(TOPIC), "the topic")
        partition = leader_partition(leader)
        assert partition.is_leader and partition.replica_set == (1, 2)
        await produce(first_port, b"replicated")
        await until(lambda: partition.high_watermark == 1, "the follower's fetch moves the HW")

        follower_scope.cancel()  # the follower stops; it stays in the ISR for a while
        await produce(first_port, b"on the leader only")
        assert partition.log.log_end_offset == 2 and partition.high_watermark == 1
        assert partition.replicas is not None and partition.replicas.isr == {1, 2}
        topic_id = leader.broker.topics.topics[TOPIC].topic_id  # type: ignore[union-attr]
        follower_epoch = controller.image.brokers[2].epoch
        recorded_end = partition.replicas.followers[2].log_end_offset

        spoofs = {
            "v11, a follower's id, offset 2^40": (11, fetch_body(2**40, 2, -1, topic_id)),
            "v11, a follower's id, offset at the end": (11, fetch_body(2, 2, -1, topic_id)),
            "v15, a stale epoch": (15, fetch_body(2, 2, follower_epoch + 1, topic_id)),
            "v15, an unknown replica": (15, fetch_body(2, 7, 1, topic_id)),
            "v15, the epoch, offset 2^40": (15, fetch_body(2**40, 2, follower_epoch, topic_id)),
        }
        codes = {name: await spoof(first_port, *request) for name, request in spoofs.items()}
        assert partition.high_watermark == 1, codes
        assert partition.replicas.followers[2].log_end_offset == recorded_end == 1
        assert codes == {
            "v11, a follower's id, offset 2^40": ErrorCode.STALE_BROKER_EPOCH,
            "v11, a follower's id, offset at the end": ErrorCode.STALE_BROKER_EPOCH,
            "v15, a stale epoch": ErrorCode.STALE_BROKER_EPOCH,
            "v15, an unknown replica": ErrorCode.NOT_LEADER_OR_FOLLOWER,
            "v15, the epoch, offset 2^40": ErrorCode.OFFSET_OUT_OF_RANGE,
        }
        nursery.cancel_scope.cancel()
