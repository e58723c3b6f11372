"""A 3-node cluster of real processes, each serving ``/metrics`` (``LocalCluster`` with
``metrics=True``, as ``platform cluster up --metrics`` runs it). Produce to a partition
replicated on all three: every replica's end offset reaches the count, the leader
reports the whole ISR and no under-replicated partition, one controller is the quorum's
leader. Kill a follower: the leader's ISR shrinks and the partition shows as
under-replicated."""

from __future__ import annotations

from collections.abc import Iterator

import confluent_kafka
import pytest
from cluster_workload import create_topic
from metrics_scrape import Scrape, scrape, scrape_until

from eventplatform.testing import LocalCluster

TOPIC = "metered-cluster"
RECORDS = 20
VALUE_BYTES = 100
FLUSH_TIMEOUT_S = 30.0
SHRINK_TIMEOUT_S = 45.0
PARTITION = {"topic": TOPIC, "partition": "0"}


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster.create(tmp_path_factory.mktemp("cluster"), 3, metrics=True)
    local.start()
    try:
        yield local
    finally:
        local.stop()


def leads(scraped: Scrape) -> bool:
    return scraped.get("eventplatform_partition_in_sync_replicas", **PARTITION) is not None


def test_every_node_reports_its_replicas_and_the_leader_its_isr(cluster: LocalCluster) -> None:
    urls = cluster.metrics_urls
    assert sorted(urls) == [1, 2, 3]
    create_topic(cluster.bootstrap, TOPIC, 1, 3)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0}
    )
    for number in range(RECORDS):
        producer.produce(TOPIC, value=bytes([65 + number % 26]) * VALUE_BYTES)
        assert producer.flush(FLUSH_TIMEOUT_S) == 0

    scrapes = {
        node: scrape_until(
            url, lambda s: s.get("eventplatform_partition_high_watermark", **PARTITION) == RECORDS
        )
        for node, url in urls.items()
    }
    leaders = [node for node, scraped in scrapes.items() if leads(scraped)]
    assert len(leaders) == 1, "exactly one node reports the partition's ISR"
    leader = leaders[0]
    led = scrapes[leader]
    assert led.value("eventplatform_partition_in_sync_replicas", **PARTITION) == 3
    assert led.value("eventplatform_partition_replicas", **PARTITION) == 3
    assert led.value("eventplatform_broker_requests_total", api="Produce") >= RECORDS
    # The followers replicate by Fetch from the leader: its bytes out carry the records.
    assert led.value("eventplatform_broker_response_bytes_total", api="Fetch") > (
        2 * RECORDS * VALUE_BYTES
    )
    for scraped in scrapes.values():
        assert scraped.value("eventplatform_partition_log_end_offset", **PARTITION) == RECORDS
        assert scraped.value("eventplatform_under_replicated_partitions") == 0
        assert scraped.value("eventplatform_offline_partitions") == 0
    quorum_leaders = [
        node
        for node, scraped in scrapes.items()
        if scraped.value("eventplatform_quorum_role", role="leader") == 1
    ]
    assert len(quorum_leaders) == 1

    follower = next(node for node in urls if node != leader)
    cluster.kill(follower)
    shrunk = scrape_until(
        urls[leader],
        lambda s: s.get("eventplatform_partition_in_sync_replicas", **PARTITION) == 2,
        SHRINK_TIMEOUT_S,
    )
    assert shrunk.value("eventplatform_under_replicated_partitions") >= 1
    assert scrape(urls[leader]).value("eventplatform_partition_replicas", **PARTITION) == 3
