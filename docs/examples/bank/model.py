"""The bank's rules, as a decider: commands, the state of an account, and how one
becomes the other.

An account is opened once. Deposits are positive. A withdrawal may not take the balance
below zero. Everything here is pure: it reads no log and appends nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bank.events import Deposited, Opened, Withdrawn
from eventplatform.events import Command, CommandRejectedError, Decider, Event


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


BankCommand = Open | Deposit | Withdraw


@dataclass(frozen=True)
class Account:
    opened: bool = False
    balance: int = 0


def evolve(state: Account, event: Event) -> Account:
    match event:
        case Opened():
            return replace(state, opened=True)
        case Deposited(amount=amount):
            return replace(state, balance=state.balance + amount)
        case Withdrawn(amount=amount):
            return replace(state, balance=state.balance - amount)
    return state


def decide(command: BankCommand, state: Account) -> list[Event]:
    match command:
        case Open(account_id=account):
            if state.opened:
                raise CommandRejectedError(f"account {account} is open already")
            return [Opened(account_id=account)]
        case Deposit(account_id=account, amount=amount):
            if not state.opened:
                raise CommandRejectedError(f"account {account} is not open")
            if amount <= 0:
                raise CommandRejectedError(f"a deposit is positive, not {amount}")
            return [Deposited(account_id=account, amount=amount)]
        case Withdraw(account_id=account, amount=amount):
            if not state.opened:
                raise CommandRejectedError(f"account {account} is not open")
            if amount <= 0 or amount > state.balance:
                raise CommandRejectedError(f"account {account} holds {state.balance}, not {amount}")
            return [Withdrawn(account_id=account, amount=amount)]
    raise CommandRejectedError(f"unknown command {command!r}")


def account_of(command: BankCommand) -> str:
    return command.account_id


BANK: Decider[BankCommand, Account] = Decider(initial=Account(), decide=decide, evolve=evolve)
