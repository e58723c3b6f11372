"""The activity app's named queries: ``platform query activity.<name> [--since 1h]``.

Each runs on SQLite and PostgreSQL alike, over the views and tables of
``docs/analysts.md``. ``:since`` is the window's start; ``:since_day`` its
UTC day, for the tables kept per day.
"""

from __future__ import annotations

from eventplatform.projections import NamedQuery

LIMIT_DEFAULT = 10

QUERIES = (
    NamedQuery(
        "top-pages",
        "SELECT path, SUM(views) AS views, COUNT(DISTINCT visitor) AS visitors "
        "FROM activity_page_visitors "
        "WHERE granularity = 'minute' AND bucket >= :since AND views > 0 "
        "GROUP BY path ORDER BY views DESC, path LIMIT :limit",
        "The most viewed pages since the window's start, with their unique visitors.",
        since_default="1d",
        parameters={"limit": LIMIT_DEFAULT},
    ),
    NamedQuery(
        "sessions",
        "SELECT COUNT(*) AS sessions, SUM(bounced) AS bounced, "
        "AVG(pages) AS pages_per_session, AVG(duration_s) AS seconds_per_session "
        "FROM activity_session_summary WHERE started_at >= :since",
        "Sessions started in the window: how many, how many bounced, pages and seconds each.",
        since_default="1d",
    ),
    NamedQuery(
        "top-referrers",
        "SELECT referrer_host, SUM(sessions) AS sessions FROM activity_referrers "
        "WHERE day >= :since_day GROUP BY referrer_host "
        "ORDER BY sessions DESC, referrer_host LIMIT :limit",
        "Sessions per referring host, whole UTC days from the window's start's day.",
        since_default="7d",
        parameters={"limit": LIMIT_DEFAULT},
    ),
    NamedQuery(
        "signup-funnel",
        "SELECT day, landed, saw_pricing, reached_signup FROM activity_signup_funnel "
        "WHERE day >= :since_day ORDER BY day",
        "Per UTC day, sessions that landed, then saw /pricing, then reached /signup.",
        since_default="7d",
    ),
    NamedQuery(
        "search-terms",
        "SELECT term, SUM(searches) AS searches, SUM(without_results) AS without_results "
        "FROM activity_search_terms WHERE day >= :since_day GROUP BY term "
        "ORDER BY searches DESC, term LIMIT :limit",
        "The most searched terms, and how often each found nothing, per whole UTC day.",
        since_default="7d",
        parameters={"limit": LIMIT_DEFAULT},
    ),
)
