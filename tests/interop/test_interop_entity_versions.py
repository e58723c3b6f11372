"""Conditional appends from stock clients: confluent-kafka and kafka-python (plain and
idempotent) and kcat,
against one broker and a 3-node cluster. A record with ``eventplatform.expected.version``
is appended only at its entity's version; a refused one fails with INVALID_RECORD, and
the producer goes on working."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence

import kafka.errors
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka import KafkaProducer

from eventplatform.log.extensions import ENTITY_VERSIONS_CONFIG, EXPECTED_VERSION_HEADER
from eventplatform.testing import BrokerProcess

VERSIONED = {ENTITY_VERSIONS_CONFIG: "true"}
FLUSH_TIMEOUT_S = 30.0
KCAT_TIMEOUT_S = 30.0
KCAT = shutil.which("kcat") or "/usr/bin/kcat"  # CI installs it: a missing kcat fails

Outcome = tuple[bytes, int | None]  # the value, and the delivery error code (None: delivered)


def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[bytes, bytes, int | None]],
    **settings: object,
) -> list[Outcome]:
    """Produce ``(key, value, expected version or None)`` to partition 0, in order, one
    request at a time; each record's value and delivery error code."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **settings})
    outcomes: list[Outcome] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        outcomes.append((message.value() or b"", None if error is None else error.code()))

    for key, value, expected in records:
        headers = [] if expected is None else [(EXPECTED_VERSION_HEADER, str(expected).encode())]
        producer.produce(topic, value, key, partition=0, headers=headers, on_delivery=delivered)
        assert producer.flush(FLUSH_TIMEOUT_S) == 0
    return outcomes


def read_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False}
    )
    high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=FLUSH_TIMEOUT_S)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    while len(values) < high:
        message = consumer.poll(FLUSH_TIMEOUT_S)
        assert message is not None and message.error() is None
        values.append(message.value() or b"")
    consumer.close()
    return values


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_confluent_kafka_appends_at_the_expected_version_only(
    broker: BrokerProcess, new_topic: Callable[..., str], idempotent: bool
) -> None:
    topic = new_topic(partitions=1, config=VERSIONED)
    outcomes = produce(
        broker.bootstrap,
        topic,
        [
            (b"acct", b"opened", 0),
            (b"acct", b"opened again", 0),
            (b"acct", b"deposit 10", 1),
            (b"acct", b"stale withdrawal", 1),
            (b"acct", b"plain note", None),
            (b"acct", b"withdraw 5", 3),
            (b"other", b"opened", 0),
        ],
        **{"enable.idempotence": idempotent},
    )
    assert outcomes == [
        (b"opened", None),
        (b"opened again", KafkaError.INVALID_RECORD),
        (b"deposit 10", None),
        (b"stale withdrawal", KafkaError.INVALID_RECORD),
        (b"plain note", None),
        (b"withdraw 5", None),
        (b"opened", None),
    ]
    assert read_values(broker.bootstrap, topic) == [
        b"opened",
        b"deposit 10",
        b"plain note",
        b"withdraw 5",
        b"opened",
    ]


def kafka_python_send(
    bootstrap: str, topic: str, records: Sequence[tuple[bytes, int]], **config: object
) -> list[tuple[bytes, str | None]]:
    """Send ``(value, expected version)`` of entity ``acct`` with kafka-python, one at a
    time; each value and the name of the error its send failed with (None: appended)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, **config)
    outcomes: list[tuple[bytes, str | None]] = []
    try:
        for value, expected in records:
            header = [(EXPECTED_VERSION_HEADER, str(expected).encode())]
            future = producer.send(topic, key=b"acct", value=value, headers=header, partition=0)
            try:
                future.get(timeout=FLUSH_TIMEOUT_S)
                outcomes.append((value, None))
            except kafka.errors.KafkaError as exc:
                outcomes.append((value, type(exc).__name__))
    finally:
        producer.close(timeout=FLUSH_TIMEOUT_S)
    return outcomes


def test_kafka_python_appends_at_the_expected_version_only(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """kafka-python sends the header as any other header; a refused record fails its
    future with InvalidRecordError, and a producer without idempotence (kafka-python
    3.0 turns it on by default) goes on."""
    topic = new_topic(partitions=1, config=VERSIONED)
    outcomes = kafka_python_send(
        broker.bootstrap,
        topic,
        [(b"opened", 0), (b"opened again", 0), (b"deposit 10", 1), (b"stale", 1), (b"w 5", 2)],
        enable_idempotence=False,
    )
    assert outcomes == [
        (b"opened", None),
        (b"opened again", "InvalidRecordError"),
        (b"deposit 10", None),
        (b"stale", "InvalidRecordError"),
        (b"w 5", None),
    ]
    assert read_values(broker.bootstrap, topic) == [b"opened", b"deposit 10", b"w 5"]


def test_kafka_python_idempotent_producer_stops_at_a_refusal_and_a_new_one_goes_on(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """kafka-python 3.0's idempotent producer (not transactional) takes every error it
    cannot retry as fatal: after a refusal it fails whatever it sends. The log holds
    nothing of those, and a new producer appends at the entity's version (as
    docs/entities.md tells kafka-python users)."""
    topic = new_topic(partitions=1, config=VERSIONED)
    first = kafka_python_send(
        broker.bootstrap,
        topic,
        [(b"opened", 0), (b"opened again", 0), (b"deposit 10", 1)],
        enable_idempotence=True,
    )
    assert [error for _, error in first[:2]] == [None, "InvalidRecordError"]
    assert first[2][1] is not None, "this client stops after a refusal"
    again = kafka_python_send(
        broker.bootstrap, topic, [(b"deposit 10", 1), (b"stale", 1)], enable_idempotence=True
    )
    assert again == [(b"deposit 10", None), (b"stale", "InvalidRecordError")]
    assert read_values(broker.bootstrap, topic) == [b"opened", b"deposit 10"]


def test_kcat_appends_at_the_expected_version_only(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=1, config=VERSIONED)

    def kcat(value: str, expected: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                KCAT, "-P", "-b", broker.bootstrap, "-t", topic, "-p", "0",
                "-k", "acct", "-H", f"{EXPECTED_VERSION_HEADER}={expected}",
            ],
            input=value,
            capture_output=True,
            text=True,
            timeout=KCAT_TIMEOUT_S,
            check=False,
        )  # fmt: skip

    assert kcat("opened", 0).returncode == 0
    refused = kcat("opened again", 0)
    assert refused.returncode == 1
    assert "Broker failed to validate record" in refused.stderr  # librdkafka's INVALID_RECORD
    assert kcat("deposit", 1).returncode == 0
    assert read_values(broker.bootstrap, topic) == [b"opened", b"deposit"]


def test_the_admin_api_cannot_add_partitions_to_a_topic_with_entity_versions(
    broker: BrokerProcess, new_topic: Callable[..., str], admin: AdminClient
) -> None:
    topic = new_topic(partitions=2, config=VERSIONED)
    futures = admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=FLUSH_TIMEOUT_S)
    with pytest.raises(KafkaException) as refused:
        futures[topic].result(timeout=FLUSH_TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert "keeps entity versions" in refused.value.args[0].str()
    metadata = admin.list_topics(topic, timeout=FLUSH_TIMEOUT_S)
    assert len(metadata.topics[topic].partitions) == 2


def test_a_refused_batch_among_pipelined_idempotent_batches(
    broker: BrokerProcess, new_topic: Callable[..., str]
) -> None:
    """An idempotent librdkafka producer keeps five one-record batches in flight; some of
    them expect a stale version and are refused. The batches behind a refused one reach
    the broker out of sequence; librdkafka then resends them under a new epoch. Every
    record it reports delivered is in the log once, in order, no refused record is, and
    the producer goes on working."""
    topic = new_topic(partitions=1, config=VERSIONED)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 0,
            "batch.num.messages": 1,
            "max.in.flight.requests.per.connection": 5,
        }
    )
    outcomes: dict[bytes, int | None] = {}

    def delivered(error: KafkaError | None, message: Message) -> None:
        outcomes[message.value() or b""] = None if error is None else error.code()

    sent = []
    for number in range(60):
        value = b"event %d" % number
        stale = number % 12 == 5
        headers = [(EXPECTED_VERSION_HEADER, b"0")] if stale else []  # only 0 is fresh
        producer.produce(topic, value, b"acct", partition=0, headers=headers, on_delivery=delivered)
        sent.append((value, stale))
        producer.poll(0)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    for value, stale in sent:
        expected = KafkaError.INVALID_RECORD if stale else None
        assert outcomes[value] == expected, (value, outcomes[value])
    delivered_values = [value for value, stale in sent if not stale]
    assert read_values(broker.bootstrap, topic) == delivered_values
    producer.produce(topic, b"afterwards", b"acct", partition=0, on_delivery=delivered)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    assert outcomes[b"afterwards"] is None
