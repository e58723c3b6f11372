"""What the console's pages show, read through the admin tools and the projection operations.

Each reader takes the console's :class:`ConsoleSettings` and returns plain
values for a template; none keeps a client open between requests. Every
cluster request waits at most :data:`REQUEST_TIMEOUT_S` (the tools'
``ClusterSettings.request_timeout_s``), and a page lists at most
:data:`GROUPS_MAX` groups and :data:`RECORDS_MAX` records, so one page view
is bounded in time and size whatever the cluster holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from eventplatform.client_config import ClientConfig
from eventplatform.events.codec import EventCatalog, parse
from eventplatform.events.errors import EventError
from eventplatform.events.wire import is_erased
from eventplatform.projections.apps import App
from eventplatform.tools.arguments import ClusterSettings
from eventplatform.tools.consume import ConsumedRecord, consumed_record, topic_partitions
from eventplatform.tools.errors import KafkaRequestError, ToolError
from eventplatform.tools.groups import GroupSummary, read_group_states, read_group_summary
from eventplatform.tools.kafka_clients import admin_client, client_settings, translated_errors
from eventplatform.tools.topics import wait_for_metadata

REQUEST_TIMEOUT_S = 5.0
"""The longest one cluster request of a page may take."""
GROUPS_MAX = 100
"""Groups described on the groups page; the rest are only counted."""
GROUPS_BUDGET_S = 15.0
"""Time the groups page spends describing groups; the groups left when it is spent are
only counted."""
TOPICS_MAX = 500
"""Topics shown on the cluster page, in name order; the rest are only counted."""
RECORDS_DEFAULT = 20
RECORDS_MAX = 200
"""Records one browse returns at most, whatever ``count`` asks."""
BROWSE_TIMEOUT_S = 5.0
"""How long a browse waits for its records before showing what came."""
POLL_INTERVAL_S = 0.2
VALUE_CHARS_MAX = 2000
"""Characters of a record's value shown; longer values are cut, and say so."""
INTERNAL_TOPIC_PREFIX = "__"
BROWSE_GROUP = "eventplatform-console-unsubscribed"  # required by librdkafka, never joined


@dataclass(frozen=True)
class ConsoleSettings:
    """The cluster, database and apps the console shows."""

    client: ClientConfig
    database_url: str
    apps: Sequence[App]
    operator: bool = False
    """Whether the console offers actions (a retry of parked events), not only views."""

    @property
    def cluster(self) -> ClusterSettings:
        return ClusterSettings(
            bootstrap=self.client.bootstrap,
            request_timeout_s=REQUEST_TIMEOUT_S,
            client=self.client,
        )


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int
    controller: bool


@dataclass(frozen=True)
class PartitionView:
    partition: int
    leader: int | None
    replicas: tuple[int, ...]
    in_sync_replicas: tuple[int, ...]
    error: str | None = None

    @property
    def under_replicated(self) -> bool:
        return len(self.in_sync_replicas) < len(self.replicas)


@dataclass(frozen=True)
class TopicView:
    name: str
    partitions: tuple[PartitionView, ...]
    error: str | None = None

    @property
    def internal(self) -> bool:
        """Kafka's own topics (``__consumer_offsets``, ``__transaction_state``)."""
        return self.name.startswith(INTERNAL_TOPIC_PREFIX)


@dataclass(frozen=True)
class ClusterView:
    cluster_id: str | None
    controller_id: int | None
    brokers: tuple[Broker, ...]
    topics: tuple[TopicView, ...]
    omitted: int = 0
    """Topics beyond :data:`TOPICS_MAX`, not shown."""


def read_cluster(settings: ConsoleSettings) -> ClusterView:
    """Brokers, the controller, and every topic's partitions with leader and ISR, from one
    metadata request (which names no topic, so it creates none)."""
    cluster = settings.cluster
    metadata = wait_for_metadata(admin_client(cluster), cluster)
    controller = metadata.controller_id if metadata.controller_id >= 0 else None
    brokers = tuple(
        Broker(broker.id, broker.host or "", broker.port, broker.id == controller)
        for broker in sorted(metadata.brokers.values(), key=lambda broker: broker.id)
    )
    shown = sorted(metadata.topics.values(), key=lambda topic: topic.topic or "")[:TOPICS_MAX]
    topics = tuple(
        TopicView(
            name=topic.topic or "",
            partitions=tuple(
                PartitionView(
                    partition=partition.id,
                    leader=partition.leader if partition.leader >= 0 else None,
                    replicas=tuple(partition.replicas),
                    in_sync_replicas=tuple(partition.isrs),
                    error=None if partition.error is None else partition.error.str(),
                )
                for partition in sorted(topic.partitions.values(), key=lambda each: each.id)
            ),
            error=None if topic.error is None else topic.error.str(),
        )
        for topic in shown
    )
    omitted = max(0, len(metadata.topics) - TOPICS_MAX)
    return ClusterView(metadata.cluster_id, controller, brokers, topics, omitted)


@dataclass(frozen=True)
class GroupsView:
    groups: tuple[GroupSummary, ...]
    errors: tuple[str, ...]
    """One line per group that could not be described."""
    omitted: int
    """Groups not described: beyond :data:`GROUPS_MAX`, or once the time was spent."""


def read_groups(settings: ConsoleSettings) -> GroupsView:
    """Every consumer group with its per-partition lag: up to :data:`GROUPS_MAX` of them,
    described one after another until :data:`GROUPS_BUDGET_S` is spent."""
    cluster = settings.cluster
    admin = admin_client(cluster)
    names = sorted(read_group_states(admin, cluster))
    groups: list[GroupSummary] = []
    errors: list[str] = []
    deadline = time.monotonic() + GROUPS_BUDGET_S
    described = 0
    for name in names[:GROUPS_MAX]:
        if time.monotonic() >= deadline:
            break
        described += 1
        try:
            groups.append(read_group_summary(admin, cluster, name))
        except KafkaRequestError as error:
            if error.code != "GROUP_ID_NOT_FOUND":  # gone since it was listed
                errors.append(str(error))
    return GroupsView(tuple(groups), tuple(errors), len(names) - described)


@dataclass(frozen=True)
class RecordView:
    offset: int
    timestamp: str
    key: str
    event_type: str | None
    """The event's type and version when the value is an event envelope."""
    value: str
    note: str | None = None
    """Why the value is shown as it is: erased, not an event, a decode error."""


@dataclass(frozen=True)
class BrowseView:
    topic: str
    partition: int
    partitions: tuple[int, ...]
    start: int
    low: int
    high: int
    records: tuple[RecordView, ...] = field(default=())


def catalog_of(apps: Sequence[App]) -> EventCatalog:
    """The event classes the apps declare or their projections handle."""
    catalog = EventCatalog()
    for app in apps:
        for event_class in app.event_types:
            catalog.add(event_class)
        for projection in app.projections:
            for event_class in projection.catalog().classes():
                catalog.add(event_class)
    return catalog


def browse(
    settings: ConsoleSettings, topic: str, partition: int, offset: int | None, count: int
) -> BrowseView:
    """Up to ``count`` (at most :data:`RECORDS_MAX`) records of one partition from
    ``offset``, or the last ``count`` when no offset is given."""
    cluster = settings.cluster
    count = max(1, min(count, RECORDS_MAX))
    consumer = Consumer(
        {
            **client_settings(cluster),
            "group.id": BROWSE_GROUP,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        partitions = tuple(topic_partitions(consumer, cluster, topic))
        if partition not in partitions:
            raise ToolError(
                f"topic {topic!r} has {len(partitions)} partitions; "
                f"partition {partition} does not exist"
            )
        with translated_errors(cluster, f"cannot read the offsets of {topic}[{partition}]"):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=cluster.request_timeout_s
            )
        start = max(low, high - count) if offset is None else max(low, min(offset, high))
        view = BrowseView(topic, partition, partitions, start, low, high)
        if start >= high:
            return view
        consumer.assign([TopicPartition(topic, partition, start)])
        records = _read(consumer, count, min(high, start + count))
    finally:
        consumer.close()
    catalog = catalog_of(settings.apps)
    return BrowseView(
        topic,
        partition,
        partitions,
        start,
        low,
        high,
        tuple(record_view(r, catalog) for r in records),
    )


def _read(consumer: Consumer, count: int, end: int) -> list[ConsumedRecord]:
    records: list[ConsumedRecord] = []
    deadline = time.monotonic() + BROWSE_TIMEOUT_S
    while len(records) < count and time.monotonic() < deadline:
        message = consumer.poll(POLL_INTERVAL_S)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                break
            raise KafkaRequestError(f"cannot read the partition: {error.str()}")
        records.append(consumed_record(message))
        if records[-1].offset + 1 >= end:
            break
    return records


def record_view(record: ConsumedRecord, catalog: EventCatalog) -> RecordView:
    """One record for the page: an event's type and payload where the value is an envelope
    (validated by the apps' event classes when they know its type), its text otherwise."""
    timestamp = (
        "-"
        if record.timestamp_ms is None
        else datetime.fromtimestamp(record.timestamp_ms / 1000, UTC).isoformat(
            timespec="milliseconds"
        )
    )
    key = _text(record.key) or "-"
    if is_erased(record.headers, record.value):
        return RecordView(record.offset, timestamp, key, None, "", "erased")
    try:
        raw = parse(record.value)
    except EventError:
        return RecordView(record.offset, timestamp, key, None, *_cut(_text(record.value)))
    event_type = f"{raw['type']} v{raw['version']}"
    note: str | None = None
    data: Any = raw.get("data")
    if raw["type"] in catalog:
        try:
            envelope = catalog.decode_record(record.value, record.headers)
            if envelope is not None:
                data = envelope.event.model_dump(mode="json")
        except EventError as error:
            note = f"does not decode: {error}"
    else:
        note = "no installed app declares this type"
    value, cut = _cut(json.dumps(data, indent=1, sort_keys=True, default=str))
    return RecordView(record.offset, timestamp, key, event_type, value, note or cut)


def _text(data: bytes | None) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", "replace")


def _cut(text: str) -> tuple[str, str | None]:
    if len(text) <= VALUE_CHARS_MAX:
        return text, None
    return text[:VALUE_CHARS_MAX], f"cut at {VALUE_CHARS_MAX} of {len(text)} characters"
