"""kill -9 of a real broker process while confluent-kafka clients work against it.

The broker is killed mid-produce and started again on the same port and data
directory. Every record a producer was told is delivered must still be in the
log at the offset its delivery report named; producers reconnect on their own
and finish. Committed consumer-group offsets survive the kill, and a consumer
reconnects and resumes from them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from eventplatform.log.broker.dispatcher import HANDLER_MODULES
from eventplatform.log.storage.files import CLEAN_SHUTDOWN_FILE
from eventplatform.testing import BrokerProcess, running_broker, wait_until

TOPIC = "restart"
PARTITIONS = 2
RECORD_COUNT = 3_000
ACKED_BEFORE_KILL = 500
PAUSE_AT = 1_000
DOWN_TIME_S = 1.0
ADMIN_TIMEOUT_S = 30.0
DELIVERY_TIMEOUT_S = 90.0
CONSUME_TIMEOUT_S = 60.0
GROUP = "restart-group"
BASE_OVERRIDES = (
    "offsets.topic.num.partitions=1",
    "group.initial.rebalance.delay.ms=0",
)
GROUP_API_KEYS = {8, 9, 10, 11, 12, 13, 14}
GROUPS_SERVED = {module.API.key for module in HANDLER_MODULES} >= GROUP_API_KEYS
CLIENT_RECONNECT = {
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "retry.backoff.ms": 100,
}


@dataclass
class Delivery:
    value: bytes
    partition: int
    offset: int


@dataclass
class ProducerRun:
    """A producer thread writing ``RECORD_COUNT`` values; reports arrive as they come."""

    bootstrap: str
    config: dict[str, Any]
    delivered: list[Delivery] = field(default_factory=list)
    failed: list[tuple[bytes, KafkaError]] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)
    paused: threading.Event = field(default_factory=threading.Event)
    resume: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:
            self.error = exc
        finally:
            self.finished.set()

    def _produce(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "linger.ms": 2,
                "batch.num.messages": 50,
                "message.timeout.ms": int(DELIVERY_TIMEOUT_S * 1000),
                **CLIENT_RECONNECT,
                **self.config,
            }
        )

        def on_delivery(error: KafkaError | None, message: Message) -> None:
            if error is None:
                self.delivered.append(
                    Delivery(message.value(), message.partition(), message.offset())
                )
            else:
                self.failed.append((message.value(), error))

        for index in range(RECORD_COUNT):
            if index == PAUSE_AT:
                # Hold here until the test is about to kill the broker, so the kill
                # lands with most records still to come, however slow the machine.
                self.paused.set()
                resume_by = time.monotonic() + 60
                while not self.resume.is_set() and time.monotonic() < resume_by:
                    producer.poll(0.01)  # delivery reports arrive only while polling
            # A steady trickle, so the kill lands while batches are in flight.
            producer.produce(
                TOPIC, key=b"%d" % index, value=b"value-%05d" % index, on_delivery=on_delivery
            )
            producer.poll(0.0005 if index % 10 else 0.002)
        deadline = time.monotonic() + DELIVERY_TIMEOUT_S
        while producer.flush(0.5) > 0 and time.monotonic() < deadline:
            pass
        assert producer.flush(0) == 0, "the producer never delivered everything"

    @property
    def reported(self) -> int:
        return len(self.delivered) + len(self.failed)


def create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)],
        operation_timeout=ADMIN_TIMEOUT_S,
    )
    futures[TOPIC].result(timeout=ADMIN_TIMEOUT_S)


def read_log(bootstrap: str, expected: int) -> dict[tuple[int, int], bytes]:
    """Every record of the topic as {(partition, offset): value}, read from the beginning."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "restart-reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, index, OFFSET_BEGINNING) for index in range(PARTITIONS)])
    records: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    quiet_polls = 0
    try:
        while time.monotonic() < deadline and quiet_polls < 10:
            message = consumer.poll(0.2)
            if message is None:
                quiet_polls = quiet_polls + 1 if len(records) >= expected else 0
                continue
            assert message.error() is None, message.error()
            records[(message.partition(), message.offset())] = message.value()
    finally:
        consumer.close()
    return records


def kill_and_restart(broker: BrokerProcess) -> None:
    port = broker.port
    broker.kill()
    assert not (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
    time.sleep(DOWN_TIME_S)
    broker.restart()
    assert broker.port == port
    assert broker.process is not None and broker.process.poll() is None, broker.log_text()[-3000:]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "broker"


@pytest.mark.parametrize(
    ("producer_config", "overrides"),
    [
        ({"acks": "all", "enable.idempotence": True}, ()),
        ({"acks": "1", "enable.idempotence": False}, ("log.flush.interval.messages=1",)),
    ],
    ids=["acks-all-idempotent", "acks-1-flush-every-message"],
)
def test_acknowledged_records_survive_a_kill_mid_produce(
    data_dir: Path, producer_config: dict[str, Any], overrides: tuple[str, ...]
) -> None:
    with running_broker(data_dir, (*BASE_OVERRIDES, *overrides)) as broker:
        create_topic(broker.bootstrap)
        run = ProducerRun(broker.bootstrap, producer_config)
        thread = run.start()
        assert run.paused.wait(60), "no progress"
        assert wait_until(lambda: run.reported >= ACKED_BEFORE_KILL, 60), "no progress"
        acked_before_kill = len(run.delivered)
        run.resume.set()
        assert acked_before_kill < RECORD_COUNT, "the kill must land mid-produce"
        kill_and_restart(broker)
        assert run.finished.wait(DELIVERY_TIMEOUT_S + 30)
        thread.join(5)
        assert run.error is None, run.error
        assert "unclean" in broker.log_text()

        assert run.failed == []
        assert sorted(delivery.value for delivery in run.delivered) == [
            b"value-%05d" % index for index in range(RECORD_COUNT)
        ]
        log = read_log(broker.bootstrap, RECORD_COUNT)
        missing = [
            delivery
            for delivery in run.delivered
            if log.get((delivery.partition, delivery.offset)) != delivery.value
        ]
        assert missing == []
        copies = Counter(log.values())
        assert set(copies) == {delivery.value for delivery in run.delivered}
        if producer_config["enable.idempotence"]:
            assert max(copies.values()) == 1, "an idempotent producer wrote a record twice"
        for partition in range(PARTITIONS):
            offsets = sorted(offset for index, offset in log if index == partition)
            assert offsets == list(range(len(offsets))), "the log has a hole"


# ---------------------------------------------------------------- consumer groups


def group_consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6_000,
            "heartbeat.interval.ms": 500,
            **CLIENT_RECONNECT,
        }
    )


def consume(consumer: Consumer, count: int, timeout_s: float) -> list[Message]:
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(messages) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error() is not None:
            assert message.error().retriable() or not message.error().fatal(), message.error()
            continue
        messages.append(message)
    return messages


def produce_values(bootstrap: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **CLIENT_RECONNECT})
    for value in values:
        producer.produce(TOPIC, value=value)
        producer.poll(0)
    assert producer.flush(ADMIN_TIMEOUT_S) == 0


def committed_positions(consumer: Consumer) -> dict[int, int]:
    partitions = [TopicPartition(TOPIC, index) for index in range(PARTITIONS)]
    return {entry.partition: entry.offset for entry in consumer.committed(partitions, timeout=10)}


def positions_after(messages: list[Message]) -> dict[int, int]:
    """The next offset of every partition read in ``messages``."""
    after: dict[int, int] = {}
    for message in messages:
        after[message.partition()] = max(after.get(message.partition(), 0), message.offset() + 1)
    return after


def assert_committed_after(consumer: Consumer, messages: list[Message]) -> None:
    """Committed offsets are the positions after ``messages``.

    A partition none of ``messages`` came from has either no position yet (the
    commit leaves it alone: OFFSET_INVALID) or, once fetched, its start (0).
    """
    committed = committed_positions(consumer)
    expected = positions_after(messages)
    for partition in range(PARTITIONS):
        allowed = {expected[partition]} if partition in expected else {OFFSET_INVALID, 0}
        assert committed[partition] in allowed, (partition, committed, expected)


@pytest.mark.xfail(
    not GROUPS_SERVED,
    reason="the broker does not serve the consumer-group APIs yet",
    strict=True,
)
def test_committed_group_offsets_survive_a_kill_and_consumers_resume(data_dir: Path) -> None:
    assert GROUPS_SERVED, "JoinGroup, SyncGroup, OffsetCommit and friends are not served"
    first = [b"first-%03d" % index for index in range(200)]
    second = [b"second-%03d" % index for index in range(50)]
    with running_broker(data_dir, BASE_OVERRIDES) as broker:
        create_topic(broker.bootstrap)
        produce_values(broker.bootstrap, first)

        consumer = group_consumer(broker.bootstrap)
        consumer.subscribe([TOPIC])
        try:
            before = consume(consumer, 120, CONSUME_TIMEOUT_S)
            assert len(before) == 120
            consumer.commit(asynchronous=False)
            assert_committed_after(consumer, before)

            kill_and_restart(broker)

            # The same consumer reconnects by itself and carries on from where it was.
            after = consume(consumer, len(first) - len(before), CONSUME_TIMEOUT_S)
            values = [message.value() for message in before + after]
            assert Counter(values) == Counter(first)
            consumer.commit(asynchronous=False)
            assert_committed_after(consumer, before + after)
        finally:
            consumer.close()

        kill_and_restart(broker)
        produce_values(broker.bootstrap, second)
        # A new member of the group starts from the committed offsets, not from the start.
        consumer = group_consumer(broker.bootstrap)
        consumer.subscribe([TOPIC])
        try:
            resumed = consume(consumer, len(second), CONSUME_TIMEOUT_S)
            assert sorted(message.value() for message in resumed) == second
            assert consume(consumer, 1, 2.0) == []
        finally:
            consumer.close()
