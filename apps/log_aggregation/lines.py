"""Reading one line of a log file (or of stdin) as a :class:`~.events.LogLine`.

Two shapes are understood, and anything else is kept whole as the message:

* a JSON object per line: ``level`` (or ``severity``, ``lvl``), ``message``
  (or ``msg``), the time in ``time``, ``timestamp``, ``ts`` or
  ``@timestamp`` (RFC 3339, or seconds or milliseconds since the epoch),
  ``service`` and ``host`` if present; every other field becomes an
  attribute, as text;
* plain text: an optional leading RFC 3339 time (``2026-11-25T10:00:00Z``,
  or with a space and a comma before the fraction), then an optional level
  (``ERROR``, ``[warn]``, ``level=info``), then the message.

Secrets in known shapes are masked before the line is made (:mod:`.secrets`).
A line never fails: no level reads as ``info``, no time as the moment it was
read, a message over :data:`~.events.MESSAGE_MAX` characters is cut (with
the attribute ``truncated``), and a field the event refuses is left out.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson

from eventplatform.apps.log_aggregation.events import (
    ATTRIBUTE_KEY_MAX,
    ATTRIBUTE_VALUE_MAX,
    ATTRIBUTES_MAX,
    MESSAGE_MAX,
    NAME_MAX,
    Level,
    LogLine,
    level_of,
)
from eventplatform.apps.log_aggregation.secrets import redact_line

TIME_PREFIX = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?(?=\s|$)"
)
LEVEL_PREFIX = re.compile(r"^\[?(?:level=)?([A-Za-z]{3,11})\]?:?(?:\s+|$)")
LEVEL_FIELDS = ("level", "severity", "lvl", "loglevel")
MESSAGE_FIELDS = ("message", "msg")
TIME_FIELDS = ("time", "timestamp", "ts", "@timestamp")
MILLISECONDS_AFTER = 1e11
"""An epoch number above this is in milliseconds (1e11 seconds is the year 5138)."""


def parse_line(text: str, service: str, host: str, now: datetime) -> LogLine:
    """The log line ``text`` (without its newline) as an event of ``service`` on ``host``."""
    text = text.rstrip("\r")
    if text.startswith("{"):
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError:
            document = None
        if isinstance(document, dict):
            return _from_json(document, service, host, now)
    return _from_plain(text, service, host, now)


def _from_plain(text: str, service: str, host: str, now: datetime) -> LogLine:
    rest, at = text, None
    stamp = TIME_PREFIX.match(text)
    if stamp is not None:
        at = _time(stamp.group())
        if at is not None:  # a time that does not parse stays in the message
            rest = text[stamp.end() :].lstrip()
    level = None
    word = LEVEL_PREFIX.match(rest)
    if word is not None:
        level = level_of(word.group(1))
        if level is not None:  # a first word that is no level is the message's
            rest = rest[word.end() :]
    return _line(service, host, level or "info", rest, {}, at or now)


def _from_json(document: dict[str, Any], service: str, host: str, now: datetime) -> LogLine:
    fields = dict(document)
    level_text = _pop_first(fields, LEVEL_FIELDS)
    level = level_of(str(level_text)) if level_text is not None else None
    message = _pop_first(fields, MESSAGE_FIELDS)
    stamp = _pop_first(fields, TIME_FIELDS)
    at = _time(stamp) if stamp is not None else None
    service = _name(fields.pop("service", None)) or service
    host = _name(fields.pop("host", None)) or host
    attributes = {
        str(key)[:ATTRIBUTE_KEY_MAX]: _text(value)[:ATTRIBUTE_VALUE_MAX]
        for key, value in list(fields.items())[:ATTRIBUTES_MAX]
        if str(key)
    }
    text = "" if message is None else _text(message)
    return _line(service, host, level or "info", text, attributes, at or now)


def _line(
    service: str, host: str, level: Level, message: str, attributes: dict[str, str], at: datetime
) -> LogLine:
    message, attributes = redact_line(message, attributes, ATTRIBUTES_MAX)
    if len(message) > MESSAGE_MAX:
        message = message[:MESSAGE_MAX]
        attributes = {**attributes, "truncated": "true"}
        if len(attributes) > ATTRIBUTES_MAX:
            attributes.pop(next(iter(attributes)))
    return LogLine(
        service=service, host=host, level=level, message=message, attributes=attributes, at=at
    )


def _pop_first(fields: dict[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        if name in fields:
            return fields.pop(name)
    return None


def _name(value: Any) -> str | None:
    if not isinstance(value, str) or not value or len(value) > NAME_MAX:
        return None
    return value if value.isprintable() and "@" not in value else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _time(value: Any) -> datetime | None:
    """An RFC 3339 time, or epoch seconds or milliseconds; None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = value / 1000 if value > MILLISECONDS_AFTER else value
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace(",", ".", 1))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
