"""Log lines as events: one :class:`LogLine` per line a service wrote.

A line has the service and host that wrote it, a level, the message, some
attributes (``key: value`` text, such as a request id or the file it came
from) and the moment it was written. Lines are keyed by source
(``service@host``), so one source's lines sit in one partition in the order
they were appended.

A line that leaked a secret is retracted with :func:`redaction`: a
:class:`LogsRedacted` that records the decision (never the secret), then one
retracting correction per line. The lines then disappear from every
projection, as if they had never been sent.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal

from pydantic import AwareDatetime, Field, field_validator

from eventplatform.events import Correction, Event, EventRef

TOPIC = "logs"
RETENTION_DAYS = 7
NAME_MAX = 128
MESSAGE_MAX = 16_384
ATTRIBUTES_MAX = 64
ATTRIBUTE_KEY_MAX = 128
ATTRIBUTE_VALUE_MAX = 1024
TEXT_MAX = 512

Level = Literal["trace", "debug", "info", "warn", "error", "fatal"]
LEVELS: tuple[Level, ...] = ("trace", "debug", "info", "warn", "error", "fatal")
ERROR_LEVELS = frozenset({"error", "fatal"})
LEVEL_ALIASES: dict[str, Level] = {
    **{level: level for level in LEVELS},
    "warning": "warn",
    "err": "error",
    "critical": "fatal",
    "crit": "fatal",
    "panic": "fatal",
    "emerg": "fatal",
    "alert": "fatal",
    "notice": "info",
    "information": "info",
    "verbose": "debug",
    "fine": "debug",
    "finest": "trace",
}


def level_of(name: str) -> Level | None:
    """A level name as written by common loggers, normalized (``None`` if unknown)."""
    return LEVEL_ALIASES.get(name.strip().lower())


class LogLine(Event, type="logs.line", topic=TOPIC):
    """One line written by ``service`` on ``host`` at moment ``at``."""

    service: str = Field(min_length=1, max_length=NAME_MAX)
    host: str = Field(min_length=1, max_length=NAME_MAX)
    level: Level
    message: str = Field(max_length=MESSAGE_MAX)
    attributes: dict[str, str] = Field(default_factory=dict)
    at: AwareDatetime

    @field_validator("service", "host")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable() or "@" in value:
            raise ValueError("must be printable, without '@'")
        return value

    @field_validator("attributes")
    @classmethod
    def _attributes(cls, attributes: dict[str, str]) -> dict[str, str]:
        if len(attributes) > ATTRIBUTES_MAX:
            raise ValueError(f"at most {ATTRIBUTES_MAX} attributes")
        for key, value in attributes.items():
            if not key or len(key) > ATTRIBUTE_KEY_MAX or len(value) > ATTRIBUTE_VALUE_MAX:
                raise ValueError(f"attribute {key[:40]!r}: an empty or too long key or value")
        return attributes

    @property
    def source(self) -> str:
        return f"{self.service}@{self.host}"

    def entity_key(self) -> str:
        return self.source


class LogsRedacted(Event, type="logs.redacted", key="redaction_id", topic=TOPIC):
    """``lines`` lines were retracted because ``reason`` (the secret is never repeated here)."""

    redaction_id: str = Field(min_length=1, max_length=64)
    reason: str = Field(min_length=1, max_length=TEXT_MAX)
    lines: int = Field(ge=0)
    decided_at: AwareDatetime


def redaction(
    lines: Sequence[EventRef], reason: str, *, now: datetime | None = None
) -> list[Event]:
    """The events that retract ``lines``: the decision, then one retraction per line."""
    decided = LogsRedacted(
        redaction_id=str(uuid.uuid4()),
        reason=reason,
        lines=len(lines),
        decided_at=now or datetime.now(UTC),
    )
    text = f"redacted: {reason}"
    corrections = [Correction(of=ref, retract=True, reason=text) for ref in lines]  # type: ignore[arg-type]
    return [decided, *corrections]
