"""A projection runner's metrics, read from the runner when scraped.

The runner keeps running totals (:class:`~.runner.RunnerStats`) and, per assigned
partition, its checkpoint, the log end it last read and the log time of the last
event it applied (:meth:`~.runner.ProjectionRunner.progress`). This collector turns
them into Prometheus counters and gauges at scrape time, from the endpoint's own
thread: nothing on the runner's path changes for it. docs/metrics.md lists the
metrics.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from eventplatform.projections.runner import ProjectionRunner

PREFIX = "eventplatform_projection_"
PARTITION_LABELS = ["projection", "topic", "partition"]
COUNTERS = (
    ("events_applied", "events", "Events in committed batches, corrections and parked ones too."),
    ("batches", "batches", "Batches committed, each in one SQL transaction."),
    ("events_parked", "parked", "Events parked as dead letters (a handler failed on them)."),
    ("corrections_applied", "corrections", "Correcting events applied."),
    (
        "checkpoint_conflicts",
        "conflicts",
        "Batches dropped because another member moved the checkpoint (then re-read).",
    ),
    ("store_retries", "retries", "Batches tried again after a retryable database error."),
)


class RunnerCollector:
    """See the module docstring; register it with the process's registry."""

    def __init__(self, runner: ProjectionRunner) -> None:
        self.runner = runner

    def collect(self) -> Iterator[Metric]:
        runner = self.runner
        name = runner.projection.name
        for metric, field, text in COUNTERS:
            counter = CounterMetricFamily(PREFIX + metric, text, labels=["projection"])
            counter.add_metric([name], getattr(runner.stats, field))
            yield counter
        yield from _partition_metrics(name, runner, time.time())


def _partition_metrics(name: str, runner: ProjectionRunner, now_s: float) -> Iterator[Metric]:
    families = {
        "checkpoint_offset": "The next offset the projection applies in a partition.",
        "log_end_offset": "The partition's log end, as the runner last read it.",
        "lag_events": "Events in the log the projection has not applied yet.",
        "lag_seconds": "Age of the last event applied while events wait (0 when caught up).",
    }
    gauges = {
        key: GaugeMetricFamily(PREFIX + key, text, labels=PARTITION_LABELS)
        for key, text in families.items()
    }
    for (topic, partition), progress in sorted(runner.progress().items()):
        labels = [name, topic, str(partition)]
        if progress.next_offset is not None:
            gauges["checkpoint_offset"].add_metric(labels, progress.next_offset)
        lag = progress.lag_events
        if progress.log_end is None or lag is None:
            continue
        gauges["log_end_offset"].add_metric(labels, progress.log_end)
        gauges["lag_events"].add_metric(labels, lag)
        if lag == 0:
            gauges["lag_seconds"].add_metric(labels, 0.0)
        elif progress.applied_timestamp_ms is not None:
            age_s = max(now_s - progress.applied_timestamp_ms / 1000, 0.0)
            gauges["lag_seconds"].add_metric(labels, age_s)
    yield from gauges.values()
