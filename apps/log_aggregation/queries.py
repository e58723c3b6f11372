"""The log app's named queries: ``platform query logs.<name> [--since 1h] [--param ...]``.

``search`` finds the recent lines holding a phrase (``--param q="connection
refused"``): its words, in that order, as whole words, case-insensitively.
It runs on the FTS5 index on SQLite and the ``tsvector`` index on PostgreSQL.
"""

from __future__ import annotations

from eventplatform.projections import NamedQuery

LIMIT_DEFAULT = 20
RANK_OFFSET_BITS = 40
"""The search index's rowid is ``log_partition << 40 | log_offset``."""

SEARCH_COLUMNS = "r.at, r.service, r.host, r.level, r.message"
SEARCH_TAIL = " AND r.at >= :since ORDER BY r.at DESC, r.log_offset DESC LIMIT :limit"

QUERIES = (
    NamedQuery(
        "volume",
        "SELECT service, level, SUM(lines) AS lines FROM logs_counts WHERE minute >= :since "
        "GROUP BY service, level ORDER BY service, lines DESC, level",
        "Lines per service and level over the window.",
        since_default="1h",
    ),
    NamedQuery(
        "errors",
        "SELECT service, fingerprint, template, lines, first_seen, last_seen "
        "FROM logs_error_fingerprints WHERE last_seen >= :since "
        "ORDER BY lines DESC, service, fingerprint LIMIT :limit",
        "The most frequent error fingerprints seen in the window (message templates with "
        "the variable parts masked), with first and last seen over the topic's retention.",
        since_default="1d",
        parameters={"limit": LIMIT_DEFAULT},
    ),
    NamedQuery(
        "search",
        f"SELECT {SEARCH_COLUMNS} FROM logs_recent r WHERE r.message LIKE :q" + SEARCH_TAIL,
        "The newest lines in the window holding the phrase --param q=... (whole words, "
        "in order, any case), by full-text index.",
        since_default="1d",
        parameters={"q": "", "limit": LIMIT_DEFAULT},
        dialect_sql={
            "sqlite": f"SELECT {SEARCH_COLUMNS} FROM logs_recent r "
            "WHERE (r.log_partition, r.log_offset) IN ("
            f"SELECT rowid >> {RANK_OFFSET_BITS}, rowid & ((1 << {RANK_OFFSET_BITS}) - 1) "
            "FROM logs_recent_search WHERE logs_recent_search MATCH "
            "'\"' || replace(:q, '\"', '\"\"') || '\"')" + SEARCH_TAIL,
            "postgresql": f"SELECT {SEARCH_COLUMNS} FROM logs_recent r "
            "WHERE to_tsvector('simple', r.message) @@ phraseto_tsquery('simple', :q)"
            + SEARCH_TAIL,
        },
    ),
    NamedQuery(
        "recent",
        "SELECT at, service, host, level, message FROM logs_recent "
        "WHERE at >= :since AND (:service = '' OR service = :service) "
        "ORDER BY at DESC, log_offset DESC LIMIT :limit",
        "The newest lines in the window, of one service with --param service=...",
        since_default="15m",
        parameters={"service": "", "limit": LIMIT_DEFAULT},
    ),
)
