"""Website activity tracking: page views, clicks, searches and sessions, as events.

``app`` is what the platform installs (through the ``eventplatform.apps``
entry point): the event types of :mod:`.events`, the projections of
:mod:`.projections`, and the Alembic revisions in ``migrations/`` that
create their tables and the analysts' views. Its commands (``platform apps
activity ...``) are in :mod:`.cli`, its part of ``platform demo`` in :mod:`.demo`.
"""

from __future__ import annotations

from pathlib import Path

from eventplatform.apps.activity_tracking.events import ACTIVITY_EVENTS, BotTrafficRetracted
from eventplatform.apps.activity_tracking.projections import traffic, visits
from eventplatform.apps.activity_tracking.queries import QUERIES
from eventplatform.projections import App

APP_NAME = "activity"

app = App(
    name=APP_NAME,
    projections=[traffic, visits],
    event_types=[*ACTIVITY_EVENTS, BotTrafficRetracted],
    migrations=Path(__file__).resolve().parent / "migrations",
    queries=QUERIES,
    commands="eventplatform.apps.activity_tracking.cli:commands",
    demo="eventplatform.apps.activity_tracking.demo:demo",
    description="Website activity: traffic per page, sessions, referrers, a signup funnel "
    "and search terms.",
)
