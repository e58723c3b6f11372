"""``bank.balances``: per account, its balance and how many events it had."""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import BigInteger, Column, MetaData, String

from bank.events import ACCOUNT_MAX, Deposited, Opened, Withdrawn
from eventplatform.events import Envelope
from eventplatform.projections import Count, Projection, Row, Sum, merge_column, projection_table

metadata = MetaData()

balances_table = projection_table(
    "bank_balances",
    metadata,
    Column("account_id", String(ACCOUNT_MAX), primary_key=True),
    merge_column("balance", BigInteger, Sum()),
    merge_column("events", BigInteger, Count()),
)

balances = Projection(
    "bank.balances",
    tables=[balances_table],
    description="Each account's balance, and how many events it had.",
)


@balances.on(Opened)
def opened_rows(envelope: Envelope[Opened]) -> Iterator[Row]:
    yield Row(balances_table, account_id=envelope.event.account_id, balance=0)


@balances.on(Deposited)
def deposited_rows(envelope: Envelope[Deposited]) -> Iterator[Row]:
    deposit = envelope.event
    yield Row(balances_table, account_id=deposit.account_id, balance=deposit.amount)


@balances.on(Withdrawn)
def withdrawn_rows(envelope: Envelope[Withdrawn]) -> Iterator[Row]:
    withdrawal = envelope.event
    yield Row(balances_table, account_id=withdrawal.account_id, balance=-withdrawal.amount)
