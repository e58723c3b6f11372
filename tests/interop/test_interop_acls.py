"""ACLs enforced on a real broker and managed with librdkafka's admin API.

The broker runs with ``authorizer.class.name`` set, a super user, a PLAINTEXT
listener (anonymous) and a SASL listener. The super user's credential is put in
the data directory before the first start, as ``platform users add --data-dir``
does; everyone else is made over the wire.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka
import kafka.admin
import kafka.errors
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
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

from eventplatform.log.security.credentials import CREDENTIALS_FILE, CredentialStore
from eventplatform.log.security.scram import ScramMechanism as Mechanism
from eventplatform.log.security.scram import credential_from_password
from eventplatform.testing import BrokerProcess

TIMEOUT_S = 30.0
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


class AclBroker:
    def __init__(self, process: BrokerProcess) -> None:
        self.process = process

    def client(self, user: str | None, **settings: Any) -> dict[str, Any]:
        if user is None:
            return {"bootstrap.servers": self.process.bootstrap_of("PLAINTEXT"), **settings}
        return {
            "bootstrap.servers": self.process.bootstrap_of("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": PASSWORDS[user],
            **settings,
        }

    def admin(self, user: str | None) -> AdminClient:
        return AdminClient(self.client(user))


def seed_super_user(data_dir: Path) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    credential = credential_from_password(Mechanism.SCRAM_SHA_512, PASSWORDS["admin"])
    CredentialStore(data_dir / CREDENTIALS_FILE).apply([("admin", credential)], [])


def start(data_dir: Path) -> BrokerProcess:
    return BrokerProcess(
        data_dir,
        [
            "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin",
            "connection.failed.authentication.delay.ms=10",
        ],
    ).start()


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    data_dir = tmp_path_factory.mktemp("acls") / "data"
    seed_super_user(data_dir)
    broker = AclBroker(start(data_dir))
    try:
        admin = broker.admin("admin")
        users: list[Any] = [
            UserScramCredentialUpsertion(
                user,
                ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                PASSWORDS[user].encode(),
            )
            for user in ("alice", "bob")
        ]
        for future in admin.alter_user_scram_credentials(users).values():
            future.result(TIMEOUT_S)
        for topic in ("orders.eu", "orders.us", "payroll"):
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
        grants = [
            acl("orders.", ResourcePatternType.PREFIXED, "User:alice", AclOperation.WRITE),
            acl("orders.", ResourcePatternType.PREFIXED, "User:alice", AclOperation.READ),
            acl(
                "orders-",
                ResourcePatternType.PREFIXED,
                "User:alice",
                AclOperation.READ,
                kind=ResourceType.GROUP,
            ),
            acl("orders.eu", ResourcePatternType.LITERAL, "User:bob", AclOperation.DESCRIBE),
        ]
        for future in admin.create_acls(grants).values():
            future.result(TIMEOUT_S)
        yield broker
    finally:
        broker.process.kill()


def acl(
    name: str,
    pattern: ResourcePatternType,
    principal: str,
    operation: AclOperation,
    *,
    kind: ResourceType = ResourceType.TOPIC,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, "*", operation, permission)


def produce(config: dict[str, Any], topic: str, value: bytes) -> KafkaError | None:
    reports: list[KafkaError | None] = []
    producer = Producer({"message.timeout.ms": 5_000, **config})
    producer.produce(topic, value, on_delivery=lambda error, _m: reports.append(error))
    producer.flush(TIMEOUT_S)
    assert reports, "no delivery report"
    return reports[0]


def kafka_python_admin(broker: AclBroker, user: str) -> Any:
    return kafka.admin.KafkaAdminClient(
        bootstrap_servers=broker.process.bootstrap_of("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username=user,
        sasl_plain_password=PASSWORDS[user],
    )


def topics_seen(broker: AclBroker, user: str | None) -> set[str]:
    admin = broker.admin(user)
    return set(admin.list_topics(timeout=TIMEOUT_S).topics)


def test_a_granted_user_produces_and_consumes_with_its_group(acl_broker: AclBroker) -> None:
    alice = acl_broker.client("alice")
    assert produce(alice, "orders.eu", b"granted") is None
    consumer = Consumer({**alice, "group.id": "orders-billing", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders.eu"])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not values and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert values == [b"granted"]


def test_writes_outside_the_grants_are_refused_with_kafkas_codes(acl_broker: AclBroker) -> None:
    error = produce(acl_broker.client("alice"), "payroll", b"not mine")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    error = produce(acl_broker.client("bob"), "orders.eu", b"describe is not write")
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_group_outside_the_grants_is_refused(acl_broker: AclBroker) -> None:
    errors: list[KafkaError] = []
    consumer = Consumer(
        {
            **acl_broker.client("alice"),
            "group.id": "someone-elses",
            "auto.offset.reset": "earliest",
            "error_cb": errors.append,
        }
    )
    consumer.subscribe(["orders.eu"])
    failure = None
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while failure is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                failure = message.error()
    finally:
        consumer.close()
    assert failure is not None and failure.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_metadata_hides_what_a_principal_may_not_describe(acl_broker: AclBroker) -> None:
    assert topics_seen(acl_broker, "bob") == {"orders.eu"}
    assert {"orders.eu", "orders.us"} <= topics_seen(acl_broker, "alice")
    assert "payroll" not in topics_seen(acl_broker, "alice")
    assert topics_seen(acl_broker, None) == set()  # anonymous: nothing is granted
    assert {"orders.eu", "orders.us", "payroll"} <= topics_seen(acl_broker, "admin")


def test_strangers_can_neither_create_nor_delete_topics_nor_users(acl_broker: AclBroker) -> None:
    for user in (None, "alice"):
        admin = acl_broker.admin(user)
        created = admin.create_topics([NewTopic("stranger", 1, 1)])["stranger"]
        with pytest.raises(KafkaException) as refused:
            created.result(TIMEOUT_S)
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        deleted = admin.delete_topics(["orders.eu"], operation_timeout=TIMEOUT_S)["orders.eu"]
        with pytest.raises(KafkaException) as refused:
            deleted.result(TIMEOUT_S)
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        upsertion: list[Any] = [
            UserScramCredentialUpsertion(
                "mallory", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw"
            )
        ]
        future = admin.alter_user_scram_credentials(upsertion)["mallory"]
        with pytest.raises(KafkaException) as refused:
            future.result(TIMEOUT_S)
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert "orders.eu" in topics_seen(acl_broker, "admin")


def test_only_a_principal_with_cluster_rights_lists_and_changes_acls(
    acl_broker: AclBroker,
) -> None:
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    admin, alice = acl_broker.admin("admin"), acl_broker.admin("alice")
    listed = admin.describe_acls(everything).result(TIMEOUT_S)
    assert {(b.name, b.principal, b.operation) for b in listed} >= {
        ("orders.", "User:alice", AclOperation.WRITE),
        ("orders.eu", "User:bob", AclOperation.DESCRIBE),
    }
    # librdkafka drops DescribeAcls' top-level error (it returns an empty list), so the
    # refusal is read with kafka-python, which raises it.
    kafka_admin = kafka_python_admin(acl_broker, "alice")
    try:
        with pytest.raises(kafka.errors.ClusterAuthorizationFailedError):
            kafka_admin.describe_acls(
                kafka.admin.ACLFilter(
                    principal=None,
                    host=None,
                    operation=kafka.admin.ACLOperation.ANY,
                    permission_type=kafka.admin.ACLPermissionType.ANY,
                    resource_pattern=kafka.admin.ResourcePatternFilter(
                        kafka.admin.ResourceType.ANY, None, kafka.admin.ACLResourcePatternType.ANY
                    ),
                )
            )
    finally:
        kafka_admin.close()
    grant = acl("orders.us", ResourcePatternType.LITERAL, "User:alice", AclOperation.ALL)
    with pytest.raises(KafkaException) as refused:
        alice.create_acls([grant])[grant].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_a_removed_grant_takes_effect_and_acls_survive_a_restart(tmp_path: Path) -> None:
    seed_super_user(tmp_path / "data")
    broker = AclBroker(start(tmp_path / "data"))
    try:
        admin = broker.admin("admin")
        carol: list[Any] = [
            UserScramCredentialUpsertion(
                "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"alice-secret"
            )
        ]
        admin.alter_user_scram_credentials(carol)["alice"].result(TIMEOUT_S)
        admin.create_topics([NewTopic("ledger", 1, 1)])["ledger"].result(TIMEOUT_S)
        grant = acl("ledger", ResourcePatternType.LITERAL, "User:alice", AclOperation.WRITE)
        admin.create_acls([grant])[grant].result(TIMEOUT_S)

        assert broker.process.stop() == 0
        broker.process.start()
        assert produce(broker.client("alice"), "ledger", b"after restart") is None

        removal = AclBindingFilter(
            ResourceType.TOPIC,
            "ledger",
            ResourcePatternType.LITERAL,
            "User:alice",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        admin = broker.admin("admin")
        deleted = admin.delete_acls([removal])[removal].result(TIMEOUT_S)
        assert [(b.name, b.operation) for b in deleted] == [("ledger", AclOperation.WRITE)]
        error = produce(broker.client("alice"), "ledger", b"revoked")
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        broker.process.kill()
