"""``guestbook.signatures``: per guest, how often they signed and their last message."""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import BigInteger, Column, MetaData, String, Text

from eventplatform.events import Envelope
from eventplatform.projections import Count, Latest, Projection, Row, merge_column, projection_table
from external_app.events import GUEST_MAX, Signed

metadata = MetaData()

signatures_table = projection_table(
    "guestbook_signatures",
    metadata,
    Column("guest", String(GUEST_MAX), primary_key=True),
    merge_column("signatures", BigInteger, Count()),
    merge_column("last_message", Text, Latest()),
)

signatures = Projection(
    "guestbook.signatures",
    tables=[signatures_table],
    description="How often each guest signed, and their last message.",
)


@signatures.on(Signed)
def signature_rows(envelope: Envelope[Signed]) -> Iterator[Row]:
    signed = envelope.event
    yield Row(signatures_table, guest=signed.guest, last_message=signed.message)
