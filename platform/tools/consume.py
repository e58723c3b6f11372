"""``platform consume``: print a topic's records as text or JSON lines.

Without a group the consumer assigns itself partitions and never commits:
every partition from its end (new records only), from its beginning
(``--from-beginning``), from the first record at or after a timestamp
(``--from-timestamp``), or one partition from an offset (``--offset N
--partition P``). With a group it subscribes, starts from the group's
committed offsets (a partition without one starts at the end, or at the
beginning with ``--from-beginning``) and commits each printed record's
offset; the commit happens after the record is written, so a record is
never committed before it is output.

Text output is the value alone, or ``key<separator>value`` when a key
separator is given. JSON output is one object per record with ``topic``,
``partition``, ``offset``, ``timestamp`` (ms, or null), ``key``, ``value``
and ``headers`` (a list of ``[name, value]`` pairs, since names repeat).
Bytes that are valid UTF-8 appear as strings; other bytes as
``{"base64": "..."}``; absent ones as null.

A record the log erased (its value null, its one header ``eventplatform.erased``)
prints as ``<erased: partition P offset N>`` in place of its value in text
output, and with ``"erased": true`` in JSON, so it is told apart from an empty
value or a tombstone.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from eventplatform.events.wire import is_erased
from eventplatform.tools.arguments import ClusterSettings
from eventplatform.tools.errors import InvalidInputError, KafkaRequestError
from eventplatform.tools.kafka_clients import (
    client_settings,
    describe_error,
    kafka_error_of,
    request_error,
    translated_errors,
)

POLL_INTERVAL_S = 0.2
ANONYMOUS_GROUP = "eventplatform-cli-unsubscribed"  # required by librdkafka, never joined
NO_OFFSET_FOR_TIMESTAMP = -1

Write = Callable[[bytes], Any]
Report = Callable[[str], Any]


class OutputFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


@dataclass(frozen=True)
class ConsumeOptions:
    """What to read and when to stop; ``None`` limits mean "no limit"."""

    topic: str
    group: str | None = None
    from_beginning: bool = False
    partition: int | None = None
    offset: int | None = None
    from_timestamp_ms: int | None = None
    max_messages: int | None = None
    idle_timeout_s: float | None = None
    output_format: OutputFormat = OutputFormat.TEXT
    key_separator: bytes | None = None


@dataclass(frozen=True)
class ConsumedRecord:
    """One record as read, independent of the client that read it."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def check_options(options: ConsumeOptions) -> None:
    """Reject combinations that name two different starting points."""
    starts = [
        name
        for name, given in (
            ("--from-beginning", options.from_beginning),
            ("--offset", options.offset is not None),
            ("--from-timestamp", options.from_timestamp_ms is not None),
        )
        if given
    ]
    if len(starts) > 1:
        raise InvalidInputError(f"{' and '.join(starts)} name different starting points")
    if options.offset is not None and options.partition is None:
        raise InvalidInputError("--offset needs --partition")
    if options.group is not None:
        for name, given in (
            ("--partition", options.partition is not None),
            ("--offset", options.offset is not None),
            ("--from-timestamp", options.from_timestamp_ms is not None),
        ):
            if given:
                raise InvalidInputError(
                    f"{name} cannot be used with --group: a group starts from its committed "
                    "offsets (move them with `platform groups reset-offsets`)"
                )


def bytes_for_json(data: bytes | None) -> str | dict[str, str] | None:
    """A string for UTF-8 bytes, ``{"base64": ...}`` for other bytes, ``None`` for none."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def format_record(
    record: ConsumedRecord, output_format: OutputFormat, key_separator: bytes | None = None
) -> bytes:
    """One output line for ``record``, newline included."""
    erased = is_erased(record.headers, record.value)
    if output_format is OutputFormat.JSON:
        document: dict[str, Any] = {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp_ms,
            "key": bytes_for_json(record.key),
            "value": bytes_for_json(record.value),
            "headers": [[name, bytes_for_json(value)] for name, value in record.headers],
        }
        if erased:
            document["erased"] = True
        return orjson.dumps(document) + b"\n"
    if erased:
        value = f"<erased: partition {record.partition} offset {record.offset}>".encode()
    else:
        value = record.value or b""
    if key_separator is None:
        return value + b"\n"
    return (record.key or b"") + key_separator + value + b"\n"


def consumed_record(message: Message) -> ConsumedRecord:
    timestamp_type, timestamp_ms = message.timestamp()
    headers = message.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    return ConsumedRecord(
        topic=message.topic() or "",
        partition=message.partition() or 0,
        offset=message.offset() or 0,
        timestamp_ms=None if timestamp_type == TIMESTAMP_NOT_AVAILABLE else timestamp_ms,
        key=message.key(),
        value=message.value(),
        headers=tuple((name, header_bytes(value)) for name, value in pairs),
    )


def header_bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


def consumer_settings(cluster: ClusterSettings, options: ConsumeOptions) -> dict[str, Any]:
    return {
        **client_settings(cluster),
        "group.id": options.group or ANONYMOUS_GROUP,
        "enable.auto.commit": options.group is not None,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest" if options.from_beginning else "latest",
        "enable.partition.eof": False,
    }


def consume_records(
    cluster: ClusterSettings, options: ConsumeOptions, *, write: Write, report: Report
) -> int:
    """Write records until ``max_messages``, an idle timeout or Ctrl-C; return how many.

    Raises :class:`KafkaRequestError` when the topic does not exist, the cluster
    cannot be reached, or the consumer hits an error it cannot recover from.
    """
    check_options(options)
    consumer = Consumer(consumer_settings(cluster, options))
    count = 0
    try:
        partitions = topic_partitions(consumer, cluster, options.topic)
        activity = Activity()
        if options.group is None:
            consumer.assign(start_positions(consumer, cluster, options, partitions))
        else:
            consumer.subscribe([options.topic], on_assign=activity.on_assign)
        count = copy_records(consumer, options, write, activity)
        if options.group is not None:
            commit_final(consumer, cluster, options.group)
    finally:
        consumer.close()
    report(f"consumed {count} record{'' if count == 1 else 's'}")
    return count


def topic_partitions(consumer: Consumer, cluster: ClusterSettings, topic: str) -> list[int]:
    """The topic's partitions; a consumer's metadata request never creates the topic."""
    with translated_errors(cluster, f"cannot consume from {topic!r}"):
        metadata = consumer.list_topics(topic=topic, timeout=cluster.request_timeout_s)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        if found is not None and found.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise KafkaRequestError(f"cannot consume from {topic!r}: {describe_error(found.error)}")
        raise KafkaRequestError(f"topic {topic!r} does not exist", code="UNKNOWN_TOPIC_OR_PART")
    return sorted(found.partitions)


def start_positions(
    consumer: Consumer, cluster: ClusterSettings, options: ConsumeOptions, partitions: Sequence[int]
) -> list[TopicPartition]:
    """Where each assigned partition starts when no group decides it."""
    if options.partition is not None:
        if options.partition not in partitions:
            raise InvalidInputError(
                f"topic {options.topic!r} has {len(partitions)} partitions; "
                f"partition {options.partition} does not exist"
            )
        partitions = [options.partition]
    if options.offset is not None:
        return [
            TopicPartition(options.topic, partition, options.offset) for partition in partitions
        ]
    if options.from_timestamp_ms is not None:
        return timestamp_positions(consumer, cluster, options, partitions)
    start = OFFSET_BEGINNING if options.from_beginning else OFFSET_END
    return [TopicPartition(options.topic, partition, start) for partition in partitions]


def timestamp_positions(
    consumer: Consumer, cluster: ClusterSettings, options: ConsumeOptions, partitions: Sequence[int]
) -> list[TopicPartition]:
    """The first offset at or after the timestamp; the end where no record is that late."""
    assert options.from_timestamp_ms is not None
    request = [
        TopicPartition(options.topic, partition, options.from_timestamp_ms)
        for partition in partitions
    ]
    with translated_errors(cluster, "cannot look up offsets by timestamp"):
        found = consumer.offsets_for_times(request, timeout=cluster.request_timeout_s)
    return [
        TopicPartition(
            entry.topic,
            entry.partition,
            OFFSET_END if entry.offset == NO_OFFSET_FOR_TIMESTAMP else entry.offset,
        )
        for entry in found
    ]


@dataclass
class Activity:
    """When the consumer last made progress: a record, or partitions assigned to it.

    Joining a group can take seconds; counting that as idle time would end
    a ``--timeout`` run before its first record could arrive.
    """

    last_at: float = field(default_factory=time.monotonic)

    def touch(self) -> None:
        self.last_at = time.monotonic()

    def on_assign(self, _consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        self.touch()

    def idle_longer_than(self, limit_s: float | None) -> bool:
        """Whether ``limit_s`` has passed without progress; a ``None`` limit never passes."""
        return limit_s is not None and time.monotonic() - self.last_at >= limit_s


def copy_records(
    consumer: Consumer, options: ConsumeOptions, write: Write, activity: Activity
) -> int:
    """Poll and write until a limit is reached or Ctrl-C; return the number written."""
    count = 0
    try:
        while options.max_messages is None or count < options.max_messages:
            message = consumer.poll(POLL_INTERVAL_S)
            if message is None:
                if activity.idle_longer_than(options.idle_timeout_s):
                    break
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                action = f"cannot consume from {options.topic!r}"
                raise KafkaRequestError(f"{action}: {describe_error(error)}", code=error.name())
            record = consumed_record(message)
            write(format_record(record, options.output_format, options.key_separator))
            if options.group is not None:
                consumer.store_offsets(message=message)
            count += 1
            activity.touch()
    except KeyboardInterrupt:
        pass
    return count


def commit_final(consumer: Consumer, cluster: ClusterSettings, group: str) -> None:
    """Commit the stored offsets now rather than leave them to the next auto-commit."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exception:
        error = kafka_error_of(exception)
        if error is not None and error.code() == KafkaError._NO_OFFSET:
            return
        action = f"cannot commit offsets of group {group!r}"
        raise request_error(cluster, action, exception) from exception
