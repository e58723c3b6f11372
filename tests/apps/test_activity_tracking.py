"""The activity app end to end: events through a real broker, both projections run by
the streaming runner, the analysts' views checked against a day worked out by hand.

A bot session is appended and then retracted with :func:`bot_retraction`;
every table and view must read as if it had never been sent.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import activity_dataset as data
import pytest
from activity_reference import expected_views
from projection_threads import apply_all

from eventplatform.apps.activity_tracking import app
from eventplatform.apps.activity_tracking.bots import retract_bots, suspected_bots
from eventplatform.apps.activity_tracking.events import PageViewed
from eventplatform.apps.activity_tracking.simulator import TrafficShape, TrafficSimulator
from eventplatform.events import EventProducer, EventRef
from eventplatform.projections import migrate
from eventplatform.testing import BrokerProcess, fresh_database, running_broker

SIM_START = datetime(2026, 11, 21, 13, 0, tzinfo=UTC)
SIM_END = datetime(2026, 11, 21, 14, 0, tzinfo=UTC)
RETRACT_TIMEOUT_S = 180.0


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_the_runner_folds_the_day_as_worked_out_by_hand(
    kind: str, activity_broker: BrokerProcess, activity_day: list[EventRef], tmp_path: Path
) -> None:
    broker, appended = activity_broker, activity_day
    with fresh_database(kind, tmp_path) as url:
        migrate.upgrade(url, [app])
        for projection in app.projections:  # a correction reads its event back from the log
            apply_all(projection.name, [app], url, broker.bootstrap, appended, RETRACT_TIMEOUT_S)
        data.check_against_the_story(url)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_simulated_traffic_with_its_bots_retracted_matches_the_reference(
    kind: str, tmp_path: Path
) -> None:
    shape = TrafficShape(sessions_per_hour=500, bot_share=0.04, bot_pages=(20, 30))
    sessions = list(TrafficSimulator(shape, seed=20261124).sessions(SIM_START, SIM_END))
    bots = {session.session_id for session in sessions if session.bot}
    assert bots and len(sessions) > 300
    events = sorted((event for session in sessions for event in session.events), key=lambda e: e.at)
    with (
        running_broker(tmp_path / "broker", data.BROKER_OVERRIDES) as broker,
        fresh_database(kind, tmp_path) as url,
    ):
        with EventProducer(broker.bootstrap) as producer:
            refs = producer.append(events)
        migrate.upgrade(url, [app])
        for projection in app.projections:
            apply_all(projection.name, [app], url, broker.bootstrap, refs)
        assert {s.session_id for s in suspected_bots(url)} == bots

        retracted = retract_bots(url, broker.bootstrap)

        assert {r.session_id for r in retracted} == bots
        appended = [ref for r in retracted for ref in r.appended]
        for projection in app.projections:  # a correction reads its event back from the log
            apply_all(projection.name, [app], url, broker.bootstrap, appended, RETRACT_TIMEOUT_S)
        humans = [session.events for session in sessions if not session.bot]
        assert data.read_views(url) == expected_views(humans)
        assert suspected_bots(url) == []
        assert retract_bots(url, broker.bootstrap) == []


def test_page_views_need_a_visitor() -> None:
    with pytest.raises(ValueError, match=r"user_id .* or anonymous_id"):
        PageViewed(url="https://shop.example/", session_id="s", at=data.at(1, 0, 0))
