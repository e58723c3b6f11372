"""Log aggregation: lines from files, stdin and syslog as events, counted, fingerprinted
and searchable.

``app`` is what the platform installs (through the ``eventplatform.apps``
entry point): the event types of :mod:`.events`, the projection of
:mod:`.projections`, the named queries of :mod:`.queries`, and the Alembic
revisions in ``migrations/`` that create the tables, the search index and
the analysts' views. Its commands (``platform apps logs ...``) are in
:mod:`.cli`, its part of ``platform demo`` in :mod:`.demo`.
"""

from __future__ import annotations

from pathlib import Path

from eventplatform.apps.log_aggregation.events import LogLine, LogsRedacted
from eventplatform.apps.log_aggregation.projections import lines
from eventplatform.apps.log_aggregation.queries import QUERIES
from eventplatform.projections import App

APP_NAME = "logs"

app = App(
    name=APP_NAME,
    projections=[lines],
    event_types=[LogLine, LogsRedacted],
    migrations=Path(__file__).resolve().parent / "migrations",
    queries=QUERIES,
    commands="eventplatform.apps.log_aggregation.cli:commands",
    demo="eventplatform.apps.log_aggregation.demo:demo",
    description="Log aggregation: lines per service and level, error fingerprints, "
    "and the recent lines, searchable by full text.",
)
