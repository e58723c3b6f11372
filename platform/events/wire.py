"""The names of the envelope's wire form that readers outside the SDK match on.

A record carrying an event names its type and version in two headers, and its
value starts with the event id as canonical UUID text (see :mod:`.codec`). The
Spark source decodes these straight from record batches, in worker processes
that never build an event, so this module imports nothing but the log's own
names (:mod:`eventplatform.log.extensions`, which imports nothing either):
reading the names costs no pydantic import.

A record the log erased holds no event: its value is null and its one header is
:data:`ERASED_HEADER`. :func:`is_erased` is the one test every reader applies.
"""

from __future__ import annotations

from collections.abc import Iterable

from eventplatform.log.extensions import ERASED_HEADER as ERASED_HEADER

TYPE_HEADER = "event-type"
"""The record header holding the event's type name (UTF-8)."""
VERSION_HEADER = "event-version"
"""The record header holding the event's schema version (decimal, UTF-8)."""
UUID_TEXT_LENGTH = 36
"""Characters of an id in its canonical text form, as the codec writes it."""


def is_erased(headers: Iterable[tuple[str, object]] | None, value: bytes | None) -> bool:
    """Whether a record with these headers and value was erased from the log.

    The log empties an erased record in place: it keeps its offset, timestamp and key,
    its value becomes null and its headers the one :data:`ERASED_HEADER`. Such a record
    is no event and no malformed one either: readers skip it, and its offset counts as
    read. A null value that carries the header is taken as erased whatever other
    headers come with it, since there is no event in it to read either way.
    """
    if value is not None or not headers:
        return False
    return any(name == ERASED_HEADER for name, _ in headers)
