"""A small, fixed day of website activity, and what its projections must hold, by hand.

Four real sessions and one bot session on 2026-11-20 (UTC):

* ``s1``: anonymous ``a1`` from Google lands on ``/``, reads ``/pricing``,
  clicks signup, reaches ``/signup`` and leaves: the whole funnel;
* ``s2``: signed-in ``u7`` comes directly to ``/docs``, searches twice (one
  search finds nothing) and an hour later opens ``/pricing``;
* ``s3``: anonymous ``a2`` from Hacker News sees ``/`` and nothing else (a
  bounce, never ended);
* ``s4``: ``a1`` again, directly, sees ``/`` and leaves (a bounce);
* ``bot``: three views of ``/`` and a search from a spam referrer, retracted
  afterwards as bot traffic: it must leave no trace.

Every expectation below is worked out by hand from that story.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import text

from eventplatform.apps.activity_tracking.events import (
    ActivityEvent,
    Clicked,
    PageViewed,
    Searched,
    SessionEnded,
    SessionStarted,
    bot_retraction,
)
from eventplatform.events import EventProducer, EventRef
from eventplatform.projections.database import create_store_engine

DAY = date(2026, 11, 20)
SITE = "https://shop.example"
BOT_SESSION = "bot"


def at(hour: int, minute: int, second: int) -> datetime:
    return datetime(2026, 11, 20, hour, minute, second, tzinfo=UTC)


def _who(session: str) -> dict[str, Any]:
    people = {"s1": ("anonymous_id", "a1"), "s2": ("user_id", "u7"), "s3": ("anonymous_id", "a2")}
    people |= {"s4": ("anonymous_id", "a1"), BOT_SESSION: ("anonymous_id", "b1")}
    field, value = people[session]
    return {"session_id": session, field: value, "user_agent": f"agent-{session}"}


def events() -> list[ActivityEvent]:
    """The real sessions' events, in the order they are appended."""
    s1, s2, s3, s4 = (_who(s) for s in ("s1", "s2", "s3", "s4"))
    google = "https://www.google.com/search?q=shop"
    return [
        SessionStarted(url=f"{SITE}/", referrer=google, at=at(10, 0, 5), **s1),
        PageViewed(url=f"{SITE}/", referrer=google, at=at(10, 0, 5), **s1),
        SessionStarted(url=f"{SITE}/docs", at=at(10, 0, 30), **s2),
        PageViewed(url=f"{SITE}/docs", at=at(10, 0, 30), **s2),
        PageViewed(url=f"{SITE}/pricing?plan=pro", at=at(10, 0, 40), **s1),
        SessionStarted(
            url=f"{SITE}/",
            referrer="https://news.ycombinator.com/item?id=1",
            at=at(10, 0, 50),
            **s3,
        ),
        PageViewed(url=f"{SITE}/", at=at(10, 0, 50), **s3),
        Searched(url=f"{SITE}/docs", query="  Install  Guide ", results=3, at=at(10, 0, 50), **s2),
        SessionStarted(url=f"{SITE}/", at=at(10, 0, 59), **s4),
        PageViewed(url=f"{SITE}/#top", at=at(10, 0, 59), **s4),
        Searched(url=f"{SITE}/docs", query="nothing here", results=0, at=at(10, 1, 0), **s2),
        Clicked(url=f"{SITE}/pricing", target="signup-button", at=at(10, 1, 10), **s1),
        PageViewed(url=f"{SITE}/signup", at=at(10, 1, 12), **s1),
        SessionEnded(url=f"{SITE}/", at=at(10, 1, 30), **s4),
        SessionEnded(url=f"{SITE}/signup", at=at(10, 2, 0), **s1),
        PageViewed(url=f"{SITE}/pricing", at=at(11, 0, 10), **s2),
    ]


def bot_events() -> list[ActivityEvent]:
    bot = _who(BOT_SESSION)
    spam = "https://spam.example/"
    return [
        SessionStarted(url=f"{SITE}/", referrer=spam, at=at(10, 0, 10), **bot),
        *(PageViewed(url=f"{SITE}/", at=at(10, 0, 10 + n), **bot) for n in range(3)),
        Searched(url=f"{SITE}/", query="cheap", results=0, at=at(10, 0, 14), **bot),
    ]


BOT_REASON = "a burst of views from a spam referrer"
BROKER_OVERRIDES = ["num.partitions=3", "group.initial.rebalance.delay.ms=0"]


def append_day(bootstrap: str) -> list[EventRef]:
    """Append every event of the day, the bot's included, then the bot's retraction."""
    with EventProducer(bootstrap) as producer:
        refs = producer.append(events())
        bot = producer.append(bot_events())
        return [*refs, *bot, *producer.append(bot_retraction(BOT_SESSION, bot, BOT_REASON))]


def minute(hour: int, minute_: int) -> datetime:
    return at(hour, minute_, 0)


PAGE_TRAFFIC = {
    # (granularity, bucket, path): (views, unique visitors)
    ("minute", minute(10, 0), "/"): (3, 2),
    ("minute", minute(10, 0), "/docs"): (1, 1),
    ("minute", minute(10, 0), "/pricing"): (1, 1),
    ("minute", minute(10, 1), "/signup"): (1, 1),
    ("minute", minute(11, 0), "/pricing"): (1, 1),
    ("hour", minute(10, 0), "/"): (3, 2),
    ("hour", minute(10, 0), "/docs"): (1, 1),
    ("hour", minute(10, 0), "/pricing"): (1, 1),
    ("hour", minute(10, 0), "/signup"): (1, 1),
    ("hour", minute(11, 0), "/pricing"): (1, 1),
    ("day", at(0, 0, 0), "/"): (3, 2),
    ("day", at(0, 0, 0), "/docs"): (1, 1),
    ("day", at(0, 0, 0), "/pricing"): (2, 2),
    ("day", at(0, 0, 0), "/signup"): (1, 1),
}

SESSION_COLUMNS = (
    "visitor started last_seen duration_s landing exit referrer events pages clicks searches "
    "ended bounced"
)
SESSIONS = {
    "s1": ("a1", at(10, 0, 5), at(10, 2, 0), 115, "/", "/signup", "google.com", 6, 3, 1, 0, 1, 0),
    "s2": (
        *("u7", at(10, 0, 30), at(11, 0, 10), 3580, "/docs", "/pricing", "(direct)"),
        *(5, 2, 0, 2, None, 0),
    ),
    "s3": (
        *("a2", at(10, 0, 50), at(10, 0, 50), 0, "/", "/", "news.ycombinator.com"),
        *(2, 1, 0, 0, None, 1),
    ),
    "s4": ("a1", at(10, 0, 59), at(10, 1, 30), 31, "/", "/", "(direct)", 3, 1, 0, 0, 1, 1),
}
"""Per session, in the order of ``SESSION_COLUMNS``."""

REFERRERS = {(DAY, "google.com"): 1, (DAY, "(direct)"): 2, (DAY, "news.ycombinator.com"): 1}
FUNNEL = {DAY: (4, 2, 1)}  # landed, saw pricing, reached signup
SEARCH_TERMS = {(DAY, "install guide"): (1, 0), (DAY, "nothing here"): (1, 1)}


def number(value: Any) -> Any:
    """A SQL number as a Python int where it is whole (drivers differ: Decimal, float)."""
    if isinstance(value, Decimal | float) and value == int(value):
        return int(value)
    return value


# Reading the views back ------------------------------------------------------


def views(url: str) -> dict[str, list[tuple[Any, ...]]]:
    queries = {
        "traffic": "SELECT granularity, bucket, path, views, visitors FROM activity_page_traffic",
        "sessions": "SELECT session_id, visitor, started_at, last_seen_at, duration_s, "
        "landing_path, exit_path, referrer_host, events, pages, clicks, searches, ended, "
        "bounced FROM activity_session_summary",
        "referrers": "SELECT day, referrer_host, sessions FROM activity_referrers",
        "funnel": "SELECT day, landed, saw_pricing, reached_signup FROM activity_signup_funnel",
        "terms": "SELECT day, term, searches, without_results FROM activity_search_terms",
    }
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            return {
                name: [tuple(row) for row in connection.execute(text(query))]
                for name, query in queries.items()
            }
    finally:
        engine.dispose()


def as_utc(value: Any) -> Any:
    """A time read back from either database as an aware UTC datetime (SQLite's are naive)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    assert isinstance(value, date)
    return value


def as_day(value: Any) -> Any:
    return date.fromisoformat(value) if isinstance(value, str) else value


def read_views(url: str) -> dict[str, dict[Any, Any]]:
    """The app's views, as dicts keyed as the expectations are (times as aware UTC)."""
    found = views(url)
    return {
        "traffic": {
            (g, as_utc(bucket), path): (number(v), number(u))
            for g, bucket, path, v, u in found["traffic"]
        },
        "sessions": {
            row[0]: (
                row[1],
                as_utc(row[2]),
                as_utc(row[3]),
                round(float(row[4])),
                *row[5:8],
                *(number(value) for value in row[8:]),
            )
            for row in found["sessions"]
        },
        "referrers": {(as_day(d), h): number(n) for d, h, n in found["referrers"]},
        "funnel": {as_day(d): tuple(map(number, rest)) for d, *rest in found["funnel"]},
        "terms": {(as_day(d), t): (number(n), number(z)) for d, t, n, z in found["terms"]},
    }


def check_against_the_story(url: str) -> None:
    assert read_views(url) == {
        "traffic": PAGE_TRAFFIC,
        "sessions": SESSIONS,
        "referrers": REFERRERS,
        "funnel": FUNNEL,
        "terms": SEARCH_TERMS,
    }
