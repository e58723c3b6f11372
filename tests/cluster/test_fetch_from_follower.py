"""Fetch from follower (KIP-392) on a 3-node cluster of real processes, one rack each.

With ``replica.selector.class`` set to the rack-aware selector, the leader
sends a consumer in a follower's rack to that follower; the follower serves
Fetch v11 up to its high watermark; a real client, told its ``client.rack``,
reads everything in order, most of it from the follower.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_requests import ask, fetch_body, partition_metadata
from cluster_workload import create_topic, producer
from confluent_kafka import Consumer, TopicPartition

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import FETCH
from eventplatform.log.replica.selector import NO_PREFERENCE, RACK_AWARE
from eventplatform.log.storage.record_batch import split_batches
from eventplatform.testing import LocalCluster

TOPIC = "near"
RECORDS = 300
VALUE_BYTES = 100
WAIT_S = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster.create(
        tmp_path_factory.mktemp("racks"),
        3,
        ["min.insync.replicas=2", f"replica.selector.class={RACK_AWARE}"],
        rack_prefix="rack-",
    )
    local.start()
    try:
        create_topic(local.bootstrap, TOPIC, 1, 3)
        writer = producer(local.bootstrap)
        for number in range(RECORDS):
            writer.produce(TOPIC, f"{number:05d}".encode().ljust(VALUE_BYTES, b"."), partition=0)
        assert writer.flush(30) == 0
        yield local
    finally:
        local.stop()


def roles(cluster: LocalCluster) -> tuple[int, int, dict[str, Any]]:
    (partition,) = partition_metadata(cluster, TOPIC)
    leader = partition["leader_id"]
    follower = next(n for n in partition["replica_nodes"] if n != leader)
    return leader, follower, partition


def rack_fetch(offset: int = 0, rack: str = "", epoch: int = -1) -> dict[str, Any]:
    body = fetch_body(TOPIC, epoch)
    body["topics"][0]["partitions"][0]["fetch_offset"] = offset
    body.update(rack_id=rack, max_wait_ms=5_000, min_bytes=1)
    return body


def answer_of(response: dict[str, Any]) -> dict[str, Any]:
    return dict(response["responses"][0]["partitions"][0])


def record_count(records: bytes | None) -> int:
    return sum(h.last_offset_delta + 1 for h in split_batches(records or b"", check_crc=False))


def test_the_leader_sends_a_consumer_to_the_follower_in_its_rack(cluster: LocalCluster) -> None:
    leader, follower, partition = roles(cluster)
    started = time.monotonic()
    response = ask(cluster, leader, FETCH, 11, rack_fetch(RECORDS, f"rack-{follower}"))
    answer = answer_of(response)
    assert time.monotonic() - started < 2.0  # at once, not after max_wait_ms
    assert answer["error_code"] == ErrorCode.NONE
    assert answer["preferred_read_replica"] == follower
    assert record_count(answer["records"]) == 0
    assert answer["high_watermark"] == RECORDS
    for rack in (f"rack-{leader}", "elsewhere", ""):
        answer = answer_of(ask(cluster, leader, FETCH, 11, rack_fetch(0, rack)))
        assert answer["preferred_read_replica"] == NO_PREFERENCE, rack
        assert record_count(answer["records"]) > 0
    assert partition["leader_epoch"] >= 0


def test_a_follower_serves_v11_fetches_up_to_its_high_watermark(cluster: LocalCluster) -> None:
    _, follower, partition = roles(cluster)
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = answer_of(ask(cluster, follower, FETCH, 11, rack_fetch(0, "", -1)))
        if answer["high_watermark"] == RECORDS or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert answer["error_code"] == ErrorCode.NONE
    assert answer["high_watermark"] == RECORDS
    assert answer["preferred_read_replica"] == NO_PREFERENCE
    assert record_count(answer["records"]) == RECORDS
    epoch = partition["leader_epoch"]
    at_epoch = answer_of(ask(cluster, follower, FETCH, 11, rack_fetch(0, "", epoch)))
    assert at_epoch["error_code"] == ErrorCode.NONE
    ahead = answer_of(ask(cluster, follower, FETCH, 11, rack_fetch(0, "", epoch + 1)))
    assert ahead["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH
    past = answer_of(ask(cluster, follower, FETCH, 11, rack_fetch(RECORDS + 10)))
    assert past["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE


def test_before_v11_only_the_leader_serves(cluster: LocalCluster) -> None:
    leader, follower, _ = roles(cluster)
    answer = answer_of(ask(cluster, follower, FETCH, 10, rack_fetch(0)))
    assert answer["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    answer = answer_of(ask(cluster, leader, FETCH, 10, rack_fetch(0)))
    assert answer["error_code"] == ErrorCode.NONE


def test_a_client_in_a_followers_rack_reads_everything_from_it(cluster: LocalCluster) -> None:
    leader, follower, _ = roles(cluster)
    received: dict[int, int] = {}

    def on_stats(document: str) -> None:
        for broker in json.loads(document)["brokers"].values():
            if broker.get("nodeid", -1) >= 0:
                received[broker["nodeid"]] = broker["rxbytes"]

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "near-readers",
            "client.rack": f"rack-{follower}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "statistics.interval.ms": 500,
            "stats_cb": on_stats,
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        values = []
        deadline = time.monotonic() + WAIT_S
        while len(values) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        assert [int(v[:5]) for v in values] == list(range(RECORDS))
        received.clear()
        deadline = time.monotonic() + WAIT_S
        while not received and time.monotonic() < deadline:
            consumer.poll(0.2)
    finally:
        consumer.close()
    assert received.get(follower, 0) > RECORDS * VALUE_BYTES, received
    assert received.get(follower, 0) > received.get(leader, 0), received
