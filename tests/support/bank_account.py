"""A bank account as the entity tests write it: events, commands, state and decider.

Accounts are opened, deposited to and withdrawn from, never below zero. The events go to
the topic ``bank-test``; tests keep apart by their account ids.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from eventplatform.events import Event
from eventplatform.events.deciders import Command, CommandRejectedError, Decider

TOPIC = "bank-test"


class Opened(Event, type="bank.opened", key="account_id", topic=TOPIC):
    account_id: str


class Deposited(Event, type="bank.deposited", key="account_id", topic=TOPIC):
    account_id: str
    amount: int


class Withdrawn(Event, type="bank.withdrawn", key="account_id", topic=TOPIC):
    account_id: str
    amount: int


@dataclass(frozen=True)
class Open(Command):
    account_id: str


@dataclass(frozen=True)
class Deposit(Command):
    account_id: str
    amount: int


@dataclass(frozen=True)
class Withdraw(Command):
    account_id: str
    amount: int


@dataclass(frozen=True)
class Account:
    opened: bool = False
    balance: int = 0


def evolve(state: Account, event: Event) -> Account:
    match event:
        case Opened():
            return Account(opened=True)
        case Deposited(amount=amount):
            return replace(state, balance=state.balance + amount)
        case Withdrawn(amount=amount):
            return replace(state, balance=state.balance - amount)
    return state


def decide(command: Command, state: Account) -> list[Event]:
    match command:
        case Open(account_id=account):
            if state.opened:
                raise CommandRejectedError(f"account {account} is open already")
            return [Opened(account_id=account)]
        case Deposit(account_id=account, amount=amount):
            return [Deposited(account_id=account, amount=amount)]
        case Withdraw(account_id=account, amount=amount):
            if amount > state.balance:
                raise CommandRejectedError(f"account {account} holds {state.balance}, not {amount}")
            return [Withdrawn(account_id=account, amount=amount)]
    raise CommandRejectedError(f"unknown command {command!r}")


BANK = Decider(initial=Account(), decide=decide, evolve=evolve)
