"""A 3-node cluster secured end to end: mutual TLS between brokers and controllers,
SASL_SSL for applications, ACLs kept in the cluster's metadata.

The operator's certificate (a super user) creates a SCRAM user and grants it a
topic through one broker; the user then authenticates and is authorized on every
broker, produces with acks=all to a topic replicated three times and reads it
back. A stranger without a certificate is refused by the replication and quorum
ports before a byte of Kafka or quorum protocol is read.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from eventplatform.log.protocol import encode_request
from eventplatform.log.protocol.apis import FETCH
from eventplatform.testing import LocalCluster

TIMEOUT_S = 30.0
PASSWORD = "alice's cluster secret"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.create(
        tmp_path_factory.mktemp("secure"), 3, ["min.insync.replicas=2"], secure=True
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_user_made_on_one_broker_is_known_and_authorized_on_every_broker(
    secure: LocalCluster,
) -> None:
    admin = AdminClient(secure.admin_settings())
    upsertion: list[Any] = [
        UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()
        )
    ]
    admin.alter_user_scram_credentials(upsertion)["alice"].result(TIMEOUT_S)
    admin.create_topics([NewTopic("ledger", 3, 3)])["ledger"].result(TIMEOUT_S)
    grants = [
        AclBinding(
            ResourceType.TOPIC,
            "ledger",
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in (AclOperation.WRITE, AclOperation.READ)
    ] + [
        AclBinding(
            ResourceType.GROUP,
            "ledger-",
            ResourcePatternType.PREFIXED,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    ]
    for future in admin.create_acls(grants).values():
        future.result(TIMEOUT_S)

    alice = secure.client_settings("alice", PASSWORD)
    for node in secure.nodes.values():  # each broker alone knows alice and her grants
        alone = {**alice, "bootstrap.servers": f"127.0.0.1:{node.client_port}"}
        brokers = AdminClient(alone).list_topics(timeout=TIMEOUT_S).brokers
        assert sorted(b.port for b in brokers.values()) == sorted(
            n.client_port for n in secure.nodes.values()
        )

    reports: list[KafkaError | None] = []
    producer = Producer({**alice, "acks": "all", "message.timeout.ms": 20_000})
    for n in range(30):
        producer.produce(
            "ledger",
            f"entry {n}".encode(),
            partition=n % 3,
            on_delivery=lambda e, _m: reports.append(e),
        )
    producer.flush(TIMEOUT_S)
    assert reports == [None] * 30

    consumer = Consumer({**alice, "group.id": "ledger-readers", "auto.offset.reset": "earliest"})
    consumer.subscribe(["ledger"])
    values: set[bytes] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(values) < 30 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.add(message.value())
    finally:
        consumer.close()
    assert values == {f"entry {n}".encode() for n in range(30)}

    refused: list[KafkaError | None] = []
    producer = Producer({**alice, "message.timeout.ms": 10_000})
    producer.produce("not-granted", b"x", on_delivery=lambda e, _m: refused.append(e))
    producer.flush(TIMEOUT_S)
    assert refused and refused[0] is not None
    assert refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_stranger_cannot_fetch_as_a_follower_nor_speak_to_the_quorum(
    secure: LocalCluster,
) -> None:
    fetch = {
        "replica_id": 2,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    request = bytes(encode_request(FETCH, 11, fetch, correlation_id=1, client_id="stranger"))
    vote = b'{"kind":"vote","term":99,"candidate":9}'
    node = secure.nodes[1]
    for port, payload in (
        (node.kafka_port, request),
        (node.quorum_port, struct.pack(">i", len(vote)) + vote),
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(payload)
            try:
                answer = sock.recv(4096)
            except ConnectionResetError:
                answer = b""
        # Nothing a Kafka or quorum client could read: no answer, or a TLS alert record.
        assert answer == b"" or answer[0] == 0x15, answer[:16]
    # The cluster is unmoved: every broker still serves alice's topic.
    admin = AdminClient(secure.admin_settings())
    metadata = admin.list_topics("ledger", timeout=TIMEOUT_S).topics["ledger"]
    assert all(len(p.isrs) == 3 for p in metadata.partitions.values())
