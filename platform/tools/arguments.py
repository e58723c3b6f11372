"""Command-line values, parsed: bootstrap lists, ``key=value`` settings, timestamps.

Pure functions with no client imports, so the CLI can parse and reject bad
input before any connection, and so the rules are testable on their own.
Each parser raises :class:`InvalidInputError` with a message that names the
bad value and the accepted forms.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from eventplatform.client_config import ClientConfig
from eventplatform.tools.errors import InvalidInputError

BOOTSTRAP_DEFAULT = "127.0.0.1:9092"
REQUEST_TIMEOUT_S_DEFAULT = 15.0
PORT_MAX = 65535
ACKS_CHOICES = ("0", "1", "all")
COMPRESSION_CHOICES = ("none", "gzip", "snappy", "lz4", "zstd")
DELIVERY_TIMEOUT_S_DEFAULT = 30.0
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ClusterSettings:
    """Where the cluster is, how to connect to it, and how long one request may take.

    ``bootstrap`` is a comma-separated ``host:port`` list, already validated
    by :func:`parse_bootstrap`. ``request_timeout_s`` bounds every admin
    request and metadata lookup, including the time to connect. ``client`` holds
    the security settings (:mod:`eventplatform.client_config`); without it they
    come from the client config file and environment.
    """

    bootstrap: str = BOOTSTRAP_DEFAULT
    request_timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT
    client: ClientConfig | None = None


def parse_bootstrap(text: str) -> str:
    """Validate a ``host:port[,host:port...]`` list and return it without blanks.

    IPv6 hosts go in brackets (``[::1]:9092``), as librdkafka expects.
    """
    addresses = [address.strip() for address in text.split(",")]
    for address in addresses:
        host, separator, port = address.rpartition(":")
        if not separator or not host or not port.isdigit() or not 0 < int(port) <= PORT_MAX:
            raise InvalidInputError(
                f"bootstrap address {address!r} is not host:port (for example 127.0.0.1:9092)"
            )
    return ",".join(addresses)


def parse_setting(text: str) -> tuple[str, str]:
    """Split ``key=value`` at the first ``=``; the key may not be empty, the value may."""
    key, separator, value = text.partition("=")
    key = key.strip()
    if not separator or not key:
        raise InvalidInputError(f"{text!r} is not key=value")
    return key, value


def parse_settings(texts: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Several ``key=value`` settings; a key given twice is an error, not a silent override."""
    settings: dict[str, str] = {}
    for text in texts:
        key, value = parse_setting(text)
        if key in settings:
            raise InvalidInputError(f"{key!r} is given more than once")
        settings[key] = value
    return settings


def parse_timestamp_ms(text: str) -> int:
    """Milliseconds since the Unix epoch, from digits or an ISO-8601 datetime.

    ``1700000000000`` is taken as milliseconds. ``2024-05-01T12:00:00+02:00``,
    ``2024-05-01T10:00:00Z`` and ``2024-05-01`` are datetimes; one without a
    UTC offset is read as UTC, so the same text means the same instant on
    every machine.
    """
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    try:
        moment = datetime.fromisoformat(stripped)
    except ValueError as exc:
        raise InvalidInputError(
            f"{text!r} is neither milliseconds since the epoch nor an ISO-8601 datetime "
            "(for example 2024-05-01T12:00:00Z)"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // timedelta(milliseconds=1)


def parse_key_separator(text: str | None) -> bytes | None:
    """The separator between key and value, as UTF-8 bytes; it may not be empty."""
    if text is None:
        return None
    if not text:
        raise InvalidInputError("the key separator may not be empty")
    return text.encode()
