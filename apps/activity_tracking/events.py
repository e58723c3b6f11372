"""What a website's visitors do, as events: page views, clicks, searches, sessions.

Every event carries the page's URL, the visitor (a signed-in user's id, or
the anonymous id a first visit gets), the session, the user agent and the
moment it happened. Events are keyed by session, so a session's events sit
in one partition in the order they were appended, and a correction of any
of them lands there too.

A session found to be a bot is retracted as a whole:
:func:`bot_retraction` turns the session's event references into one
retracting :class:`~eventplatform.events.Correction` per event, each with
the reason, after a :class:`BotTrafficRetracted` that records the decision.
Projections then read the session as if it had never been sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from urllib.parse import urlsplit

from pydantic import AwareDatetime, Field, model_validator

from eventplatform.events import Correction, Event, EventRef

TOPIC = "activity"
URL_MAX = 2048
ID_MAX = 128
TEXT_MAX = 512
QUERY_MAX = 256


class ActivityEvent(Event):
    """What every activity event carries (abstract: append one of its subclasses)."""

    url: str = Field(min_length=1, max_length=URL_MAX)
    session_id: str = Field(min_length=1, max_length=ID_MAX)
    user_id: str | None = Field(default=None, min_length=1, max_length=ID_MAX)
    anonymous_id: str | None = Field(default=None, min_length=1, max_length=ID_MAX)
    user_agent: str = Field(default="", max_length=TEXT_MAX)
    at: AwareDatetime

    @model_validator(mode="after")
    def _someone(self) -> ActivityEvent:
        if self.user_id is None and self.anonymous_id is None:
            raise ValueError("give user_id (signed in) or anonymous_id")
        return self

    @property
    def visitor(self) -> str:
        """Who: the user id when signed in, else the anonymous id."""
        return self.user_id or self.anonymous_id or ""

    @property
    def path(self) -> str:
        """The URL's path, without query or fragment (``/`` for none)."""
        return urlsplit(self.url).path or "/"


class SessionStarted(ActivityEvent, type="activity.session_started", key="session_id", topic=TOPIC):
    """A visit began on ``url`` (the landing page), coming from ``referrer``."""

    referrer: str | None = Field(default=None, max_length=URL_MAX)


class PageViewed(ActivityEvent, type="activity.page_viewed", key="session_id", topic=TOPIC):
    referrer: str | None = Field(default=None, max_length=URL_MAX)
    title: str = Field(default="", max_length=TEXT_MAX)


class Clicked(ActivityEvent, type="activity.clicked", key="session_id", topic=TOPIC):
    """A click on ``target`` (an element id or a link) on the page at ``url``."""

    target: str = Field(min_length=1, max_length=TEXT_MAX)


class Searched(ActivityEvent, type="activity.searched", key="session_id", topic=TOPIC):
    query: str = Field(max_length=QUERY_MAX)
    results: int = Field(ge=0)


class SessionEnded(ActivityEvent, type="activity.session_ended", key="session_id", topic=TOPIC):
    """The visit ended on ``url`` (the exit page)."""


class BotTrafficRetracted(
    Event, type="activity.bot_traffic_retracted", key="session_id", topic=TOPIC
):
    """Session ``session_id`` was a bot: its ``events`` are retracted by corrections."""

    session_id: str = Field(min_length=1, max_length=ID_MAX)
    reason: str = Field(min_length=1, max_length=TEXT_MAX)
    events: int = Field(ge=0)
    decided_at: AwareDatetime


ACTIVITY_EVENTS: tuple[type[ActivityEvent], ...] = (
    SessionStarted,
    PageViewed,
    Clicked,
    Searched,
    SessionEnded,
)


def bot_retraction(
    session_id: str, events: Sequence[EventRef], reason: str, *, now: datetime | None = None
) -> list[Event]:
    """The events that retract bot session ``session_id``: the decision, then one
    retracting correction per event of the session (``events``, as appended)."""
    foreign = [ref for ref in events if ref.key != session_id]
    if foreign:
        raise ValueError(f"{foreign[0]} is not an event of session {session_id!r}")
    decided = BotTrafficRetracted(
        session_id=session_id,
        reason=reason,
        events=len(events),
        decided_at=now or datetime.now(UTC),
    )
    text = f"bot traffic: {reason}"
    corrections = [Correction(of=ref, retract=True, reason=text) for ref in events]  # type: ignore[arg-type]
    return [decided, *corrections]
