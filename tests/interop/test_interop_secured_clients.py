"""Four Kafka clients reach a secured broker two ways, and are refused clearly when wrong.

One broker serves a SASL_SSL listener (SCRAM-SHA-512) and an SSL listener with
``ssl.client.auth=required`` (mutual TLS: the principal is the certificate's
subject), both with a certificate from the development CA. confluent-kafka,
kafka-python, aiokafka and kcat each produce, consume in a consumer group and make
an admin call, through each listener. A wrong password, an expired client
certificate and a plaintext client on a TLS port are refused with an error the
client shows and a line in the broker's log.

Every client wait is bounded: polls, flushes, admin futures and kcat runs.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiokafka
import aiokafka.admin
import aiokafka.helpers
import kafka
import kafka.admin
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from eventplatform.dev_certificates import Issued, issue, make_authority
from eventplatform.testing import BrokerProcess

KCAT = shutil.which("kcat") or "/usr/bin/kcat"  # CI installs it: a missing kcat fails
TIMEOUT_S = 30.0
REFUSAL_TIMEOUT_S = 10.0
"""How long a refused client may take to say so."""
RECORDS = 20
USER = "billing"
PASSWORD = "scram over tls, never logged"
MECHANISM = "SCRAM-SHA-512"
WAYS_IN = ("sasl_ssl", "mtls")
KCAT_SASL_DEFECT = pytest.mark.xfail(
    strict=True,
    reason=(
        "client defect: librdkafka before 2.6.1 (kcat 1.7.1 in Debian bundles 2.0.2) "
        "repeats its nonce in the SCRAM client-final message, which this broker refuses "
        "('the nonce does not match') as Kafka 4.x does"
    ),
)


@dataclass(frozen=True, slots=True)
class SecuredDeployment:
    process: BrokerProcess
    authority: Path
    client_certificate: Issued
    """The mutual TLS clients' identity: ``User:CN=billing-service,O=billing``."""
    """Carried by the SASL_SSL clients, whose identity is their SCRAM user; see
    :func:`test_a_sasl_ssl_client_needs_no_certificate`."""

    @property
    def ca_file(self) -> str:
        return str(self.authority / "ca.pem")

    def log_since(self, mark: int) -> str:
        return "".join(self.process.output[mark:])

    def librdkafka(
        self,
        way_in: str,
        *,
        password: str = PASSWORD,
        certificate: Issued | None = None,
    ) -> dict[str, str]:
        """librdkafka properties (confluent-kafka's and kcat's ``-X``) for ``way_in``."""
        if way_in == "sasl_ssl":  # SCRAM alone: no certificate (KIP-684)
            settings = {
                "bootstrap.servers": self.process.bootstrap_of("SASL_SSL"),
                "security.protocol": "SASL_SSL",
                "sasl.mechanisms": MECHANISM,
                "sasl.username": USER,
                "sasl.password": password,
            }
            if certificate is not None:
                settings["ssl.certificate.location"] = str(certificate.certificate)
                settings["ssl.key.location"] = str(certificate.key)
            return {**settings, "ssl.ca.location": self.ca_file}
        certificate = certificate or self.client_certificate
        return {
            "bootstrap.servers": self.process.bootstrap_of("SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": self.ca_file,
            "ssl.certificate.location": str(certificate.certificate),
            "ssl.key.location": str(certificate.key),
        }

    def kafka_python(self, way_in: str) -> dict[str, Any]:
        """kafka-python's and aiokafka's keyword arguments (aiokafka takes an
        ``ssl_context`` instead of the three file names)."""
        if way_in == "sasl_ssl":
            return {
                "bootstrap_servers": self.process.bootstrap_of("SASL_SSL"),
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": MECHANISM,
                "sasl_plain_username": USER,
                "sasl_plain_password": PASSWORD,
                "ssl_cafile": self.ca_file,
            }
        return {
            "bootstrap_servers": self.process.bootstrap_of("SSL"),
            "security_protocol": "SSL",
            "ssl_cafile": self.ca_file,
            "ssl_certfile": str(self.client_certificate.certificate),
            "ssl_keyfile": str(self.client_certificate.key),
        }

    def aiokafka(self, way_in: str) -> dict[str, Any]:
        settings = self.kafka_python(way_in)
        settings["ssl_context"] = aiokafka.helpers.create_ssl_context(
            cafile=settings.pop("ssl_cafile"),
            certfile=settings.pop("ssl_certfile", None),
            keyfile=settings.pop("ssl_keyfile", None),
        )
        return settings


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredDeployment]:
    directory = tmp_path_factory.mktemp("secured-clients")
    certificates = directory / "certificates"
    make_authority(certificates)
    server = issue(certificates, "broker", hosts=("127.0.0.1", "localhost"))
    process = BrokerProcess(
        directory / "data",
        [
            "listeners=SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
            f"sasl.enabled.mechanisms={MECHANISM}",
            f"ssl.keystore.location={server.keystore}",
            f"ssl.truststore.location={certificates / 'ca.pem'}",
            "ssl.client.auth=required",
            "connection.failed.authentication.delay.ms=10",
            "num.partitions=2",
            "group.initial.rebalance.delay.ms=0",
        ],
    ).start()
    try:
        secured = SecuredDeployment(
            process,
            certificates,
            client_certificate=issue(certificates, "billing-service", organization="billing"),
        )
        create_user(secured)
        yield secured
        assert process.process is not None and process.process.poll() is None, (
            f"the broker exited during the module:\n{process.log_text()[-4000:]}"
        )
    finally:
        process.kill()


def create_user(deployment: SecuredDeployment) -> None:
    """The SCRAM user, made with AlterUserScramCredentials by a mutual TLS client."""
    admin = AdminClient(deployment.librdkafka("mtls"))
    upsertion = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()
    )
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(TIMEOUT_S)


def values_for(client: str, way_in: str) -> list[bytes]:
    return [f"{client} over {way_in}: record {n}".encode() for n in range(RECORDS)]


# confluent-kafka


@pytest.mark.parametrize("way_in", WAYS_IN)
def test_confluent_kafka_produces_consumes_in_a_group_and_administers(
    deployment: SecuredDeployment, way_in: str
) -> None:
    config = deployment.librdkafka(way_in)
    topic = f"confluent-{way_in}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(TIMEOUT_S)
    assert topic in admin.list_topics(timeout=TIMEOUT_S).topics
    resource = ConfigResource(ResourceType.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert described["cleanup.policy"].value == "delete"

    values = values_for("confluent", way_in)
    reports: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 20_000})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda error, _m: reports.append(error))
    assert producer.flush(TIMEOUT_S) == 0
    assert reports == [None] * RECORDS

    group = f"{topic}-readers"
    consumer = Consumer(
        {
            **config,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    received: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while len(received) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                received.append(message.value())
        consumer.commit(asynchronous=False)
        committed = consumer.committed(
            [TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=TIMEOUT_S
        )
    finally:
        consumer.close()
    assert sorted(received) == sorted(values)
    # Records without a key may all stick to one partition (librdkafka's sticky
    # partitioner); a partition that received none has no offset to commit (-1001).
    assert sum(max(partition.offset, 0) for partition in committed) == RECORDS


# kafka-python


@pytest.mark.parametrize("way_in", WAYS_IN)
def test_kafka_python_produces_consumes_in_a_group_and_administers(
    deployment: SecuredDeployment, way_in: str
) -> None:
    settings = deployment.kafka_python(way_in)
    topic = f"kafka-python-{way_in}"
    admin = kafka.admin.KafkaAdminClient(request_timeout_ms=20_000, **settings)
    try:
        admin.create_topics([kafka.admin.NewTopic(topic, 2, 1)], timeout_ms=20_000)
        assert topic in admin.list_topics()
    finally:
        admin.close()

    values = values_for("kafka-python", way_in)
    producer = kafka.KafkaProducer(request_timeout_ms=20_000, **settings)
    try:
        futures = [producer.send(topic, value) for value in values]
        producer.flush(timeout=TIMEOUT_S)
        assert all(future.get(timeout=TIMEOUT_S).topic == topic for future in futures)
    finally:
        producer.close(timeout=TIMEOUT_S)

    consumer = kafka.KafkaConsumer(
        topic,
        group_id=f"{topic}-readers",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **settings,
    )
    received: list[bytes] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(received) < RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                received += [record.value for record in records]
        consumer.commit()
        committed = [
            consumer.committed(kafka.TopicPartition(topic, partition)) or 0 for partition in (0, 1)
        ]
    finally:
        consumer.close()
    assert sorted(received) == sorted(values)
    assert sum(committed) == RECORDS


# aiokafka


@pytest.mark.parametrize("way_in", WAYS_IN)
def test_aiokafka_produces_consumes_in_a_group_and_administers(
    deployment: SecuredDeployment, way_in: str
) -> None:
    topic = f"aiokafka-{way_in}"
    values = values_for("aiokafka", way_in)
    received, committed, cluster = asyncio.run(
        asyncio.wait_for(aiokafka_round_trip(deployment.aiokafka(way_in), topic, values), 60)
    )
    assert [broker["port"] for broker in cluster["brokers"]] == [
        deployment.process.listener_ports["SASL_SSL" if way_in == "sasl_ssl" else "SSL"]
    ]
    assert sorted(received) == sorted(values)
    assert committed == RECORDS


async def aiokafka_round_trip(
    settings: dict[str, Any], topic: str, values: list[bytes]
) -> tuple[list[bytes], int, dict[str, Any]]:
    """Create ``topic``, describe the cluster, produce ``values`` and read them back in a
    group; the records read, the offsets committed, and the cluster description."""
    admin = aiokafka.admin.AIOKafkaAdminClient(**settings)
    await admin.start()
    try:
        await admin.create_topics([aiokafka.admin.NewTopic(topic, 2, 1)])
        cluster = await admin.describe_cluster()
    finally:
        await admin.close()

    producer = aiokafka.AIOKafkaProducer(**settings)
    await producer.start()
    try:
        await asyncio.gather(*[await producer.send(topic, value) for value in values])
    finally:
        await producer.stop()

    consumer = aiokafka.AIOKafkaConsumer(
        topic,
        group_id=f"{topic}-readers",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **settings,
    )
    await consumer.start()
    received: list[bytes] = []
    try:
        while len(received) < len(values):
            for records in (await consumer.getmany(timeout_ms=500)).values():
                received += [record.value for record in records if record.value is not None]
        await consumer.commit()
        committed = [
            await consumer.committed(aiokafka.TopicPartition(topic, partition)) or 0
            for partition in (0, 1)
        ]
    finally:
        await consumer.stop()
    return received, sum(committed), cluster


# kcat


def kcat(
    config: dict[str, str], *arguments: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """One bounded kcat run with ``config`` as ``-b`` and ``-X`` options."""
    options = ["-b", config["bootstrap.servers"]]
    for key, value in config.items():
        if key != "bootstrap.servers":
            options += ["-X", f"{key}={value}"]
    return subprocess.run(
        [KCAT, *options, *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def kcat_ok(config: dict[str, str], *arguments: str, stdin: str | None = None) -> str:
    completed = kcat(config, *arguments, stdin=stdin)
    assert completed.returncode == 0, f"kcat {arguments} failed:\n{completed.stderr}"
    return completed.stdout


@pytest.mark.parametrize("way_in", [pytest.param("sasl_ssl", marks=KCAT_SASL_DEFECT), "mtls"])
def test_kcat_produces_consumes_in_a_group_and_lists_metadata(
    deployment: SecuredDeployment, way_in: str
) -> None:
    config = deployment.librdkafka(way_in)
    topic = f"kcat-{way_in}"
    values = [value.decode() for value in values_for("kcat", way_in)]
    kcat_ok(config, "-P", "-t", topic, stdin="\n".join(values) + "\n")

    metadata = json.loads(kcat_ok(config, "-L", "-J", "-t", topic))
    assert [broker["name"] for broker in metadata["brokers"]] == [config["bootstrap.servers"]]
    (described,) = metadata["topics"]
    assert (described["topic"], len(described["partitions"])) == (topic, 2)

    output = kcat_ok(
        config,
        "-G",
        f"{topic}-readers",
        "-X",
        "auto.offset.reset=earliest",
        "-c",
        str(RECORDS),
        "-e",
        "-f",
        "%s\n",
        topic,
    )
    assert sorted(output.splitlines()) == sorted(values)


# Refusals


@dataclass(frozen=True, slots=True)
class Refusal:
    """What a refused librdkafka client told its user: the errors given to ``error_cb``
    and the lines it logged (librdkafka's stderr unless a logger is set)."""

    errors: list[KafkaError]
    log_lines: list[str]

    def codes(self) -> set[int]:
        return {error.code() for error in self.errors}

    def says(self, text: str) -> bool:
        return any(text in line for line in self.log_lines) or any(
            text in error.str() for error in self.errors
        )

    def __str__(self) -> str:
        return "\n".join([*(error.str() for error in self.errors), *self.log_lines])


class _Lines(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def refusal(
    config: dict[str, str], *expected: str, timeout_s: float = REFUSAL_TIMEOUT_S
) -> Refusal:
    """Run a producer with ``config`` until what it reports says each of ``expected``,
    for ``timeout_s`` at most; what it reported by then."""
    found = Refusal([], [])
    logger = logging.getLogger(f"refused-client-{time.monotonic_ns()}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(_Lines(found.log_lines))
    producer = Producer(
        {
            **config,
            "message.timeout.ms": int(REFUSAL_TIMEOUT_S * 1000),
            "error_cb": found.errors.append,
            "logger": logger,
        }
    )
    producer.produce(NEVER_WRITTEN, b"refused")
    deadline = time.monotonic() + timeout_s
    while not all(map(found.says, expected)) and time.monotonic() < deadline:
        producer.poll(0.1)
    settle = time.monotonic() + ERROR_CALLBACK_SETTLE_S
    while time.monotonic() < settle:  # its error callback may come after the log line
        producer.poll(0.1)
    producer.purge()
    producer.flush(1)
    return found


def wait_for_log(deployment: SecuredDeployment, mark: int, text: str) -> str:
    """The broker's log since ``mark`` once it holds ``text``; fails after a while."""
    deadline = time.monotonic() + REFUSAL_TIMEOUT_S
    while text not in deployment.log_since(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    log = deployment.log_since(mark)
    assert text in log, f"no {text!r} in the broker's log:\n{log}"
    return log


ERROR_CALLBACK_SETTLE_S = 0.5
WRONG_PASSWORD = "not the password"
NEVER_WRITTEN = "never-written"


def test_a_wrong_password_is_refused_as_an_authentication_failure(
    deployment: SecuredDeployment,
) -> None:
    mark = len(deployment.process.output)
    expected = f"Authentication failed: invalid credentials with SASL mechanism {MECHANISM}"
    refused = refusal(deployment.librdkafka("sasl_ssl", password=WRONG_PASSWORD), expected)
    assert KafkaError._AUTHENTICATION in refused.codes(), str(refused)
    assert refused.says(f"SASL authentication error: {expected}"), str(refused)
    wait_for_log(deployment, mark, f"from 127.0.0.1: {expected}")
    assert WRONG_PASSWORD not in deployment.log_since(mark)
    admin = AdminClient(deployment.librdkafka("mtls"))
    assert NEVER_WRITTEN not in admin.list_topics(timeout=TIMEOUT_S).topics


@KCAT_SASL_DEFECT
def test_kcat_with_a_wrong_password_exits_with_the_authentication_failure(
    deployment: SecuredDeployment,
) -> None:
    config = deployment.librdkafka("sasl_ssl", password=WRONG_PASSWORD)
    completed = kcat(config, "-L", "-m", "2")
    assert completed.returncode != 0
    assert "Authentication failed: invalid credentials" in completed.stderr, completed.stderr


@pytest.fixture(scope="module")
def expired_certificate(deployment: SecuredDeployment) -> Issued:
    yesterday = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    return issue(deployment.authority, "expired-service", not_valid_after=yesterday)


def test_an_expired_client_certificate_fails_the_tls_handshake(
    deployment: SecuredDeployment, expired_certificate: Issued
) -> None:
    mark = len(deployment.process.output)
    config = deployment.librdkafka("mtls", certificate=expired_certificate)
    connection = f"ssl://{config['bootstrap.servers']}/bootstrap: "
    refused = refusal(config, "brokers are down", connection)
    assert KafkaError._ALL_BROKERS_DOWN in refused.codes(), str(refused)
    assert refused.says(connection), str(refused)
    log = wait_for_log(deployment, mark, "TLS handshake with 127.0.0.1 on listener SSL failed")
    assert "certificate verify failed: certificate has expired" in log


def test_an_expired_client_certificate_is_named_to_the_client(
    deployment: SecuredDeployment, expired_certificate: Issued
) -> None:
    config = deployment.librdkafka("mtls", certificate=expired_certificate)
    refused = refusal(config, "alert certificate expired", timeout_s=3)
    assert refused.says("alert certificate expired"), str(refused)


def test_kcat_with_an_expired_certificate_cannot_connect(
    deployment: SecuredDeployment, expired_certificate: Issued
) -> None:
    mark = len(deployment.process.output)
    config = deployment.librdkafka("mtls", certificate=expired_certificate)
    completed = kcat(config, "-L", "-m", "2")
    assert completed.returncode != 0
    assert "Failed to acquire metadata" in completed.stderr, completed.stderr
    log = wait_for_log(deployment, mark, "TLS handshake with 127.0.0.1 on listener SSL failed")
    assert "certificate has expired" in log


PLAINTEXT_HINT = "incorrect security.protocol configuration (connecting to a SSL listener?)"
"""What librdkafka 2.0 (kcat's) adds when a plaintext client is cut off at its first
request; librdkafka 2.16 (confluent-kafka's) reports the disconnection alone."""


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_a_plaintext_client_on_a_tls_port_is_cut_off_at_once(
    deployment: SecuredDeployment, listener: str
) -> None:
    mark = len(deployment.process.output)
    bootstrap = deployment.process.bootstrap_of(listener)
    started = time.monotonic()
    disconnected = f"{bootstrap}/bootstrap: Disconnected: connection closed by peer"
    refused = refusal(
        {"bootstrap.servers": bootstrap, "security.protocol": "PLAINTEXT"},
        "brokers are down",
        disconnected,
    )
    assert time.monotonic() - started < 3, "the refusal took a while"
    assert KafkaError._ALL_BROKERS_DOWN in refused.codes(), str(refused)
    assert refused.says(disconnected), str(refused)
    assert refused.says("in state APIVERSION_QUERY"), str(refused)
    log = wait_for_log(
        deployment, mark, f"TLS handshake with 127.0.0.1 on listener {listener} failed"
    )
    assert "WRONG_VERSION_NUMBER" in log


def test_kcat_plaintext_on_a_tls_port_exits_with_the_hint(deployment: SecuredDeployment) -> None:
    mark = len(deployment.process.output)
    config = {"bootstrap.servers": deployment.process.bootstrap_of("SSL")}
    completed = kcat(config, "-L", "-m", "2")
    assert completed.returncode != 0
    assert PLAINTEXT_HINT in completed.stderr, completed.stderr
    wait_for_log(deployment, mark, "TLS handshake with 127.0.0.1 on listener SSL failed")


# A divergence from Kafka


def test_a_sasl_ssl_client_needs_no_certificate(deployment: SecuredDeployment) -> None:
    """As with Kafka (KIP-684), SCRAM alone is a SASL_SSL client's identity, whatever the
    broker-wide ssl.client.auth demands of SSL listeners."""
    config = deployment.librdkafka("sasl_ssl")
    assert "ssl.certificate.location" not in config
    admin = AdminClient(config)
    try:
        metadata = admin.list_topics(timeout=3)
    except KafkaException as exc:
        pytest.fail(f"a SASL_SSL client without a certificate was refused: {exc}")
    assert len(metadata.brokers) == 1
