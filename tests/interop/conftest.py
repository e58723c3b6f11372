"""Shared fixtures for the interop suites: one real broker, or cluster, per module.

Each test module runs twice: against one ``platform serve`` process, and
against a 3-node cluster of them (``platform cluster up``'s layout: every
node broker and controller, topics replicated 3 times). Module scope keeps
the suites fast; each test creates its own topics with ``new_topic``, so
tests in a module never read each other's records. A module whose tests
need one process sets ``BROKER_NODES = (1,)``, and one that defines its
own ``broker`` fixture sets ``BROKER_NODES = ()``. A broker that died while a module ran is reported
as an error of that module's last test.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Mapping

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from eventplatform.testing import (
    BrokerProcess,
    LocalClusterBroker,
    running_broker,
    running_local_cluster,
)

ADMIN_TIMEOUT_S = 30.0
BROKER_OVERRIDES = (
    "num.partitions=3",
    "log.segment.bytes=536870912",
    "log.retention.check.interval.ms=500",
    "log.cleaner.backoff.ms=500",
    "group.initial.rebalance.delay.ms=0",
)

_topic_numbers = itertools.count()

NewTopicFactory = Callable[..., str]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "broker" in metafunc.fixturenames:
        nodes = getattr(metafunc.module, "BROKER_NODES", (1, 3))
        if not nodes:  # the module brings its own broker fixture
            return
        metafunc.parametrize(
            "broker", nodes, indirect=True, scope="module", ids=[f"{n}-node" for n in nodes]
        )


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[BrokerProcess | LocalClusterBroker]:
    nodes = getattr(request, "param", 1)
    process: BrokerProcess | LocalClusterBroker
    if nodes == 1:
        context = running_broker(tmp_path_factory.mktemp("broker"), BROKER_OVERRIDES)
    else:
        context = running_local_cluster(tmp_path_factory.mktemp("cluster"), BROKER_OVERRIDES)
    with context as process:
        yield process
        assert process.process is not None
        exit_code = process.process.poll()
        assert exit_code is None, (
            f"broker exited with {exit_code} during the module:\n{process.log_text()[-4000:]}"
        )


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess | LocalClusterBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture
def new_topic(admin: AdminClient, request: pytest.FixtureRequest) -> NewTopicFactory:
    """Create a topic named after the test; returns its name."""

    def create(partitions: int = 3, config: Mapping[str, str] | None = None) -> str:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:180]
        name = f"{stem}-{next(_topic_numbers)}"
        topic = NewTopic(
            name, num_partitions=partitions, replication_factor=-1, config=dict(config or {})
        )
        futures = admin.create_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)
        futures[name].result(timeout=ADMIN_TIMEOUT_S)
        return name

    return create
