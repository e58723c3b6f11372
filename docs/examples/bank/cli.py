"""``platform apps bank``: open an account, deposit, withdraw, and show a balance, each
command decided against the account's events and appended at its version."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from bank.events import EVENTS, TOPIC
from bank.model import BANK, Account, BankCommand, Deposit, Open, Withdraw, account_of
from eventplatform.cli_support import bootstrap_option
from eventplatform.events import CommandRejectedError, ConcurrencyError, EntityStore, Repository


@contextmanager
def bank(bootstrap: str) -> Iterator[Repository[BankCommand, Account]]:
    with EntityStore(bootstrap, EVENTS) as store:
        yield Repository(store, TOPIC, BANK, account_of)


def handle(bootstrap: str, command: BankCommand) -> Account:
    """Handle ``command``; a rejection or a busy account is a clear error, exit status 1."""
    with bank(bootstrap) as accounts:
        try:
            return accounts.handle(command).state
        except (CommandRejectedError, ConcurrencyError) as exc:
            raise click.ClickException(str(exc)) from exc


@click.group()
def commands() -> None:
    """A bank: accounts that never go below zero."""


account_option = click.option("--account", required=True, help="The account's id.")
amount_option = click.option("--amount", type=click.IntRange(1), required=True)


@commands.command("open")
@bootstrap_option
@account_option
def open_account(bootstrap: str, account: str) -> None:
    """Open an account."""
    handle(bootstrap, Open(account))
    click.echo(f"{account}: opened")


@commands.command()
@bootstrap_option
@account_option
@amount_option
def deposit(bootstrap: str, account: str, amount: int) -> None:
    """Deposit money."""
    state = handle(bootstrap, Deposit(account, amount))
    click.echo(f"{account}: balance {state.balance}")


@commands.command()
@bootstrap_option
@account_option
@amount_option
def withdraw(bootstrap: str, account: str, amount: int) -> None:
    """Withdraw money, never more than the balance."""
    state = handle(bootstrap, Withdraw(account, amount))
    click.echo(f"{account}: balance {state.balance}")


@commands.command()
@bootstrap_option
@account_option
def balance(bootstrap: str, account: str) -> None:
    """Show an account's balance and version, read from its events."""
    with bank(bootstrap) as accounts:
        state, history = accounts.load(account)
    if not state.opened:
        raise click.ClickException(f"account {account} is not open")
    click.echo(f"{account}: balance {state.balance} (version {history.version})")
