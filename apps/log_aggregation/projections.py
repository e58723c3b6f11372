"""The log app's projections: counts, error fingerprints and the recent lines.

``logs.lines`` keeps, for the lines the topic still holds (its retention is
:data:`~.events.RETENTION_DAYS` days, and :mod:`.retention` prunes the
tables in step):

* ``logs_counts``: lines per service, level and minute;
* ``logs_errors``: one row per ``error`` or ``fatal`` line, with its
  fingerprint (:mod:`.fingerprint`); ``logs_error_templates`` holds each
  fingerprint's template per day, and the ``logs_error_fingerprints`` view
  gives per service and fingerprint the template, first and last seen and
  how many lines;
* ``logs_recent``: every line (service, host, level, message, attributes as
  JSON), keyed by its log position, searchable by full text: FTS5 on SQLite
  (``logs_recent_search``), a ``tsvector`` index on PostgreSQL (see
  :mod:`.search`).

Every column merges by count or ``Only`` (one row per line), so each table
is invertible: a redaction retracts its lines from all of them without
reading anything back, and no table needs the event index.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime

from sqlalchemy import BigInteger, Column, Date, DateTime, Index, Integer, MetaData, String, Text

from eventplatform.apps.log_aggregation.events import ERROR_LEVELS, NAME_MAX, LogLine
from eventplatform.apps.log_aggregation.fingerprint import (
    FINGERPRINT_HEX,
    TEMPLATE_MAX,
    fingerprint,
    template,
)
from eventplatform.events import Envelope
from eventplatform.projections import (
    MIGRATION_INDEXES,
    Count,
    Only,
    Projection,
    Row,
    merge_column,
    projection_table,
)

LEVEL_MAX = 8

metadata = MetaData()

counts = projection_table(
    "logs_counts",
    metadata,
    Column("service", String(NAME_MAX), primary_key=True),
    Column("level", String(LEVEL_MAX), primary_key=True),
    Column("minute", DateTime(timezone=True), primary_key=True),
    merge_column("lines", BigInteger, Count()),
    Index("logs_counts_minute", "minute"),
)

errors = projection_table(
    "logs_errors",
    metadata,
    Column("log_partition", Integer, primary_key=True),
    Column("log_offset", BigInteger, primary_key=True),
    merge_column("service", String(NAME_MAX), Only()),
    merge_column("fingerprint", String(FINGERPRINT_HEX), Only()),
    merge_column("at", DateTime(timezone=True), Only()),
    Index("logs_errors_fingerprint", "service", "fingerprint"),
    Index("logs_errors_at", "at"),
)

error_templates = projection_table(
    "logs_error_templates",
    metadata,
    Column("fingerprint", String(FINGERPRINT_HEX), primary_key=True),
    Column("day", Date, primary_key=True),
    merge_column("template", String(TEMPLATE_MAX), Only()),
    merge_column("lines", BigInteger, Count()),
)

recent = projection_table(
    "logs_recent",
    metadata,
    Column("log_partition", Integer, primary_key=True),
    Column("log_offset", BigInteger, primary_key=True),
    merge_column("event_id", String(36), Only()),
    merge_column("at", DateTime(timezone=True), Only()),
    merge_column("service", String(NAME_MAX), Only()),
    merge_column("host", String(NAME_MAX), Only()),
    merge_column("level", String(LEVEL_MAX), Only()),
    merge_column("message", Text, Only()),
    merge_column("attributes", Text, Only()),
    Index("logs_recent_at", "at"),
    # the tsvector index of PostgreSQL (SQLite's FTS5 table is a table of its own)
    info={MIGRATION_INDEXES: ("logs_recent_search",)},
)

lines = Projection(
    "logs.lines",
    tables=[counts, errors, error_templates, recent],
    description="Lines per service, level and minute; error fingerprints; the recent lines, "
    "searchable by full text.",
)


def minute_of(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def day_of(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


@lines.on(LogLine)
def line_rows(envelope: Envelope[LogLine]) -> Iterator[Row]:
    line = envelope.event
    position = envelope.position
    assert position is not None, "a projected event has its log position"
    where = {"log_partition": position.partition, "log_offset": position.offset}
    yield Row(counts, service=line.service, level=line.level, minute=minute_of(line.at))
    yield Row(
        recent,
        **where,
        event_id=str(envelope.event_id),
        at=line.at,
        service=line.service,
        host=line.host,
        level=line.level,
        message=line.message,
        attributes=json.dumps(line.attributes, sort_keys=True, separators=(",", ":")),
    )
    if line.level in ERROR_LEVELS:
        masked = template(line.message)
        print_ = fingerprint(line.service, masked)
        yield Row(errors, **where, service=line.service, fingerprint=print_, at=line.at)
        yield Row(error_templates, fingerprint=print_, day=day_of(line.at), template=masked)
