"""Finding bot sessions in the projections, and retracting them from the log.

A session is suspected when its user agent names a crawler, or when it
viewed at least ``min_pages`` pages at most ``max_seconds_per_page`` apart on
average: faster than people read. :func:`retract_bots` appends, per
suspected session, the :func:`~.events.bot_retraction` of every event the
``activity_session_events`` table says it has. Once the runners apply
those corrections the session is gone from every table, so running it
again finds nothing more to retract.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlalchemy import select, text

from eventplatform.apps.activity_tracking.events import TOPIC, bot_retraction
from eventplatform.apps.activity_tracking.projections import session_events
from eventplatform.events import EventProducer, EventRef, KafkaConnection, Position
from eventplatform.projections import create_store_engine, reading

CRAWLER_AGENT = re.compile(r"bot|crawl|spider|slurp|scrape", re.IGNORECASE)
MIN_PAGES = 20
MAX_SECONDS_PER_PAGE = 3.0


@dataclass(frozen=True)
class Suspect:
    session_id: str
    pages: int
    duration_s: float
    user_agent: str

    @property
    def reason(self) -> str:
        if CRAWLER_AGENT.search(self.user_agent or ""):
            return f"crawler user agent {self.user_agent!r}"
        return f"{self.pages} pages in {self.duration_s:.0f} s"


def suspected_bots(
    database_url: str,
    *,
    min_pages: int = MIN_PAGES,
    max_seconds_per_page: float = MAX_SECONDS_PER_PAGE,
) -> list[Suspect]:
    """Sessions that look like bots, by session id."""
    query = text(
        "SELECT s.session_id, s.pages, s.duration_s, t.user_agent "
        "FROM activity_session_summary s JOIN activity_sessions t USING (session_id) "
        "WHERE (s.pages >= :pages AND s.duration_s <= s.pages * :seconds) "
        "OR lower(t.user_agent) LIKE '%bot%' OR lower(t.user_agent) LIKE '%crawl%' "
        "OR lower(t.user_agent) LIKE '%spider%' OR lower(t.user_agent) LIKE '%slurp%' "
        "OR lower(t.user_agent) LIKE '%scrape%' "
        "ORDER BY s.session_id"
    )
    engine = create_store_engine(database_url)
    try:
        with reading(engine) as connection:
            rows = connection.execute(query, {"pages": min_pages, "seconds": max_seconds_per_page})
            return [
                Suspect(session, int(pages or 0), float(duration or 0), agent or "")
                for session, pages, duration, agent in rows
            ]
    finally:
        engine.dispose()


def session_refs(database_url: str, session_ids: Sequence[str]) -> dict[str, list[EventRef]]:
    """The log positions of each session's events, in log order."""
    table = session_events
    found: dict[str, list[EventRef]] = {session: [] for session in session_ids}
    engine = create_store_engine(database_url)
    try:
        with reading(engine) as connection:
            rows = connection.execute(
                select(
                    table.c.session_id, table.c.event_id, table.c.log_partition, table.c.log_offset
                )
                .where(table.c.session_id.in_(list(session_ids)))
                .order_by(table.c.session_id, table.c.log_offset)
            )
            for session, event_id, partition, offset in rows:
                position = Position(TOPIC, int(partition), int(offset))
                found[session].append(EventRef(uuid.UUID(event_id), session, position))
    finally:
        engine.dispose()
    return found


@dataclass(frozen=True)
class Retraction:
    session_id: str
    reason: str
    events: int
    appended: tuple[EventRef, ...] = ()
    """The retraction's own events, once appended (none on a dry run)."""


def retract_bots(
    database_url: str,
    bootstrap: KafkaConnection,
    *,
    min_pages: int = MIN_PAGES,
    max_seconds_per_page: float = MAX_SECONDS_PER_PAGE,
    dry_run: bool = False,
) -> list[Retraction]:
    """Retract every suspected bot session (with ``dry_run``, only say which)."""
    suspects = suspected_bots(
        database_url, min_pages=min_pages, max_seconds_per_page=max_seconds_per_page
    )
    refs = session_refs(database_url, [suspect.session_id for suspect in suspects])
    done = [
        Retraction(suspect.session_id, suspect.reason, len(refs[suspect.session_id]))
        for suspect in suspects
        if refs[suspect.session_id]
    ]
    if dry_run or not done:
        return done
    appended = []
    with EventProducer(bootstrap) as producer:
        for retraction in done:
            events = refs[retraction.session_id]
            written = producer.append(
                bot_retraction(retraction.session_id, events, retraction.reason)
            )
            appended.append(replace(retraction, appended=tuple(written)))
    return appended
