"""The traffic simulator: reproducible, diurnal, heavy-tailed, with bots."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta

from eventplatform.apps.activity_tracking.events import PageViewed, SessionStarted
from eventplatform.apps.activity_tracking.simulator import TrafficShape, TrafficSimulator

DAY = datetime(2026, 11, 20, tzinfo=UTC)


def test_the_same_seed_gives_the_same_events() -> None:
    window = (DAY, DAY + timedelta(hours=1))
    first = list(TrafficSimulator(seed=3).events(*window))
    again = list(TrafficSimulator(seed=3).events(*window))
    other = list(TrafficSimulator(seed=4).events(*window))
    assert first and first == again
    assert first != other


def test_a_day_has_its_shapes() -> None:
    shape = TrafficShape(sessions_per_hour=400, peak_hour=15, night_share=0.1, bot_share=0.03)
    sessions = list(TrafficSimulator(shape, seed=11).sessions(DAY, DAY + timedelta(days=1)))
    per_hour = Counter(session.start.hour for session in sessions)
    # diurnal: the afternoon peak far above the small hours
    assert per_hour[15] > 4 * per_hour[3]
    # about the configured rate: the mean of the curve is (1 + night_share) / 2 of the peak
    assert 0.8 < len(sessions) / (24 * 400 * 0.55) < 1.2
    humans = [session for session in sessions if not session.bot]
    bots = [session for session in sessions if session.bot]
    assert 0.015 < len(bots) / len(sessions) < 0.05
    views = Counter(
        event.path
        for session in humans
        for event in session.events
        if isinstance(event, PageViewed)
    )
    top = sum(count for _, count in views.most_common(10))
    assert top > 0.4 * sum(views.values())  # a few pages take most views
    bounces = sum(
        sum(isinstance(event, PageViewed) for event in session.events) == 1 for session in humans
    )
    assert 0.3 < bounces / len(humans) < 0.5
    assert views["/signup"] and views["/pricing"]
    for session in bots:
        assert sum(isinstance(event, PageViewed) for event in session.events) >= 25
        assert "Crawler" in session.events[0].user_agent
    for session in sessions:
        assert isinstance(session.events[0], SessionStarted)
        assert all(a.at <= b.at for a, b in zip(session.events, session.events[1:], strict=False))
        assert {event.session_id for event in session.events} == {session.session_id}


def test_events_come_in_time_order() -> None:
    events = list(TrafficSimulator(seed=5).events(DAY, DAY + timedelta(hours=2)))
    assert all(a.at <= b.at for a, b in itertools.pairwise(events))
