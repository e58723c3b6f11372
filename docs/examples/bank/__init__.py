"""A bank, the example of ``docs/entities.md``: accounts opened, deposited to and
withdrawn from, never below zero, decided against their events with expected versions.

It is an app as a team would write one outside the platform: it imports only what the
platform publishes, and the platform finds it through ``$EVENTPLATFORM_APPS=bank`` or
``--app bank`` (with ``docs/examples`` on ``PYTHONPATH``). Its parts:

- ``bank.events``: the events;
- ``bank.model``: the rules, as a decider (pure);
- ``bank.projections``: the ``bank_balances`` table, from the events;
- ``bank.cli``: ``platform apps bank open|deposit|withdraw|balance``;
- ``migrations/``: its Alembic branch.
"""

from __future__ import annotations

from pathlib import Path

from bank.events import EVENTS
from bank.projections import balances
from eventplatform.projections import App, NamedQuery

QUERIES = [
    NamedQuery(
        name="balances",
        sql="SELECT account_id, balance, events FROM bank_balances "
        "WHERE account_id LIKE :account ORDER BY account_id",
        description="Each account's balance, and how many events it had.",
        parameters={"account": "%"},
    )
]

app = App(
    name="bank",
    projections=[balances],
    event_types=EVENTS,
    migrations=Path(__file__).resolve().parent / "migrations",
    queries=QUERIES,
    commands="bank.cli:commands",
    description="A bank: accounts that never go below zero.",
)
