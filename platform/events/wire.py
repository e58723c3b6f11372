"""The names of the envelope's wire form that readers outside the SDK match on.

A record carrying an event names its type and version in two headers, and its
value starts with the event id as canonical UUID text (see :mod:`.codec`). The
Spark source decodes these straight from record batches, in worker processes
that never build an event, so this module imports nothing: reading the names
costs no pydantic import.
"""

from __future__ import annotations

TYPE_HEADER = "event-type"
"""The record header holding the event's type name (UTF-8)."""
VERSION_HEADER = "event-version"
"""The record header holding the event's schema version (decimal, UTF-8)."""
UUID_TEXT_LENGTH = 36
"""Characters of an id in its canonical text form, as the codec writes it."""
