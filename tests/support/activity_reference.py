"""What the activity app's views must show for a set of sessions, computed directly.

An independent reading of the app's definitions, written without the
projection machinery: plain loops over the sessions' events, in the shapes
:func:`activity_dataset.check_views` compares.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import urlsplit

from eventplatform.apps.activity_tracking.events import (
    ActivityEvent,
    Clicked,
    PageViewed,
    Searched,
    SessionEnded,
    SessionStarted,
)

GRANULARITIES = ("minute", "hour", "day")


def truncated(moment: datetime, granularity: str) -> datetime:
    moment = moment.astimezone(UTC)
    keep = {"minute": 5, "hour": 4, "day": 3}[granularity]
    parts = [moment.year, moment.month, moment.day, moment.hour, moment.minute][:keep]
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type, misc]


def host(referrer: str | None) -> str:
    name = urlsplit(referrer).hostname if referrer else None
    return name.removeprefix("www.") if name else "(direct)"


def path(event: ActivityEvent) -> str:
    return urlsplit(event.url).path or "/"


def expected_views(sessions: Iterable[list[ActivityEvent]]) -> dict[str, dict[Any, Any]]:
    """The views of these sessions (each a list of its events in append order)."""
    views: dict[Any, int] = defaultdict(int)
    visitors: dict[Any, set[str]] = defaultdict(set)
    summary: dict[str, tuple[Any, ...]] = {}
    referrers: dict[tuple[date, str], int] = defaultdict(int)
    funnel: dict[date, list[int]] = defaultdict(lambda: [0, 0, 0])
    terms: dict[tuple[date, str], list[int]] = defaultdict(lambda: [0, 0])
    for events in sessions:
        first = events[0]
        pages = [event for event in events if isinstance(event, PageViewed)]
        for view in pages:
            for granularity in GRANULARITIES:
                key = (granularity, truncated(view.at, granularity), path(view))
                views[key] += 1
                visitors[key].add(view.visitor)
        started = [event for event in events if isinstance(event, SessionStarted)]
        for start in started:
            referrers[(start.at.astimezone(UTC).date(), host(start.referrer))] += 1
        exits = [event for event in events if isinstance(event, PageViewed | SessionEnded)]
        landing = started[0] if started else (pages[0] if pages else None)
        begin, end = min(e.at for e in events), max(e.at for e in events)
        summary[first.session_id] = (
            first.visitor,
            begin,
            end,
            round((end - begin).total_seconds()),
            path(landing) if landing else None,
            path(exits[-1]) if exits else None,
            host(started[0].referrer) if started else None,
            len(events),
            len(pages),
            sum(isinstance(e, Clicked) for e in events),
            sum(isinstance(e, Searched) for e in events),
            1 if any(isinstance(e, SessionEnded) for e in events) else None,
            1 if len(pages) <= 1 else 0,
        )
        if pages:
            step = 0
            for view in pages:
                step = max(step, 1)
                if step == 1 and path(view) == "/pricing":
                    step = 2
                elif step == 2 and path(view) == "/signup":
                    step = 3
            day = min(view.at.astimezone(UTC).date() for view in pages)
            for reached in range(step):
                funnel[day][reached] += 1
        for search in (e for e in events if isinstance(e, Searched)):
            term = " ".join(search.query.lower().split())
            counts = terms[(search.at.astimezone(UTC).date(), term)]
            counts[0] += 1
            counts[1] += search.results == 0
    return {
        "traffic": {key: (views[key], len(visitors[key])) for key in views},
        "sessions": summary,
        "referrers": dict(referrers),
        "funnel": {day: tuple(steps) for day, steps in funnel.items()},
        "terms": {key: tuple(counts) for key, counts in terms.items()},
    }
