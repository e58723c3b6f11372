"""The broker's listeners, TLS and SASL, driven by real clients with the configs they know.

One broker serves four listeners: PLAINTEXT (where users are created, as on an
admin-only listener), SASL_PLAINTEXT, SASL_SSL and SSL, with a certificate from a
development CA. librdkafka (confluent-kafka) and kafka-python authenticate with
SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN, over TLS and not; wrong passwords,
requests before authentication and hammering addresses are refused.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from eventplatform.dev_certificates import issue, make_authority
from eventplatform.log.protocol import decode_response, encode_request
from eventplatform.log.protocol.apis import (
    API_VERSIONS,
    METADATA,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from eventplatform.testing import BrokerProcess, wait_until

LISTENERS = (
    "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0"
)
ADMIN_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 30.0
LOG_TIMEOUT_S = 10.0
PASSWORD = "correct horse battery staple"


class SecuredBroker:
    def __init__(self, broker: BrokerProcess, authority: Path) -> None:
        self.process = broker
        self.authority = authority

    def client(self, listener: str, **settings: Any) -> dict[str, Any]:
        """Client settings for ``listener``: its address, its protocol, the CA, and then
        ``settings`` (the SASL user, a client certificate)."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.process.bootstrap_of(listener),
            "security.protocol": listener,
        }
        if "SSL" in listener:
            config["ssl.ca.location"] = str(self.authority / "ca.pem")
        return {**config, **settings}


def start_secured(tmp_path: Path, *extra: str) -> SecuredBroker:
    certificates = tmp_path / "certificates"
    make_authority(certificates)
    server = issue(certificates, "broker", hosts=("127.0.0.1", "localhost"))
    broker = BrokerProcess(
        tmp_path / "data",
        [
            f"listeners={LISTENERS}",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            f"ssl.keystore.location={server.keystore}",
            f"ssl.truststore.location={certificates / 'ca.pem'}",
            "ssl.client.auth=requested",
            "connection.failed.authentication.delay.ms=10",
            *extra,
        ],
    ).start()
    return SecuredBroker(broker, certificates)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    broker = start_secured(tmp_path_factory.mktemp("secured"))
    try:
        create_users(broker, {"alice": PASSWORD, "bob": "bob's own"})
        yield broker
    finally:
        broker.process.kill()


def create_users(broker: SecuredBroker, users: dict[str, str]) -> None:
    admin = AdminClient(broker.client("PLAINTEXT"))
    alterations: list[Any] = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096), password.encode())
        for user, password in users.items()
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for future in admin.alter_user_scram_credentials(alterations).values():
        future.result(ADMIN_TIMEOUT_S)


def produce(config: dict[str, Any], topic: str, values: list[bytes]) -> list[KafkaError | None]:
    reports: list[KafkaError | None] = []
    producer = Producer({"message.timeout.ms": 20_000, **config})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda error, _m: reports.append(error))
    producer.flush(FLUSH_TIMEOUT_S)
    return reports


def consume(config: dict[str, Any], topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {
            **config,
            "group.id": f"reader-{topic}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


ONE_ATTEMPT = {"reconnect.backoff.ms": 10_000, "reconnect.backoff.max.ms": 10_000}
"""A client that tries once within a test's few seconds: every client here shares
127.0.0.1, and the broker counts failed authentications per address."""


def sasl(mechanism: str, user: str = "alice", password: str = PASSWORD) -> dict[str, Any]:
    return {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
        ("SASL_SSL", "SCRAM-SHA-256"),
        ("SASL_SSL", "SCRAM-SHA-512"),
        ("SASL_SSL", "PLAIN"),
    ],
)
def test_a_user_made_with_the_admin_api_produces_and_consumes(
    secured: SecuredBroker, listener: str, mechanism: str
) -> None:
    topic = f"secured-{listener}-{mechanism}".lower()
    config = secured.client(listener, **sasl(mechanism))
    values = [f"{mechanism} {n}".encode() for n in range(50)]
    assert produce(config, topic, values) == [None] * 50
    assert consume(config, topic, 50) == values


def test_tls_carries_fetched_records_whole(secured: SecuredBroker) -> None:
    """Fetch answers are sent with sendfile in plaintext; through TLS they are read and
    encrypted instead, and must arrive identical, big batches included."""
    topic = "secured-large"
    config = secured.client("SSL")
    values = [bytes([n]) * 300_000 for n in range(8)]
    assert produce({**config, "message.max.bytes": 1_000_000}, topic, values) == [None] * 8
    assert consume(config, topic, 8) == values


def test_each_listener_advertises_its_own_address(secured: SecuredBroker) -> None:
    for listener, settings in (
        ("PLAINTEXT", {}),
        ("SASL_SSL", sasl("SCRAM-SHA-256")),
        ("SSL", {}),
    ):
        admin = AdminClient(secured.client(listener, **settings))
        brokers = admin.list_topics(timeout=ADMIN_TIMEOUT_S).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [
            ("127.0.0.1", secured.process.listener_ports[listener])
        ]


def test_credentials_are_described_without_their_secrets(secured: SecuredBroker) -> None:
    admin = AdminClient(secured.client("SASL_SSL", **sasl("SCRAM-SHA-512")))
    described = admin.describe_user_scram_credentials(["alice", "nobody"])
    alice = described["alice"].result(ADMIN_TIMEOUT_S)
    assert sorted((info.mechanism, info.iterations) for info in alice.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096),
        (ScramMechanism.SCRAM_SHA_512, 4096),
    ]
    with pytest.raises(KafkaException) as missing:
        described["nobody"].result(ADMIN_TIMEOUT_S)
    assert missing.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    credentials_file = (secured.process.data_dir / "scram-credentials.json").read_text()
    assert PASSWORD not in credentials_file


def test_a_wrong_password_is_refused_and_nothing_is_written(secured: SecuredBroker) -> None:
    errors: list[KafkaError] = []
    config = secured.client(
        "SASL_PLAINTEXT", **sasl("SCRAM-SHA-256", password="wrong"), error_cb=errors.append
    )
    config.update(ONE_ATTEMPT)
    reports = produce({**config, "message.timeout.ms": 3_000}, "secured-never", [b"x"])
    assert reports and reports[0] is not None
    assert any(error.code() == KafkaError._AUTHENTICATION for error in errors)
    admin = AdminClient(secured.client("PLAINTEXT"))
    assert "secured-never" not in admin.list_topics(timeout=ADMIN_TIMEOUT_S).topics


def test_a_user_whose_credential_is_deleted_can_no_longer_authenticate(
    secured: SecuredBroker,
) -> None:
    create_users(secured, {"carol": "carol's"})
    config = secured.client("SASL_PLAINTEXT", **sasl("SCRAM-SHA-512", "carol", "carol's"))
    assert produce(config, "secured-carol", [b"before"]) == [None]
    admin = AdminClient(secured.client("PLAINTEXT"))
    deletions: list[Any] = [
        UserScramCredentialDeletion("carol", mechanism)
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    for future in admin.alter_user_scram_credentials(deletions).values():
        future.result(ADMIN_TIMEOUT_S)
    reports = produce(
        {**config, **ONE_ATTEMPT, "message.timeout.ms": 3_000}, "secured-carol", [b"after"]
    )
    assert reports and reports[0] is not None


def test_kafka_python_authenticates_with_scram_over_tls(secured: SecuredBroker) -> None:
    kafka = pytest.importorskip("kafka")
    context = ssl.create_default_context(cafile=str(secured.authority / "ca.pem"))
    settings = {
        "bootstrap_servers": secured.process.bootstrap_of("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "ssl_context": context,
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "bob",
        "sasl_plain_password": "bob's own",
    }
    producer = kafka.KafkaProducer(**settings)
    try:
        producer.send("secured-kafka-python", b"from kafka-python").get(timeout=30)
    finally:
        producer.close()
    consumer = kafka.KafkaConsumer(
        "secured-kafka-python", auto_offset_reset="earliest", consumer_timeout_ms=10_000, **settings
    )
    try:
        assert [message.value for message in consumer][:1] == [b"from kafka-python"]
    finally:
        consumer.close()


def raw_request(sock: socket.socket, api: Any, version: int, body: dict[str, Any]) -> Any:
    sock.sendall(bytes(encode_request(api, version, body, correlation_id=7, client_id="raw")))
    size_bytes = _receive_exactly(sock, 4)
    if not size_bytes:
        return None
    (size,) = struct.unpack(">i", size_bytes)
    return decode_response(api, version, _receive_exactly(sock, size))[1]


def _receive_exactly(sock: socket.socket, count: int) -> bytes:
    """``count`` bytes, or fewer when the broker closed the connection (a reset too: a
    request sent after the broker closed is answered with one)."""
    data = b""
    while len(data) < count:
        try:
            chunk = sock.recv(count - len(data))
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    return data


def test_a_request_before_authentication_closes_the_connection(secured: SecuredBroker) -> None:
    port = secured.process.listener_ports["SASL_PLAINTEXT"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        versions = raw_request(sock, API_VERSIONS, 0, {})
        assert versions["error_code"] == 0
        metadata = {"topics": None, "allow_auto_topic_creation": True}
        assert raw_request(sock, METADATA, 1, metadata) is None  # closed, not answered
    refusal = "Metadata refused: API key 3 came before the SASL handshake"
    # the broker may log the refusal just after the connection closed
    assert wait_until(lambda: refusal in secured.process.log_text(), LOG_TIMEOUT_S)


def test_an_oversized_frame_before_authentication_closes_the_connection(
    secured: SecuredBroker,
) -> None:
    port = secured.process.listener_ports["SASL_PLAINTEXT"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 10 * 1024 * 1024))
        assert sock.recv(1) == b""


def test_a_client_certificate_is_accepted_and_a_plaintext_client_is_not(
    secured: SecuredBroker,
) -> None:
    client = issue(secured.authority, "app-client", organization="apps")
    config = secured.client(
        "SSL",
        **{
            "ssl.certificate.location": str(client.certificate),
            "ssl.key.location": str(client.key),
        },
    )
    assert produce(config, "secured-mtls", [b"signed"]) == [None]
    port = secured.process.listener_ports["SSL"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        assert raw_request(sock, API_VERSIONS, 0, {}) is None  # not TLS: closed
    refusal = "TLS handshake with 127.0.0.1 on listener SSL failed"
    # the broker logs the refusal after it has closed the connection
    assert wait_until(lambda: refusal in secured.process.log_text(), LOG_TIMEOUT_S)


def test_an_address_that_keeps_failing_is_refused_for_a_while(tmp_path: Path) -> None:
    broker = start_secured(tmp_path, "failed.authentication.max.per.ip=3")
    try:
        create_users(broker, {"alice": PASSWORD})
        for _ in range(4):
            bad = broker.client("SASL_PLAINTEXT", **sasl("PLAIN", password="guess"))
            produce({**bad, "message.timeout.ms": 2_000, "retries": 0}, "t", [b"x"])
        good = broker.client("SASL_PLAINTEXT", **sasl("PLAIN"))
        reports = produce({**good, "message.timeout.ms": 3_000}, "refused-now", [b"x"])
        assert reports and reports[0] is not None
        assert wait_until(
            lambda: "too many failed authentications from 127.0.0.1" in broker.process.log_text(),
            LOG_TIMEOUT_S,
        )
    finally:
        broker.process.kill()


def test_credentials_survive_a_restart(tmp_path: Path) -> None:
    broker = start_secured(tmp_path)
    try:
        create_users(broker, {"dave": "dave's"})
        assert broker.process.stop() == 0
        broker.process.start()
        config = broker.client("SASL_SSL", **sasl("SCRAM-SHA-256", "dave", "dave's"))
        assert produce(config, "after-restart", [b"x"]) == [None]
    finally:
        broker.process.kill()


def test_sessions_re_authenticate_on_the_same_connection(tmp_path: Path) -> None:
    """With connections.max.reauth.ms, librdkafka authenticates again before the session
    ends (KIP-368) and goes on producing; the broker closes no connection for it."""
    broker = start_secured(tmp_path, "connections.max.reauth.ms=1500")
    try:
        create_users(broker, {"erin": "erin's"})
        config = broker.client("SASL_PLAINTEXT", **sasl("SCRAM-SHA-256", "erin", "erin's"))
        admin = AdminClient(broker.client("PLAINTEXT"))
        admin.create_topics([NewTopic("reauth", 1, 1)])["reauth"].result(ADMIN_TIMEOUT_S)
        reports: list[KafkaError | None] = []
        producer = Producer(config)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            producer.produce("reauth", b"x", on_delivery=lambda e, _m: reports.append(e))
            producer.flush(FLUSH_TIMEOUT_S)
            time.sleep(0.1)
        assert reports and all(error is None for error in reports)
        assert "expired without re-authentication" not in broker.process.log_text()
    finally:
        broker.process.kill()


def plain_login(sock: socket.socket, user: str, password: str) -> Any:
    handshake = raw_request(sock, SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert handshake["error_code"] == 0
    token = b"\x00" + user.encode() + b"\x00" + password.encode()
    return raw_request(sock, SASL_AUTHENTICATE, 1, {"auth_bytes": token})


def test_a_session_ends_unless_renewed_on_its_connection(tmp_path: Path) -> None:
    """The broker's side of KIP-368: the lifetime it announces, a renewal on the same
    connection as the same user, another user refused, and the close after the end."""
    broker = start_secured(tmp_path, "connections.max.reauth.ms=1000")
    metadata = {"topics": [], "allow_auto_topic_creation": False}
    try:
        create_users(broker, {"frank": "frank's", "grace": "grace's"})
        port = broker.process.listener_ports["SASL_PLAINTEXT"]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            answer = plain_login(sock, "frank", "frank's")
            assert answer["error_code"] == 0
            assert 0 < answer["session_lifetime_ms"] <= 1000
            time.sleep(0.6)
            assert plain_login(sock, "frank", "frank's")["error_code"] == 0
            time.sleep(0.6)  # past the first session's end, within the renewed one
            assert raw_request(sock, METADATA, 1, metadata) is not None
            time.sleep(1.1)
            assert raw_request(sock, METADATA, 1, metadata) is None
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            assert plain_login(sock, "frank", "frank's")["error_code"] == 0
            renewed_as_other = plain_login(sock, "grace", "grace's")
            assert renewed_as_other["error_code"] == KafkaError.SASL_AUTHENTICATION_FAILED
            assert "same user" in renewed_as_other["error_message"]
            assert raw_request(sock, METADATA, 1, metadata) is None
        assert wait_until(
            lambda: (
                "its SASL session expired without re-authentication" in broker.process.log_text()
            ),
            LOG_TIMEOUT_S,
        )
    finally:
        broker.process.kill()
