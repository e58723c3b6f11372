"""The bank's events: an account was opened, money was deposited, money was withdrawn."""

from __future__ import annotations

from eventplatform.events import Event

TOPIC = "bank"
ACCOUNT_MAX = 100


class Opened(Event, type="bank.opened", version=1, key="account_id", topic=TOPIC):
    account_id: str


class Deposited(Event, type="bank.deposited", version=1, key="account_id", topic=TOPIC):
    account_id: str
    amount: int


class Withdrawn(Event, type="bank.withdrawn", version=1, key="account_id", topic=TOPIC):
    account_id: str
    amount: int


EVENTS = [Opened, Deposited, Withdrawn]
