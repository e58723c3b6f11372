"""Error fingerprints: a message's template, with the parts that vary masked.

``payment 8f14e45f failed after 312 ms for user 'bob'`` and ``payment
c9f0f895 failed after 1200 ms for user 'eve'`` share the template
``payment <hex> failed after <num> ms for user <str>``, and so one
fingerprint: the first 16 hex digits of the SHA-256 of the service and the
template. Masked, in this order: UUIDs, e-mail addresses, URLs, IPv4
addresses (with a port), quoted strings, numbers (decimals, exponents, signs,
and integers of up to 7 digits), and hex numbers (prefixed ``0x``, 8 digits
or longer, or mixing digits and letters: an id masks alike whether it drew
letters or not). Whitespace runs collapse to one space. The template is cut
at :data:`TEMPLATE_MAX` characters.
"""

from __future__ import annotations

import hashlib
import re

TEMPLATE_MAX = 400
FINGERPRINT_HEX = 16
MASKS = (
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<uuid>",
    ),
    (re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"), "<email>"),
    (re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE), "<url>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'"), "<str>"),
    # decimals, exponents and integers of up to 7 digits; longer integers are ids (hex)
    (re.compile(r"[-+]?\b(?:\d+\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d{1,7})\b"), "<num>"),
    (re.compile(r"\b(?:0x)?[0-9a-fA-F]+\b"), "<hex>"),
)
SPACES = re.compile(r"\s+")
HEX_LONG = 8


def template(message: str) -> str:
    """``message`` with its variable parts masked."""
    masked = message
    for pattern, mask in MASKS:
        masked = pattern.sub(_hex_or_keep if mask == "<hex>" else mask, masked)
    return SPACES.sub(" ", masked).strip()[:TEMPLATE_MAX]


def _hex_or_keep(match: re.Match[str]) -> str:
    """Hex when prefixed ``0x``, :data:`HEX_LONG` digits or more (ids and hashes, whatever
    digits they happen to draw), or mixing digits and letters; else a word or a number."""
    token = match.group()
    digits = token.removeprefix("0x")
    mixed = any(c.isdigit() for c in digits) and any(c.isalpha() for c in digits)
    return "<hex>" if token.startswith("0x") or len(digits) >= HEX_LONG or mixed else token


def fingerprint(service: str, message_template: str) -> str:
    digest = hashlib.sha256(f"{service}\n{message_template}".encode()).hexdigest()
    return digest[:FINGERPRINT_HEX]
