"""Redacting lines that leaked a secret.

:func:`matching_lines` finds, in ``logs_recent``, the lines whose message
holds a piece of text (case-sensitive, as written), optionally of one
service; :func:`redact` appends their :func:`~.events.redaction`. Once the
runner applies it the lines are gone from every table, the search index
included.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import select

from eventplatform.apps.log_aggregation.events import TOPIC, redaction
from eventplatform.apps.log_aggregation.projections import recent
from eventplatform.events import EventProducer, EventRef, KafkaConnection, Position
from eventplatform.projections import create_store_engine, reading

LIKE_ESCAPE = "\\"


def _like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def matching_lines(database_url: str, text: str, service: str | None = None) -> list[EventRef]:
    """The recent lines whose message holds ``text``, in log order."""
    if not text:
        raise ValueError("give the text the lines to redact hold")
    table = recent
    query = select(
        table.c.event_id, table.c.service, table.c.host, table.c.log_partition, table.c.log_offset
    ).where(table.c.message.like(_like_pattern(text), escape=LIKE_ESCAPE))
    if service is not None:
        query = query.where(table.c.service == service)
    engine = create_store_engine(database_url)
    try:
        with reading(engine) as connection:
            rows = connection.execute(query.order_by(table.c.log_partition, table.c.log_offset))
            return [
                EventRef(
                    uuid.UUID(event_id),
                    f"{line_service}@{host}",
                    Position(TOPIC, int(partition), int(offset)),
                )
                for event_id, line_service, host, partition, offset in rows
            ]
    finally:
        engine.dispose()


@dataclass(frozen=True)
class Redaction:
    lines: int
    appended: tuple[EventRef, ...] = ()


def redact(
    database_url: str,
    bootstrap: KafkaConnection,
    text: str,
    reason: str,
    *,
    service: str | None = None,
    dry_run: bool = False,
) -> Redaction:
    """Retract every recent line holding ``text`` (with ``dry_run``, only count them)."""
    found = matching_lines(database_url, text, service)
    if dry_run or not found:
        return Redaction(len(found))
    with EventProducer(bootstrap) as producer:
        appended = producer.append(redaction(found, reason))
    return Redaction(len(found), tuple(appended))
