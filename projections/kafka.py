"""The runner's log adapters over confluent-kafka: group consumption and reads by position.

These are the only projection modules that talk to the log; they work with
any Kafka-compatible cluster, secured as :mod:`eventplatform.client_config` says.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import confluent_kafka

from eventplatform.client_config import KafkaConnection, kafka_settings
from eventplatform.events import Position
from eventplatform.events.erasure import ErasedRecord
from eventplatform.events.wire import is_erased
from eventplatform.projections.caches import LogValue
from eventplatform.projections.errors import ProjectionError

READ_TIMEOUT_S = 30.0
SCAN_GAP_RECORDS = 500
SCAN_MESSAGES_MAX = 1000
"""Messages one call hands over while scanning."""
SCAN_WAIT_S = 0.01
"""How long one call waits to fill its messages while scanning: it hands over what
is there by then. A scan that ends near a partition's end would otherwise wait for
messages the log does not hold yet."""
# A point read must not sit out a long-poll fetch for data that is already there.
READER_FETCH_WAIT_MS = 10
POLL_S = 0.2
_NO_SUCH_PARTITION = frozenset(
    {
        confluent_kafka.KafkaError._UNKNOWN_PARTITION,
        confluent_kafka.KafkaError._UNKNOWN_TOPIC,
        confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)


_LEADER_GONE = frozenset(
    {
        confluent_kafka.KafkaError._DESTROY_BROKER,
        confluent_kafka.KafkaError._TRANSPORT,
        confluent_kafka.KafkaError._ALL_BROKERS_DOWN,
        confluent_kafka.KafkaError._UNKNOWN_PARTITION,  # no leader known for a moment
        confluent_kafka.KafkaError.NOT_LEADER_FOR_PARTITION,
        confluent_kafka.KafkaError.LEADER_NOT_AVAILABLE,
        confluent_kafka.KafkaError.OFFSET_NOT_AVAILABLE,  # a new leader's HW catching up
    }
)
"""Failures of a request to a partition's leader that died; another try finds the next.
(log_ends asks only for partitions the metadata lists, so an unknown one is leaderless.)"""


class LogReadError(ProjectionError):
    """Records a correction needs could not be read back from the log."""


def log_ends(
    bootstrap: KafkaConnection, topics: Sequence[str], timeout_s: float = READ_TIMEOUT_S
) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's log start and end offsets, for the given topics, asked within
    ``timeout_s`` in all; a KafkaException when the cluster does not answer in time."""
    deadline = time.monotonic() + timeout_s
    consumer = confluent_kafka.Consumer(
        {**kafka_settings(bootstrap), "group.id": "eventplatform.status"}
    )
    try:
        metadata = consumer.list_topics(timeout=timeout_s)
        ends: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                continue
            for partition in described.partitions:
                tp = confluent_kafka.TopicPartition(topic, partition)
                watermarks = _watermarks(consumer, tp, deadline)
                if watermarks is not None:
                    ends[(topic, partition)] = (watermarks[0], watermarks[1])
        return ends
    finally:
        consumer.close()


def _watermarks(
    consumer: confluent_kafka.Consumer, partition: confluent_kafka.TopicPartition, deadline: float
) -> tuple[int, int] | None:
    """A partition's low and high watermarks, asked again (until ``deadline``) while
    the answer is a failure a leader's death explains: librdkafka destroys its handle of
    a broker the cluster has fenced, failing the request that waited on it."""
    while True:
        try:
            found: tuple[int, int] | None = consumer.get_watermark_offsets(
                partition, timeout=max(deadline - time.monotonic(), POLL_S)
            )
            return found
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0]
            transient = error.retriable() or error.code() in _LEADER_GONE
            if not transient or time.monotonic() >= deadline:
                raise
        time.sleep(POLL_S)


class KafkaEventReader:
    """Reads record values at given positions, for corrections' recomputations.

    Offsets close together are read in one sequential scan; a gap wider than
    ``SCAN_GAP_RECORDS`` is crossed with a seek.
    """

    def __init__(self, bootstrap: KafkaConnection, config: Mapping[str, Any] | None = None) -> None:
        self._consumer = confluent_kafka.Consumer(
            {
                **kafka_settings(bootstrap),
                "group.id": "eventplatform.reader",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "fetch.wait.max.ms": READER_FETCH_WAIT_MS,
                **(config or {}),
            }
        )

    def close(self) -> None:
        self._consumer.close()

    def timestamps(
        self, offsets: Mapping[tuple[str, int], int], timeout_s: float = READ_TIMEOUT_S
    ) -> dict[tuple[str, int], int]:
        """The timestamp (ms) of the record at each partition's given offset, those read
        within ``timeout_s`` in all."""
        deadline = time.monotonic() + timeout_s
        stamps: dict[tuple[str, int], int] = {}
        for (topic, partition), offset in offsets.items():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._consumer.assign([confluent_kafka.TopicPartition(topic, partition, offset)])
            message = self._consumer.poll(left)
            if message is not None and message.error() is None:
                stamps[(topic, partition)] = message.timestamp()[1]
        self._consumer.unassign()
        return stamps

    def __call__(self, positions: Sequence[Position]) -> dict[Position, LogValue]:
        """The values at ``positions`` (those the log no longer or never held, and records
        without a value, are left out); an erased record is an ErasedRecord.

        Every partition is read at once, so their fetches overlap; within one, a gap
        wider than ``SCAN_GAP_RECORDS`` is crossed with a seek.
        """
        wanted: dict[tuple[str, int], list[int]] = defaultdict(list)
        for position in positions:
            wanted[(position.topic, position.partition)].append(position.offset)
        scans: dict[tuple[str, int], _Scan] = {}
        for (topic, partition), offsets in wanted.items():
            bounds = self._bounds(topic, partition)
            if bounds is not None:
                low, high = bounds
                pending = [offset for offset in sorted(set(offsets)) if low <= offset < high]
                if pending:
                    scans[(topic, partition)] = _Scan(topic, partition, pending)
        found: dict[Position, LogValue] = {}
        if not scans:
            return found
        consumer = self._consumer
        starts = [scan.start() for scan in scans.values()]
        consumer.assign(starts)
        try:
            unfinished = len(scans)
            deadline = time.monotonic() + READ_TIMEOUT_S
            while unfinished:
                if time.monotonic() > deadline:
                    late = next(scan for scan in scans.values() if not scan.finished())
                    raise LogReadError(f"{late.topic}/{late.partition}: timed out reading")
                for message in consumer.consume(SCAN_MESSAGES_MAX, SCAN_WAIT_S):
                    if message.error() is not None:
                        raise LogReadError(f"{message.topic()}: {message.error()}")
                    scan = scans.get((message.topic(), message.partition()))  # type: ignore[arg-type]
                    if scan is None or scan.finished():
                        continue
                    if scan.take(message, found):
                        consumer.seek(scan.start())
                    elif scan.finished():
                        unfinished -= 1  # (pausing it would slow the next read's fetches)
        finally:
            consumer.unassign()
        return found

    def _bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        """The partition's log start and end offsets; None if there is no such partition."""
        try:
            low, high = self._consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, partition), timeout=READ_TIMEOUT_S
            )
        except confluent_kafka.KafkaException as exc:
            if exc.args[0].code() in _NO_SUCH_PARTITION:
                return None  # a position in a partition the topic lacks holds nothing
            raise LogReadError(f"{topic}/{partition}: {exc.args[0]}") from exc
        return low, high


class _Scan:
    """One partition's read: the offsets still wanted, in order."""

    __slots__ = ("index", "partition", "pending", "sought", "topic")

    def __init__(self, topic: str, partition: int, pending: list[int]) -> None:
        self.topic = topic
        self.partition = partition
        self.pending = pending
        self.index = 0
        self.sought = -1
        """The offset of the last seek: messages before it still come, from fetches
        made before it, and must not make another."""

    def finished(self) -> bool:
        return self.index == len(self.pending)

    def start(self) -> confluent_kafka.TopicPartition:
        """Where reading goes on: the next offset wanted."""
        return confluent_kafka.TopicPartition(self.topic, self.partition, self.pending[self.index])

    def take(self, message: Any, found: dict[Position, LogValue]) -> bool:
        """Note a consumed record; whether to seek to the next wanted offset, a gap away."""
        offset: int | None = message.offset()
        if offset is None:
            return False
        pending = self.pending
        index = self.index
        wanted = pending[index]
        if offset < wanted:  # most records of a scan: passed on the way
            return wanted - offset > SCAN_GAP_RECORDS and self._seek_once(wanted)
        while index < len(pending) and pending[index] < offset:
            index += 1  # compacted away or a control record: nothing to read
        if index < len(pending) and pending[index] == offset:
            position = Position(self.topic, self.partition, offset)
            value: bytes | None = message.value()
            if value is not None:
                found[position] = value
            elif is_erased(message.headers(), None):
                found[position] = ErasedRecord.of(position, message.key(), message.timestamp()[1])
            index += 1
        self.index = index
        if index == len(pending):
            return False
        wanted = pending[index]
        return wanted - offset > SCAN_GAP_RECORDS and self._seek_once(wanted)

    def _seek_once(self, offset: int) -> bool:
        if self.sought == offset:
            return False
        self.sought = offset
        return True
