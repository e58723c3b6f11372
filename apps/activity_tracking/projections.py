"""The activity app's projections: traffic per page, sessions, referrers, a funnel, searches.

Each table is declared once, for both engines (the streaming runner and
Spark replays). Times are bucketed in UTC. Analysts read the tables through
the views the app's migrations create (see ``docs/analysts.md``):

* ``activity_page_visitors``: one row per (granularity, bucket, page path,
  visitor) with that visitor's views; ``activity_page_traffic`` sums it to
  views and unique visitors per page per minute, hour and day;
* ``activity_sessions``: one row per session (start, last activity, landing
  and exit page, referrer, pages, clicks, searches, whether it ended);
  ``activity_session_summary`` adds its duration and whether it bounced;
* ``activity_session_events``: where each session's events sit in the log
  (what :mod:`.bots` corrects when it retracts a session);
* ``activity_referrers``: sessions per referring host per day (``(direct)``
  when there was no referrer);
* ``activity_funnel``: per session the furthest step of the signup funnel
  it reached in order (1 landed, 2 saw pricing, 3 reached signup);
  ``activity_signup_funnel`` counts sessions per step per day;
* ``activity_search_terms``: searches per normalized term per day, and how
  many found nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import BigInteger, Column, Date, DateTime, Index, Integer, MetaData, String

from eventplatform.apps.activity_tracking.events import (
    ACTIVITY_EVENTS,
    Clicked,
    PageViewed,
    Searched,
    SessionEnded,
    SessionStarted,
)
from eventplatform.events import Envelope
from eventplatform.projections import (
    Count,
    First,
    Fold,
    Latest,
    Max,
    Min,
    Projection,
    Row,
    Sum,
    merge_column,
    projection_table,
)

PATH_MAX = 512
ID_MAX = 128
HOST_MAX = 255
TERM_MAX = 256
GRANULARITIES = ("minute", "hour", "day")
DIRECT = "(direct)"
PRICING_PATH = "/pricing"
SIGNUP_PATH = "/signup"
LANDED, SAW_PRICING, REACHED_SIGNUP = 1, 2, 3

metadata = MetaData()

page_visitors = projection_table(
    "activity_page_visitors",
    metadata,
    Column("granularity", String(8), primary_key=True),
    Column("bucket", DateTime(timezone=True), primary_key=True),
    Column("path", String(PATH_MAX), primary_key=True),
    Column("visitor", String(ID_MAX), primary_key=True),
    merge_column("views", BigInteger, Count()),
)

sessions = projection_table(
    "activity_sessions",
    metadata,
    Column("session_id", String(ID_MAX), primary_key=True),
    merge_column("visitor", String(ID_MAX), First()),
    merge_column("user_agent", String(512), First()),
    merge_column("started_at", DateTime(timezone=True), Min()),
    merge_column("last_seen_at", DateTime(timezone=True), Max()),
    merge_column("landing_path", String(PATH_MAX), First()),
    merge_column("exit_path", String(PATH_MAX), Latest()),
    merge_column("referrer_host", String(HOST_MAX), First()),
    merge_column("events", BigInteger, Count()),
    merge_column("pages", BigInteger, Sum()),
    merge_column("clicks", BigInteger, Sum()),
    merge_column("searches", BigInteger, Sum()),
    merge_column("ended", Integer, Max()),
    Index("activity_sessions_started_at", "started_at"),
)

session_events = projection_table(
    "activity_session_events",
    metadata,
    Column("session_id", String(ID_MAX), primary_key=True),
    Column("event_id", String(36), primary_key=True),
    # one contribution per row, so a sum is the value; sums keep the table off the event index
    merge_column("log_partition", Integer, Sum()),
    merge_column("log_offset", BigInteger, Sum()),
)
"""Where each session's events sit in the log: what a bot retraction corrects."""

referrers = projection_table(
    "activity_referrers",
    metadata,
    Column("day", Date, primary_key=True),
    Column("referrer_host", String(HOST_MAX), primary_key=True),
    merge_column("sessions", BigInteger, Count()),
)


def next_step(step: int, path: str) -> int:
    """The funnel step a session is at after viewing ``path``: any page lands it, then
    the pricing page, then the signup page, each counting only after the one before."""
    if step < LANDED:
        step = LANDED
    if step == LANDED and path == PRICING_PATH:
        return SAW_PRICING
    if step == SAW_PRICING and path == SIGNUP_PATH:
        return REACHED_SIGNUP
    return step


funnel = projection_table(
    "activity_funnel",
    metadata,
    Column("session_id", String(ID_MAX), primary_key=True),
    merge_column("day", Date, Min()),
    merge_column("step", Integer, Fold(next_step, initial=0)),
)

search_terms = projection_table(
    "activity_search_terms",
    metadata,
    Column("day", Date, primary_key=True),
    Column("term", String(TERM_MAX), primary_key=True),
    merge_column("searches", BigInteger, Count()),
    merge_column("without_results", BigInteger, Sum()),
)

traffic = Projection(
    "activity.traffic",
    tables=[page_visitors, referrers, search_terms],
    description="Views and unique visitors per page per minute, hour and day; "
    "sessions per referrer per day; searches per term per day.",
)
visits = Projection(
    "activity.sessions",
    tables=[sessions, funnel, session_events],
    description="One row per session (pages, clicks, searches, landing and exit page, "
    "referrer), and how far each got in the signup funnel.",
)


def bucket(moment: datetime, granularity: str) -> datetime:
    """``moment`` truncated to the start of its minute, hour or day (UTC)."""
    moment = moment.astimezone(UTC)
    if granularity == "minute":
        return moment.replace(second=0, microsecond=0)
    if granularity == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def day_of(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def referrer_host(referrer: str | None) -> str:
    """The referring host in lower case, without ``www.``; ``(direct)`` for none."""
    host = (urlsplit(referrer).hostname or "") if referrer else ""
    return host.removeprefix("www.")[:HOST_MAX] or DIRECT


def search_term(query: str) -> str:
    """A query as counted: lower case, whitespace collapsed."""
    return " ".join(query.lower().split())[:TERM_MAX]


@traffic.on(PageViewed)
def page_traffic(envelope: Envelope[PageViewed]) -> Iterator[Row]:
    view = envelope.event
    path = view.path[:PATH_MAX]
    for granularity in GRANULARITIES:
        yield Row(
            page_visitors,
            granularity=granularity,
            bucket=bucket(view.at, granularity),
            path=path,
            visitor=view.visitor,
        )


@traffic.on(SessionStarted)
def session_referrer(envelope: Envelope[SessionStarted]) -> Row:
    started = envelope.event
    return Row(referrers, day=day_of(started.at), referrer_host=referrer_host(started.referrer))


@traffic.on(Searched)
def searched_term(envelope: Envelope[Searched]) -> Row:
    search = envelope.event
    return Row(
        search_terms,
        day=day_of(search.at),
        term=search_term(search.query),
        without_results=int(search.results == 0),
    )


def _session_rows(envelope: Envelope[Any], **values: Any) -> list[Row]:
    """The event's contribution to its session's row, and where it sits in the log."""
    event = envelope.event
    position = envelope.position
    assert position is not None, "a projected event has its log position"
    return [
        Row(
            sessions,
            session_id=event.session_id,
            visitor=event.visitor,
            user_agent=event.user_agent[:512],
            started_at=event.at,
            last_seen_at=event.at,
            **values,
        ),
        Row(
            session_events,
            session_id=event.session_id,
            event_id=str(envelope.event_id),
            log_partition=position.partition,
            log_offset=position.offset,
        ),
    ]


@visits.on(SessionStarted)
def session_started(envelope: Envelope[SessionStarted]) -> Iterator[Row]:
    started = envelope.event
    landing = started.path[:PATH_MAX]
    yield from _session_rows(
        envelope, landing_path=landing, referrer_host=referrer_host(started.referrer)
    )


@visits.on(PageViewed)
def session_page(envelope: Envelope[PageViewed]) -> Iterator[Row]:
    view = envelope.event
    path = view.path[:PATH_MAX]
    yield from _session_rows(envelope, landing_path=path, exit_path=path, pages=1)
    yield Row(funnel, session_id=view.session_id, day=day_of(view.at), step=path)


@visits.on(Clicked)
def session_click(envelope: Envelope[Clicked]) -> list[Row]:
    return _session_rows(envelope, clicks=1)


@visits.on(Searched)
def session_search(envelope: Envelope[Searched]) -> list[Row]:
    return _session_rows(envelope, searches=1)


@visits.on(SessionEnded)
def session_end(envelope: Envelope[SessionEnded]) -> list[Row]:
    ended = envelope.event
    return _session_rows(envelope, exit_path=ended.path[:PATH_MAX], ended=1)


PROJECTIONS = (traffic, visits)
EVENT_TYPES = ACTIVITY_EVENTS
