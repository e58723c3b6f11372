"""``platform produce``: one record per input line, placed as Java clients would place it.

Records go through a confluent-kafka ``Producer`` with librdkafka's
``murmur2_random`` partitioner, so a keyed record lands on the partition
the Java producer picks: ``(murmur2(key) & 0x7fffffff) % partitions``. A
line is ``value`` or, with a key separator, ``key<separator>value`` split at
the first separator; a line without the separator has no key. Line endings
(``\\n`` or ``\\r\\n``) are not part of the value.

Every record gets a delivery report. Failures are reported one line each
(the first :data:`FAILURES_SHOWN_MAX`) as they arrive, and the command
ends with :class:`DeliveryFailedError` when any record was not written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from eventplatform.tools.arguments import (
    ACKS_CHOICES,
    COMPRESSION_CHOICES,
    DELIVERY_TIMEOUT_S_DEFAULT,
    ClusterSettings,
)
from eventplatform.tools.errors import InvalidInputError, KafkaRequestError
from eventplatform.tools.kafka_clients import (
    client_settings,
    describe_error,
    kafka_error_of,
    translated_errors,
)

PARTITIONER = "murmur2_random"
LINGER_MS = 5
FAILURES_SHOWN_MAX = 10
QUEUE_FULL_WAIT_S = 0.1
FLUSH_MARGIN_S = 5.0
ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the partitioner decides

Report = Callable[[str], Any]


class DeliveryFailedError(KafkaRequestError):
    """Some records were not written; each was already reported on its own line."""


@dataclass(frozen=True)
class ProduceOptions:
    """How to produce: ``partition`` ``None`` lets the partitioner choose."""

    topic: str
    key_separator: bytes | None = None
    partition: int | None = None
    acks: str = "all"
    compression: str = "none"
    delivery_timeout_s: float = DELIVERY_TIMEOUT_S_DEFAULT


@dataclass
class DeliveryTally:
    """Delivery reports counted as they arrive; failure lines go to ``report``."""

    report: Report
    delivered: int = 0
    failed: int = 0
    failure_lines: list[str] = field(default_factory=list)

    def record_failure(self, line_number: int, reason: str) -> None:
        self.failed += 1
        if self.failed <= FAILURES_SHOWN_MAX:
            self.report(f"line {line_number} not delivered: {reason}")

    def on_delivery(self, line_number: int, error: KafkaError | None, _message: Message) -> None:
        if error is None:
            self.delivered += 1
        else:
            self.record_failure(line_number, describe_error(error))


def strip_line_ending(line: bytes) -> bytes:
    """``line`` without its trailing ``\\n`` or ``\\r\\n``."""
    if line.endswith(b"\r\n"):
        return line[:-2]
    if line.endswith(b"\n"):
        return line[:-1]
    return line


def split_line(line: bytes, key_separator: bytes | None) -> tuple[bytes | None, bytes]:
    """``(key, value)`` of one line; no separator given or found means no key."""
    if key_separator is None:
        return None, line
    key, separator, value = line.partition(key_separator)
    if not separator:
        return None, line
    return key, value


def producer_settings(cluster: ClusterSettings, options: ProduceOptions) -> dict[str, Any]:
    """librdkafka settings for ``options``; invalid choices are rejected here, not by librdkafka."""
    if options.acks not in ACKS_CHOICES:
        raise InvalidInputError(f"--acks must be one of {', '.join(ACKS_CHOICES)}")
    if options.compression not in COMPRESSION_CHOICES:
        raise InvalidInputError(f"--compression must be one of {', '.join(COMPRESSION_CHOICES)}")
    return {
        **client_settings(cluster),
        "partitioner": PARTITIONER,
        "acks": options.acks,
        "compression.type": options.compression,
        "linger.ms": LINGER_MS,
        "message.timeout.ms": int(options.delivery_timeout_s * 1000),
    }


def produce_lines(
    cluster: ClusterSettings,
    options: ProduceOptions,
    lines: Iterable[bytes],
    *,
    report: Report,
) -> int:
    """Produce one record per line and wait for every delivery report.

    Returns the number of records written. Raises :class:`KafkaRequestError`
    when the cluster cannot be reached or the partition does not exist,
    and :class:`DeliveryFailedError` when any record was not delivered.
    """
    producer = Producer(producer_settings(cluster, options))
    check_topic(producer, cluster, options)
    tally = DeliveryTally(report)
    sent = 0
    for line_number, line in enumerate(lines, start=1):
        key, value = split_line(strip_line_ending(line), options.key_separator)
        send(producer, options, tally, line_number=line_number, key=key, value=value)
        sent += 1
    undelivered = producer.flush(options.delivery_timeout_s + FLUSH_MARGIN_S)
    if undelivered:
        tally.failed += undelivered
        records = f"{undelivered} record{'' if undelivered == 1 else 's'}"
        report(f"{records} had no delivery report in time")
    if tally.failed:
        if tally.failed > FAILURES_SHOWN_MAX:
            report(f"... and {tally.failed - FAILURES_SHOWN_MAX} more failures")
        records = "record was" if sent == 1 else "records were"
        raise DeliveryFailedError(
            f"{tally.failed} of {sent} {records} not delivered to {options.topic}"
        )
    return tally.delivered


def check_topic(producer: Producer, cluster: ClusterSettings, options: ProduceOptions) -> None:
    """Fail early when the cluster is unreachable or ``--partition`` is not in the topic.

    The metadata request names no topic, so it creates none; an unknown
    topic is left to the cluster, which may create it on first produce.
    """
    with translated_errors(cluster, f"cannot produce to {options.topic!r}"):
        metadata = producer.list_topics(timeout=cluster.request_timeout_s)
    topic = metadata.topics.get(options.topic)
    if topic is None or options.partition is None:
        return
    if options.partition not in topic.partitions:
        raise InvalidInputError(
            f"topic {options.topic!r} has {len(topic.partitions)} partitions; "
            f"partition {options.partition} does not exist"
        )


def send(
    producer: Producer,
    options: ProduceOptions,
    tally: DeliveryTally,
    *,
    line_number: int,
    key: bytes | None,
    value: bytes,
) -> None:
    """Queue one record, waiting while librdkafka's queue is full (bounded by the timeout)."""
    deadline = time.monotonic() + options.delivery_timeout_s
    partition = ANY_PARTITION if options.partition is None else options.partition
    while True:
        try:
            producer.produce(
                options.topic,
                value=value,
                key=key,
                partition=partition,
                on_delivery=lambda error, message: tally.on_delivery(line_number, error, message),
            )
        except BufferError:
            if time.monotonic() > deadline:
                tally.record_failure(line_number, "the producer queue stayed full")
                return
            producer.poll(QUEUE_FULL_WAIT_S)
            continue
        except KafkaException as exception:
            error = kafka_error_of(exception)
            reason = str(exception) if error is None else describe_error(error)
            tally.record_failure(line_number, reason)
        producer.poll(0)
        return
