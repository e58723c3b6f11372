"""The log app's tables and views, read back, and what they must show, computed directly.

:func:`expected` reads the app's definitions with plain loops over the lines
(the fingerprint rules themselves come from :mod:`.fingerprint`, which has
tests of its own); :func:`read_views` reads the database in the same shapes.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from activity_dataset import as_utc, number
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition
from sqlalchemy import inspect, text

from eventplatform.apps.log_aggregation import app
from eventplatform.apps.log_aggregation.events import TOPIC, LogLine
from eventplatform.apps.log_aggregation.fingerprint import fingerprint, template
from eventplatform.log.extensions import ERASED_HEADER
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.query import find_named_query, named_parameters, run_named_query


def minute(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def expected(lines: Iterable[LogLine]) -> dict[str, Any]:
    counts: Counter[tuple[str, str, datetime]] = Counter()
    groups: dict[tuple[str, str], list[Any]] = {}
    recent: Counter[tuple[Any, ...]] = Counter()
    for line in lines:
        counts[line.service, line.level, minute(line.at)] += 1
        recent[
            _recent_row(
                line.at,
                line.service,
                line.host,
                line.level,
                line.message,
                json.dumps(line.attributes, sort_keys=True),
            )
        ] += 1
        if line.level in {"error", "fatal"}:
            masked = template(line.message)
            key = (line.service, fingerprint(line.service, masked))
            group = groups.setdefault(key, [masked, 0, line.at, line.at])
            group[1] += 1
            group[2], group[3] = min(group[2], line.at), max(group[3], line.at)
    return {
        "counts": dict(counts),
        "fingerprints": {key: tuple(group) for key, group in groups.items()},
        "recent": dict(recent),
    }


def _recent_row(at: Any, *rest: Any) -> tuple[Any, ...]:
    return (as_utc(at), *rest)


VIEW_QUERIES = {
    "counts": "SELECT service, level, minute, lines FROM logs_counts",
    "fingerprints": "SELECT service, fingerprint, template, lines, first_seen, last_seen "
    "FROM logs_error_fingerprints",
    "recent": "SELECT at, service, host, level, message, attributes FROM logs_recent",
}


def read_views(url: str) -> dict[str, Any]:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            found = {
                name: [tuple(row) for row in connection.execute(text(query))]
                for name, query in VIEW_QUERIES.items()
            }
    finally:
        engine.dispose()
    recent: Counter[tuple[Any, ...]] = Counter()
    for at, *rest in found["recent"]:
        attributes = json.dumps(json.loads(rest[-1]), sort_keys=True)
        recent[_recent_row(at, *rest[:-1], attributes)] += 1
    return {
        "counts": {(s, lv, as_utc(m)): number(n) for s, lv, m, n in found["counts"]},
        "fingerprints": {
            (s, f): (t, number(n), as_utc(first), as_utc(last))
            for s, f, t, n, first, last in found["fingerprints"]
        },
        "recent": dict(recent),
    }


def named(url: str, name: str, **given: str) -> list[tuple[Any, ...]]:
    """Named query ``name``'s rows over ten years, times as aware UTC, numbers as ints."""
    query = find_named_query([app], name)
    parameters = named_parameters(query, since="3650d", given=given)
    rows = run_named_query(url, query, parameters, allow_superuser=True).rows
    return [tuple(as_utc(v) if isinstance(v, datetime) else number(v) for v in row) for row in rows]


def search(url: str, phrase: str) -> list[tuple[Any, ...]]:
    """The ``logs.search`` named query's rows for ``phrase`` (newest first)."""
    return named(url, "logs.search", q=phrase, limit="1000")


READ_TIMEOUT_S = 60.0


def log_records(bootstrap: str) -> list[Message]:
    """Every record of the ``logs`` topic, read by a plain consumer from offset 0."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(TOPIC, timeout=READ_TIMEOUT_S).topics[TOPIC].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), READ_TIMEOUT_S)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in partitions])
        found: list[Message] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(found) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(found)} of {sum(ends.values())}"
            for message in consumer.consume(100, timeout=0.5):
                if message.error() is not None:
                    raise KafkaException(message.error())
                found.append(message)
    finally:
        consumer.close()
    return found


def holding(records: list[Message], secret: str) -> list[Message]:
    return [r for r in records if secret.encode() in (r.value() or b"")]


def erased(records: list[Message]) -> list[Message]:
    return [r for r in records if r.value() is None and r.headers() == [(ERASED_HEADER, b"")]]


def tables_holding(url: str, *texts: str) -> list[str]:
    """The tables of the database (the platform's and the app's, a search index's own
    tables included) with a row that holds one of ``texts``."""
    engine = create_store_engine(url)
    found = []
    try:
        names = inspect(engine).get_table_names()
        with engine.connect() as connection:
            for name in names:
                rows = connection.execute(text(f'SELECT * FROM "{name}"'))
                if any(piece in str(tuple(row)) for row in rows for piece in texts):
                    found.append(name)
    finally:
        engine.dispose()
    assert "logs_recent" in names and "ep_checkpoints" in names
    return found
