"""The runner's log adapters over confluent-kafka: group consumption and reads by position.

These are the only projection modules that talk to the log; they work with
any Kafka-compatible cluster.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import confluent_kafka

from eventplatform.events import Position
from eventplatform.projections.errors import ProjectionError

READ_TIMEOUT_S = 30.0
SCAN_GAP_RECORDS = 500
SCAN_MESSAGES_MAX = 1000
"""Messages one call hands over while scanning."""
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


class LogReadError(ProjectionError):
    """Records a correction needs could not be read back from the log."""


def log_ends(bootstrap: str, topics: Sequence[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """Each partition's log start and end offsets, for the given topics."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "eventplatform.status"}
    )
    try:
        metadata = consumer.list_topics(timeout=READ_TIMEOUT_S)
        ends: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                continue
            for partition in described.partitions:
                watermarks = consumer.get_watermark_offsets(
                    confluent_kafka.TopicPartition(topic, partition), timeout=READ_TIMEOUT_S
                )
                if watermarks is not None:
                    ends[(topic, partition)] = (watermarks[0], watermarks[1])
        return ends
    finally:
        consumer.close()


class KafkaEventReader:
    """Reads record values at given positions, for corrections' recomputations.

    Offsets close together are read in one sequential scan; a gap wider than
    ``SCAN_GAP_RECORDS`` is crossed with a seek.
    """

    def __init__(self, bootstrap: str, config: Mapping[str, Any] | None = None) -> None:
        self._consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "eventplatform.reader",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "fetch.wait.max.ms": READER_FETCH_WAIT_MS,
                **(config or {}),
            }
        )

    def close(self) -> None:
        self._consumer.close()

    def timestamps(self, offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """The timestamp (ms) of the record at each partition's given offset."""
        stamps: dict[tuple[str, int], int] = {}
        for (topic, partition), offset in offsets.items():
            self._consumer.assign([confluent_kafka.TopicPartition(topic, partition, offset)])
            message = self._consumer.poll(READ_TIMEOUT_S)
            if message is not None and message.error() is None:
                stamps[(topic, partition)] = message.timestamp()[1]
        self._consumer.unassign()
        return stamps

    def __call__(self, positions: Sequence[Position]) -> dict[Position, bytes]:
        wanted: dict[tuple[str, int], list[int]] = defaultdict(list)
        for position in positions:
            wanted[(position.topic, position.partition)].append(position.offset)
        found: dict[Position, bytes] = {}
        for (topic, partition), offsets in wanted.items():
            found.update(self._read_partition(topic, partition, sorted(set(offsets))))
        return found

    def _read_partition(
        self, topic: str, partition: int, offsets: list[int]
    ) -> dict[Position, bytes]:
        try:
            low, high = self._consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(topic, partition), timeout=READ_TIMEOUT_S
            )
        except confluent_kafka.KafkaException as exc:
            if exc.args[0].code() in _NO_SUCH_PARTITION:
                return {}  # a position in a partition the topic lacks holds nothing
            raise LogReadError(f"{topic}/{partition}: {exc.args[0]}") from exc
        pending = [offset for offset in offsets if low <= offset < high]
        found: dict[Position, bytes] = {}
        deadline = time.monotonic() + READ_TIMEOUT_S
        next_index = 0
        while next_index < len(pending):
            start = pending[next_index]
            self._consumer.assign([confluent_kafka.TopicPartition(topic, partition, start)])
            next_index = self._scan(topic, partition, pending, next_index, found, deadline)
        self._consumer.unassign()
        return found

    def _scan(
        self,
        topic: str,
        partition: int,
        pending: list[int],
        index: int,
        found: dict[Position, bytes],
        deadline: float,
    ) -> int:
        """Consume from ``pending[index]`` until a wide gap or the end; the next index."""
        while index < len(pending):
            if time.monotonic() > deadline:
                raise LogReadError(
                    f"{topic}/{partition}: timed out reading offset {pending[index]}"
                )
            for message in self._consumer.consume(SCAN_MESSAGES_MAX, POLL_S):
                if message.error() is not None:
                    raise LogReadError(f"{topic}/{partition}: {message.error()}")
                offset = message.offset()
                value = message.value()
                if offset is None or value is None:
                    continue
                while index < len(pending) and pending[index] < offset:
                    index += 1  # compacted away or a control record: nothing to read
                if index < len(pending) and pending[index] == offset:
                    found[Position(topic, partition, offset)] = value
                    index += 1
                if index == len(pending) or pending[index] - offset > SCAN_GAP_RECORDS:
                    return index
        return index
