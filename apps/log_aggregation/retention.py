"""The ``logs`` topic's seven-day retention, and the projection pruned in step with it.

:func:`ensure_topic` creates the topic with ``retention.ms`` of
:data:`~.events.RETENTION_DAYS` days, or sets it on a topic that exists, so
the broker deletes segments whose lines are older.

:func:`prune` then deletes what the log no longer holds:

* from ``logs_recent`` and ``logs_errors``, the lines below each partition's
  log start offset: exactly the lines the broker has deleted, so a Spark
  rebuild from the log gives the same rows;
* from ``logs_counts``, the minutes older than the retention, and from
  ``logs_error_templates`` the days wholly older than it.

The tables are invertible (:mod:`.projections`): a redaction that arrives
for a line already pruned leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import confluent_kafka
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from sqlalchemy import delete

from eventplatform.apps.log_aggregation.events import RETENTION_DAYS, TOPIC
from eventplatform.apps.log_aggregation.projections import counts, error_templates, errors, recent
from eventplatform.events import KafkaConnection, kafka_settings
from eventplatform.projections import create_store_engine, log_ends

PARTITIONS_DEFAULT = 3
ADMIN_TIMEOUT_S = 30.0
RETENTION = timedelta(days=RETENTION_DAYS)
RETENTION_MS = int(RETENTION.total_seconds() * 1000)


def ensure_topic(bootstrap: KafkaConnection, partitions: int = PARTITIONS_DEFAULT) -> bool:
    """Create ``logs`` with the retention, or set the retention on it; True if created."""
    admin = AdminClient(kafka_settings(bootstrap))
    config = {"retention.ms": str(RETENTION_MS)}
    futures = admin.create_topics([NewTopic(TOPIC, partitions, config=config)])
    try:
        futures[TOPIC].result(ADMIN_TIMEOUT_S)
        return True
    except confluent_kafka.KafkaException as exc:
        if exc.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    entry = ConfigEntry(
        "retention.ms", str(RETENTION_MS), incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(ADMIN_TIMEOUT_S)
    return False


@dataclass(frozen=True)
class Pruned:
    lines: int
    errors: int
    count_rows: int
    template_rows: int


def prune(database_url: str, bootstrap: KafkaConnection, *, now: datetime | None = None) -> Pruned:
    """Delete from the log app's tables what the ``logs`` topic no longer holds."""
    starts = {partition: low for (_, partition), (low, _) in log_ends(bootstrap, [TOPIC]).items()}
    cutoff = (now or datetime.now(UTC)) - RETENTION
    engine = create_store_engine(database_url)
    try:
        with engine.begin() as connection:
            removed = {recent.name: 0, errors.name: 0}
            for partition, start in sorted(starts.items()):
                for table in (recent, errors):
                    statement = delete(table).where(
                        table.c.log_partition == partition, table.c.log_offset < start
                    )
                    removed[table.name] += connection.execute(statement).rowcount
            minute = cutoff.replace(second=0, microsecond=0)
            count_rows = connection.execute(delete(counts).where(counts.c.minute < minute))
            days = connection.execute(
                delete(error_templates).where(error_templates.c.day < cutoff.date())
            )
            return Pruned(
                removed[recent.name], removed[errors.name], count_rows.rowcount, days.rowcount
            )
    finally:
        engine.dispose()
