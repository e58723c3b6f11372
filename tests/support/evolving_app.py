"""One projection in two definitions: a balance column added in the second.

``accounts_v1`` counts deposits per account; ``accounts_v2`` is the same
projection (same name, same table) with a ``balance`` column that sums the
amounts, as a user would change it. Tests create its table themselves, then
add the column as the user's migration would.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, MetaData, String, Table

from eventplatform.events import Envelope, Event
from eventplatform.projections.apps import App
from eventplatform.projections.merge import Count, Sum
from eventplatform.projections.model import Projection, Row, merge_column, projection_table

NAME = "evolving.accounts"
TABLE = "ev_accounts"
BALANCE = "balance"
KEY_LENGTH = 100


class Deposited(Event, type="ev.deposited", version=1, key="account"):
    account: str
    amount: int


def accounts_table(*extra: Column[object]) -> Table:
    return projection_table(
        TABLE,
        MetaData(),
        Column("account", String(KEY_LENGTH), primary_key=True),
        merge_column("deposits", BigInteger, Count()),
        *extra,
    )


accounts_v1_table = accounts_table()
accounts_v1 = Projection(NAME, tables=[accounts_v1_table])


@accounts_v1.on(Deposited)
def deposited_v1(envelope: Envelope[Deposited]) -> Row:
    return Row(accounts_v1_table, account=envelope.event.account)


accounts_v2_table = accounts_table(merge_column(BALANCE, BigInteger, Sum()))
accounts_v2 = Projection(NAME, tables=[accounts_v2_table])


@accounts_v2.on(Deposited)
def deposited_v2(envelope: Envelope[Deposited]) -> Row:
    event = envelope.event
    return Row(accounts_v2_table, account=event.account, balance=event.amount)


app_v1 = App(name="evolving", projections=[accounts_v1], event_types=[Deposited])
app_v2 = App(name="evolving", projections=[accounts_v2], event_types=[Deposited])
