"""Raw Kafka requests to one node of a :class:`LocalCluster`, as a client sends them."""

from __future__ import annotations

from typing import Any

import trio

from eventplatform.log.cluster.peer import PeerConnection
from eventplatform.log.protocol.apis import METADATA
from eventplatform.testing import LocalCluster

TIMEOUT_S = 10.0


def ask(
    cluster: LocalCluster,
    node: int,
    api: Any,
    version: int,
    body: dict[str, Any],
    timeout_s: float = TIMEOUT_S,
) -> Any:
    """The node's answer to one request, over a connection of its own."""

    async def call() -> Any:
        connection = PeerConnection("127.0.0.1", cluster.nodes[node].kafka_port, "test")
        try:
            return await connection.request(api, version, body, timeout_s=timeout_s)
        finally:
            await connection.aclose()

    return trio.run(call)


def partition_metadata(cluster: LocalCluster, topic: str, node: int = 1) -> list[dict[str, Any]]:
    response = ask(
        cluster,
        node,
        METADATA,
        8,
        {
            "topics": [{"name": topic}],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    (entry,) = response["topics"]
    return sorted(entry["partitions"], key=lambda p: p["partition_index"])


def fetch_body(topic: str, leader_epoch: int = -1) -> dict[str, Any]:
    partition = {
        "partition": 0,
        "current_leader_epoch": leader_epoch,
        "fetch_offset": 0,
        "log_start_offset": -1,
        "partition_max_bytes": 1 << 20,
    }
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
