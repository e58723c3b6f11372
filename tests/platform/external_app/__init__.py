"""A guestbook: an app written outside the platform's repository, as a user would write it.

It imports only what the platform publishes (``eventplatform.events``,
``eventplatform.projections``, ``eventplatform.cli_support``) and reaches the
platform only through its :class:`~eventplatform.projections.App`: one event
type, one projection, one named query, its Alembic branch, and its commands,
named lazily so the platform imports them only to build ``platform apps``.
The tests load it through ``$EVENTPLATFORM_APPS`` or ``--app``, never by
installing it.
"""

from __future__ import annotations

from pathlib import Path

from eventplatform.projections import App, NamedQuery
from external_app.events import Signed
from external_app.projections import signatures

APP_NAME = "guestbook"

QUERIES = [
    NamedQuery(
        name="signatures",
        sql="SELECT guest, signatures, last_message FROM guestbook_signatures "
        "WHERE guest LIKE :guest ORDER BY guest",
        description="How often each guest signed, and what they wrote last.",
        parameters={"guest": "%"},
    )
]

app = App(
    name=APP_NAME,
    projections=[signatures],
    event_types=[Signed],
    migrations=Path(__file__).resolve().parent / "migrations",
    queries=QUERIES,
    commands="external_app.cli:commands",
    description="A guestbook: who signed, how often, and their last words.",
)
