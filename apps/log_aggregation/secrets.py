"""Secrets taken out of log lines at ingest, before anything is appended.

A line read from a file, standard input or syslog passes through
:func:`redact_line`: each value that looks like a credential is replaced by
:data:`MASK`, and the line gets the attribute ``redacted`` (how many). What
counts as a credential:

* the value of a key that names one (``password=…``, ``api_key: …``,
  ``"token": "…"``, ``secret=…``), in the message or as an attribute;
* the credentials of an ``Authorization`` header (``Bearer …``, ``Basic …``);
* the password of a URL (``postgres://app:…@db/app``);
* AWS access key ids, JSON web tokens and PEM private key blocks.

Patterns catch the known shapes only. A secret in another shape still
reaches the log: ``platform apps logs redact`` takes it out of every table.
"""

from __future__ import annotations

import re

MASK = "[REDACTED]"
REDACTED_ATTRIBUTE = "redacted"
SECRET_NAME = (
    r"(?:password|passwd|passphrase|secret|client[_-]?secret|token|access[_-]?token|"
    r"refresh[_-]?token|api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|auth[_-]?token)"
)
SECRET_KEY = re.compile(rf"(?i)^[\w.-]*{SECRET_NAME}$")
"""An attribute (a JSON field, a structured-data parameter) whose value is a secret."""
PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
            re.DOTALL,
        ),
        MASK,
    ),
    (
        re.compile(rf"(?i)(\b[\w.-]*{SECRET_NAME}[\"']?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&]+)"),
        rf"\g<1>{MASK}",
    ),
    (re.compile(r"(?i)(\bauthorization\s*[=:]\s*(?:bearer|basic|token)\s+)\S+"), rf"\g<1>{MASK}"),
    (re.compile(r"(?i)(\b(?:bearer)\s+)[A-Za-z0-9._~+/-]{16,}=*"), rf"\g<1>{MASK}"),
    (re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+(@)"), rf"\g<1>{MASK}\g<2>"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), MASK),
)


def redact_text(text: str) -> tuple[str, int]:
    """``text`` with every secret it holds masked, and how many were."""
    found = 0
    for pattern, replacement in PATTERNS:
        text, count = pattern.subn(replacement, text)
        found += count
    return text, found


def redact_line(
    message: str, attributes: dict[str, str], attributes_max: int
) -> tuple[str, dict[str, str]]:
    """The message and attributes of a line with their secrets masked; the attribute
    ``redacted`` says how many were (absent when none, or when the line has
    ``attributes_max`` attributes already: the masks still show)."""
    message, found = redact_text(message)
    cleaned: dict[str, str] = {}
    for key, value in attributes.items():
        if SECRET_KEY.match(key) and value and value != MASK:
            cleaned[key] = MASK
            found += 1
        else:
            cleaned[key], count = redact_text(value)
            found += count
    if found and (REDACTED_ATTRIBUTE in cleaned or len(cleaned) < attributes_max):
        cleaned[REDACTED_ATTRIBUTE] = str(found)
    return message, cleaned
