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

from eventplatform.log.cluster.quorum import encode_message
from eventplatform.log.cluster.raft import Message, VoteRequest
from eventplatform.log.protocol import encode_request
from eventplatform.log.protocol.apis import FETCH
from eventplatform.testing import LocalCluster, wait_until
from eventplatform.tools.cluster_status import fetch_cluster_status

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


def refused_at_the_handshake(port: int, payload: bytes) -> bool:
    """Whether a plaintext stranger sending ``payload`` to ``port`` gets nothing a Kafka or
    quorum client could read: the connection closed, or a TLS alert record (type 21)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(payload)
        try:
            answer = sock.recv(4096)
        except ConnectionResetError:
            answer = b""
    return answer == b"" or answer[0] == TLS_ALERT


TLS_ALERT = 0x15


def test_a_spoofed_replica_fetch_is_refused_at_authentication(secure: LocalCluster) -> None:
    """A Fetch naming broker 2 as the replica, sent by a process without the cluster's
    certificate to broker 1's replication port: refused before it is read, so it moves
    no follower's offset and no high watermark."""
    fetch = {
        "replica_id": 2,
        "max_wait_ms": 0,
        "max_bytes": 1 << 20,
        "topics": [{"topic": "ledger", "partitions": [{"partition": 0, "fetch_offset": 10**6}]}],
    }
    request = bytes(encode_request(FETCH, 11, fetch, correlation_id=1, client_id="stranger"))
    assert refused_at_the_handshake(secure.nodes[1].kafka_port, request)
    refusal = "TLS handshake with 127.0.0.1 on listener INTERNAL failed"
    # the broker logs the refusal after it has closed the connection
    assert wait_until(lambda: refusal in secure.tail(1, 400), TIMEOUT_S)
    admin = AdminClient(secure.admin_settings())
    metadata = admin.list_topics("ledger", timeout=TIMEOUT_S).topics["ledger"]
    assert all(len(p.isrs) == 3 for p in metadata.partitions.values())


def test_a_forged_vote_is_refused_at_authentication(secure: LocalCluster) -> None:
    """A well-formed vote request for a far later epoch, in the quorum's own framing,
    sent to every voter by a process without the cluster's certificate: no voter reads
    it, so the quorum's epoch does not jump and its leader stays."""
    before = fetch_cluster_status(data_dir=secure.directory, controllers=None)
    for node_id, node in secure.nodes.items():
        vote = Message(
            2, node_id, VoteRequest(epoch=10_000, candidate=2, last_epoch=10_000, end_offset=10**9)
        )
        assert refused_at_the_handshake(node.quorum_port, encode_message(vote))
    after = fetch_cluster_status(data_dir=secure.directory, controllers=None)
    assert after["epoch"] == before["epoch"] < 10_000
    assert after["controller"] == before["controller"]
