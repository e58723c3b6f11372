"""``broker.rack``: a broker in a rack says so, as Kafka's do, in Metadata (and so in
DescribeCluster) and in its DescribeConfigs, on one broker and on a 3-node cluster, where
each node registers its rack with the controller. Rack-aware clients read it there; fetch
from the nearest replica (KIP-392) builds on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from confluent_records import ADMIN_TIMEOUT_S

from eventplatform.testing import (
    BrokerProcess,
    LocalClusterBroker,
    running_broker,
    running_local_cluster,
)

BROKER_NODES = ()  # this module brings its own brokers
RACK = "rack-a"


@pytest.fixture(scope="module", params=[1, 3], ids=["1-node", "3-node"])
def racked(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess | LocalClusterBroker]:
    directory: Path = tmp_path_factory.mktemp("racked")
    overrides = (f"broker.rack={RACK}",)
    if request.param == 1:
        with running_broker(directory, overrides) as broker:
            yield broker
    else:
        with running_local_cluster(directory, overrides) as cluster:
            yield cluster


def test_every_broker_reports_its_rack(racked: BrokerProcess | LocalClusterBroker) -> None:
    admin = AdminClient({"bootstrap.servers": racked.bootstrap})
    nodes = admin.describe_cluster().result(timeout=ADMIN_TIMEOUT_S).nodes
    assert nodes and {node.rack for node in nodes} == {RACK}
    for node in nodes:
        resource = ConfigResource(ConfigResource.Type.BROKER, str(node.id))
        [future] = admin.describe_configs([resource], request_timeout=ADMIN_TIMEOUT_S).values()
        assert future.result(timeout=ADMIN_TIMEOUT_S)["broker.rack"].value == RACK
