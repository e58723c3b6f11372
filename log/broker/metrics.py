"""What a broker counts for its metrics endpoint, and what it reads when scraped.

Two kinds of figures, by what they cost:

* **On the request path**, :class:`RequestStats`: per API, the requests, their bytes
  in (the frame with its size prefix) and out (the response likewise), and a
  latency histogram, from the request's last byte read to its answer being ready
  (for an acks=all produce, until its replicas acknowledged; for a Fetch, its
  wait for data included). They are plain integers in a slotted object per API
  key and one ``bisect`` into the bucket bounds, with no lock, since only the
  trio thread touches them: about 1.5 microseconds for the counters alone in a
  micro-benchmark, and 4-6 % of the broker's CPU for the smallest requests
  (Metadata, a one-record Produce: 9-12 of 200-240 microseconds) in
  bench/request_cost.py (docs/benchmarks.md). prometheus_client's own labelled
  Counter and Histogram take a lock per increment and walk the buckets in
  Python: 8 to 13 microseconds for the same figures.
* **Everything else is read at scrape time** by :class:`BrokerCollector` from the
  broker's own state, in the trio thread (see :mod:`eventplatform.log.metrics_endpoint`):
  partition offsets and sizes, the ISR of the partitions this node leads, the
  under-replicated and offline counts, and the lag of the groups this node
  coordinates. Nothing is updated on a hot path for them.

docs/metrics.md lists every metric with its labels.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from eventplatform.log.cluster.raft import Role
from eventplatform.log.protocol import APIS
from eventplatform.log.replica.partition import NO_LEADER

if TYPE_CHECKING:
    from eventplatform.log.broker.broker import Broker
    from eventplatform.log.cluster.node import ControllerNode
    from eventplatform.log.replica.partition import Partition
    from eventplatform.log.replica.topics import Topic

PREFIX = "eventplatform_"
LATENCY_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds of the request latency buckets, in seconds (``+Inf`` follows)."""
PARTITION_LABELS = ["topic", "partition"]
GROUP_PARTITION_LABELS = ["group", "topic", "partition"]


class ApiStats:
    """One API's figures; see the module docstring."""

    __slots__ = ("bucket_counts", "request_bytes", "requests", "response_bytes", "seconds_sum")

    def __init__(self) -> None:
        self.requests = 0
        self.request_bytes = 0
        self.response_bytes = 0
        self.seconds_sum = 0.0
        self.bucket_counts = [0] * (len(LATENCY_BUCKETS_S) + 1)

    def answered(self, seconds: float, response_bytes: int) -> None:
        """A request of this API was answered (or, with acks=0, done) after ``seconds``;
        the answer is ``response_bytes`` long (0 when there is none)."""
        self.bucket_counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.seconds_sum += seconds
        self.response_bytes += response_bytes


class RequestStats:
    """Per API key, an :class:`ApiStats`; kept by the broker, fed by its connections."""

    __slots__ = ("apis",)

    def __init__(self) -> None:
        self.apis: dict[int, ApiStats] = {}

    def received(self, api_key: int, frame_bytes: int) -> ApiStats:
        """A request of ``api_key`` arrived, ``frame_bytes`` long with its size prefix."""
        stats = self.apis.get(api_key)
        if stats is None:
            stats = self.apis[api_key] = ApiStats()
        stats.requests += 1
        stats.request_bytes += frame_bytes
        return stats


class BrokerCollector:
    """The broker's metrics, read when scraped; register it with the process's registry.

    ``connections`` says how many client connections are open now."""

    def __init__(self, broker: Broker, connections: Callable[[], int]) -> None:
        self.broker = broker
        self.connections = connections

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        info = GaugeMetricFamily(
            PREFIX + "broker_info",
            "This node's id and its cluster's id (the value is always 1).",
            labels=["node_id", "cluster_id"],
        )
        info.add_metric([str(broker.node_id), broker.cluster_id], 1)
        yield info
        yield GaugeMetricFamily(
            PREFIX + "broker_connections",
            "Client connections open now.",
            value=self.connections(),
        )
        yield from _request_metrics(broker.request_stats)
        yield from _partition_metrics(broker)
        yield from _group_metrics(broker)


def _request_metrics(stats: RequestStats) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        PREFIX + "broker_requests", "Requests received, by API.", labels=["api"]
    )
    received = CounterMetricFamily(
        PREFIX + "broker_request_bytes",
        "Bytes of requests received (frames with their size prefix), by API.",
        labels=["api"],
    )
    sent = CounterMetricFamily(
        PREFIX + "broker_response_bytes",
        "Bytes of responses sent (frames with their size prefix), by API.",
        labels=["api"],
    )
    latency = HistogramMetricFamily(
        PREFIX + "broker_request_duration_seconds",
        "From a request's last byte read to its answer being ready, by API.",
        labels=["api"],
    )
    for key, api_stats in sorted(stats.apis.items()):
        api = APIS.get(key)
        labels = [api.name if api is not None else str(key)]
        requests.add_metric(labels, api_stats.requests)
        received.add_metric(labels, api_stats.request_bytes)
        sent.add_metric(labels, api_stats.response_bytes)
        buckets = []
        cumulative = 0
        for bound, count in zip(
            (*map(_float_text, LATENCY_BUCKETS_S), "+Inf"), api_stats.bucket_counts, strict=True
        ):
            cumulative += count
            buckets.append((bound, cumulative))
        latency.add_metric(labels, buckets, api_stats.seconds_sum)
    yield from (requests, received, sent, latency)


def _float_text(value: float) -> str:
    return repr(float(value))


def _partition_metrics(broker: Broker) -> Iterator[Metric]:
    """Offsets and sizes of every partition held here (a leader's or a follower's); the
    replica counts of those it leads; the under-replicated ones among those; and the
    offline ones this node knows of: without a leader, or led here on a log a storage
    error took offline."""
    gauges = {
        "log_end_offset": "The next offset this replica will write.",
        "high_watermark": "The offset up to which every in-sync replica holds the log.",
        "log_start_offset": "The first offset the log still holds.",
        "size_bytes": "Bytes of the partition's segments on disk.",
        "replicas": "Replicas assigned to a partition this node leads.",
        "in_sync_replicas": "In-sync replicas (the ISR, leader included) of a partition "
        "this node leads.",
    }
    families = {
        name: GaugeMetricFamily(PREFIX + "partition_" + name, text, labels=PARTITION_LABELS)
        for name, text in gauges.items()
    }
    led = under_replicated = offline = 0
    for topic in list(broker.topics.topics.values()):
        for layout in broker.membership.layout(topic):
            labels = [topic.name, str(layout.index)]
            partition = _held(topic, layout.index)
            if partition is not None:
                families["log_end_offset"].add_metric(labels, partition.log.log_end_offset)
                families["high_watermark"].add_metric(labels, partition.high_watermark)
                families["log_start_offset"].add_metric(labels, partition.log_start_offset)
                families["size_bytes"].add_metric(labels, partition.log.size_bytes)
            leads = layout.leader == broker.node_id
            if layout.leader == NO_LEADER or (
                leads and partition is not None and partition.offline
            ):
                offline += 1
            elif leads:
                led += 1
                families["replicas"].add_metric(labels, len(layout.replicas))
                families["in_sync_replicas"].add_metric(labels, len(layout.isr))
                under_replicated += len(layout.isr) < len(layout.replicas)
    yield from families.values()
    yield GaugeMetricFamily(PREFIX + "leader_partitions", "Partitions this node leads.", value=led)
    yield GaugeMetricFamily(
        PREFIX + "under_replicated_partitions",
        "Partitions this node leads whose ISR is smaller than their replica set.",
        value=under_replicated,
    )
    yield GaugeMetricFamily(
        PREFIX + "offline_partitions",
        "Partitions this node knows of that have no leader, or that it leads on a log a "
        "storage error took offline.",
        value=offline,
    )


def _held(topic: Topic, index: int) -> Partition | None:
    held = topic.partitions
    partition = held[index] if index < len(held) else None
    return None if partition is None or partition.closed else partition


def _group_metrics(broker: Broker) -> Iterator[Metric]:
    """Committed offsets and lag of the groups this node coordinates. The lag is the
    partition's high watermark minus the committed offset, where this node holds a
    replica of the partition (so knows its high watermark)."""
    members = GaugeMetricFamily(
        PREFIX + "consumer_group_members",
        "Members of a group this node coordinates.",
        labels=["group"],
    )
    committed = GaugeMetricFamily(
        PREFIX + "consumer_group_committed_offset",
        "The offset a group committed for a partition.",
        labels=GROUP_PARTITION_LABELS,
    )
    lag = GaugeMetricFamily(
        PREFIX + "consumer_group_lag_records",
        "Records between a group's committed offset and the partition's high watermark.",
        labels=GROUP_PARTITION_LABELS,
    )
    coordinator = broker.groups
    groups = list(coordinator.core.groups.values()) if coordinator is not None else []
    for group in groups:
        members.add_metric([group.group_id], len(group.members))
        for place, offset in sorted(group.offsets.items()):
            labels = [group.group_id, place.topic, str(place.partition)]
            committed.add_metric(labels, offset.offset)
            partition = broker.topics.partition(place.topic, place.partition)
            if partition is not None and not partition.closed:
                lag.add_metric(labels, max(partition.high_watermark - offset.offset, 0))
    yield from (members, committed, lag)


class QuorumCollector:
    """A controller's view of the metadata quorum, read when scraped: its role, epoch,
    and how far its copy of the metadata log reaches and is committed."""

    def __init__(self, controller: ControllerNode) -> None:
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        quorum = self.controller.quorum
        if quorum.node is None:  # not started yet
            return
        raft = quorum.raft
        role = GaugeMetricFamily(
            PREFIX + "quorum_role",
            "1 for this controller's role in the metadata quorum, 0 for the others.",
            labels=["role"],
        )
        for each in Role:
            role.add_metric([each.value], 1 if raft.role is each else 0)
        yield role
        yield GaugeMetricFamily(
            PREFIX + "quorum_epoch",
            "The quorum's epoch as this controller knows it.",
            value=raft.epoch,
        )
        yield GaugeMetricFamily(
            PREFIX + "quorum_log_end_offset",
            "The end of this controller's copy of the metadata log.",
            value=raft.end_offset,
        )
        yield GaugeMetricFamily(
            PREFIX + "quorum_high_watermark",
            "The committed end of the metadata log, as this controller knows it.",
            value=raft.high_watermark,
        )
