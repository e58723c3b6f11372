"""The guestbook's one event: a guest signed it."""

from __future__ import annotations

from eventplatform.events import Event

TOPIC = "guestbook"
GUEST_MAX = 100


class Signed(Event, type="guestbook.signed", version=1, key="guest", topic=TOPIC):
    guest: str
    message: str
