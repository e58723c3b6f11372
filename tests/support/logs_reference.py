"""The log app's tables and views, read back, and what they must show, computed directly.

:func:`expected` reads the app's definitions with plain loops over the lines
(the fingerprint rules themselves come from :mod:`.fingerprint`, which has
tests of its own); :func:`read_views` reads the database in the same shapes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from activity_dataset import as_utc, number
from sqlalchemy import text

from eventplatform.apps.log_aggregation import app
from eventplatform.apps.log_aggregation.events import LogLine
from eventplatform.apps.log_aggregation.fingerprint import fingerprint, template
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
