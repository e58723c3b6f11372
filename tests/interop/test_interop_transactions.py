"""Transactions with confluent-kafka against a real broker and a 3-node cluster: a
committed transaction is read by read_committed consumers, an aborted one is not, the
last stable offset holds read_committed readers before an open transaction, offsets
sent to a transaction commit with it, and a producer restarted with the same
transactional id fences the old one and aborts what it left open."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from eventplatform.testing import BrokerProcess, LocalClusterBroker, wait_until

CONSUME_TIMEOUT_S = 30.0
TXN_TIMEOUT_S = 60.0


def producer(broker: BrokerProcess | LocalClusterBroker, tid: str) -> Producer:
    made = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": tid,
            "transaction.timeout.ms": 60_000,
            "linger.ms": 5,
        }
    )
    made.init_transactions(TXN_TIMEOUT_S)
    return made


def read(
    broker: BrokerProcess | LocalClusterBroker,
    topic: str,
    isolation: str,
    *,
    until: int,
    partitions: int = 1,
) -> list[bytes]:
    """Every value of ``topic`` a consumer of ``isolation`` reads from the start, until
    it has read ``until`` of them or reached the end."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    ended: set[int] = set()
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    try:
        while time.monotonic() < deadline and len(values) < until:
            message = consumer.poll(0.2)
            if message is None:
                if len(ended) == partitions:
                    break
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(message.partition())
                    continue
                raise KafkaException(message.error())
            ended.discard(message.partition())
            values.append(message.value())
        return values
    finally:
        consumer.close()


def test_committed_records_are_read_and_aborted_ones_are_not(
    broker: BrokerProcess | LocalClusterBroker, new_topic
) -> None:
    topic = new_topic(partitions=1)
    made = producer(broker, f"tx-{topic}")
    made.begin_transaction()
    for n in range(5):
        made.produce(topic, b"committed-%d" % n)
    made.commit_transaction(TXN_TIMEOUT_S)
    made.begin_transaction()
    for n in range(3):
        made.produce(topic, b"aborted-%d" % n)
    made.flush(TXN_TIMEOUT_S)
    made.abort_transaction(TXN_TIMEOUT_S)
    made.begin_transaction()
    made.produce(topic, b"after")
    made.commit_transaction(TXN_TIMEOUT_S)

    committed = read(broker, topic, "read_committed", until=6)
    assert committed == [b"committed-%d" % n for n in range(5)] + [b"after"]
    everything = read(broker, topic, "read_uncommitted", until=9)
    assert everything == (
        [b"committed-%d" % n for n in range(5)] + [b"aborted-%d" % n for n in range(3)] + [b"after"]
    )


def test_an_open_transaction_holds_read_committed_readers_at_its_start(
    broker: BrokerProcess | LocalClusterBroker, new_topic
) -> None:
    topic = new_topic(partitions=1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"before")
    plain.flush(30)
    made = producer(broker, f"tx-{topic}")
    made.begin_transaction()
    made.produce(topic, b"open")
    made.flush(30)
    plain.produce(topic, b"behind")
    plain.flush(30)
    for isolation, end in (("read_uncommitted", 3), ("read_committed", 1)):
        consumer = Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "lso", "isolation.level": isolation}
        )
        try:
            watermarks = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
            assert watermarks == (0, end)  # the high watermark, or the last stable offset
        finally:
            consumer.close()
    assert read(broker, topic, "read_committed", until=3) == [b"before"]
    made.commit_transaction(TXN_TIMEOUT_S)
    assert read(broker, topic, "read_committed", until=3) == [b"before", b"open", b"behind"]


def test_offsets_sent_to_a_transaction_commit_with_it(
    broker: BrokerProcess | LocalClusterBroker, new_topic
) -> None:
    source, sink = new_topic(partitions=1), new_topic(partitions=1)
    group = f"copier-{source}"
    made = producer(broker, f"tx-{source}")
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    )

    def committed() -> int:
        (found,) = consumer.committed([TopicPartition(sink, 0)], timeout=30)
        return int(found.offset)

    try:
        consumer.subscribe([sink])  # a member of the group, as copying consumers are
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment(), "the consumer never joined its group"
        for commit, offset in ((False, 3), (True, 7)):
            made.begin_transaction()
            made.produce(source, b"copied")
            offsets = [TopicPartition(sink, 0, offset)]
            made.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            if commit:
                made.commit_transaction(TXN_TIMEOUT_S)
            else:
                made.abort_transaction(TXN_TIMEOUT_S)
            # the markers follow EndTxn's answer: the group has the offsets soon after
            assert wait_until(lambda want=(7 if commit else -1001): committed() == want, 10)
            time.sleep(0.5)
            assert committed() == (7 if commit else -1001)
    finally:
        consumer.close()


def test_a_new_producer_of_the_id_fences_the_old_one_and_aborts_its_transaction(
    broker: BrokerProcess | LocalClusterBroker, new_topic
) -> None:
    topic = new_topic(partitions=1)
    tid = f"tx-{topic}"
    old = producer(broker, tid)
    old.begin_transaction()
    old.produce(topic, b"left-open")
    old.flush(30)
    new = producer(broker, tid)  # aborts the open transaction, raising the epoch
    new.begin_transaction()
    new.produce(topic, b"from-new")
    new.commit_transaction(TXN_TIMEOUT_S)
    old.produce(topic, b"zombie")
    with pytest.raises(KafkaException) as raised:
        old.commit_transaction(TXN_TIMEOUT_S)
    assert raised.value.args[0].fatal() or raised.value.args[0].code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    assert read(broker, topic, "read_committed", until=2) == [b"from-new"]
