"""Listeners as Kafka names them: ``NAME://host:port``, each with a security protocol.

``listeners`` says where the broker binds, ``advertised.listeners`` what it tells
clients (Metadata, FindCoordinator) for each listener, and
``listener.security.protocol.map`` which protocol each listener name speaks:

============== ===== ==================================================
protocol       TLS   who the connection is
============== ===== ==================================================
PLAINTEXT      no    ``User:ANONYMOUS``
SSL            yes   the client certificate's subject (``User:CN=...``) when one
                     is presented and verified, else ``User:ANONYMOUS``
SASL_PLAINTEXT no    the SASL user (``User:<name>``), once authenticated
SASL_SSL       yes   the SASL user
============== ===== ==================================================

A client connected on a listener is told the other brokers' addresses on the same
listener, so clients of an internal and an external listener each get addresses
they can reach.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


DEFAULT_PROTOCOL_MAP: tuple[tuple[str, SecurityProtocol], ...] = tuple(
    (protocol.value, protocol) for protocol in SecurityProtocol
)
"""Kafka's default map: each protocol's name is a listener name speaking it."""

LISTENER_NAME_CHARS_MAX = 64


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One named address: ``name://host:port``. An empty host binds every interface."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def _items(raw: Any) -> list[str]:
    items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
    return [str(item).strip() for item in items if str(item).strip()]


def _check_name(name: str) -> str:
    name = name.strip().upper()
    if (
        not name
        or len(name) > LISTENER_NAME_CHARS_MAX
        or not all(char.isalnum() or char in "_-" for char in name)
    ):
        raise ValueError(f"{name!r} is not a listener name (letters, digits, '_' and '-')")
    return name


def parse_endpoints(raw: Any) -> tuple[Endpoint, ...]:
    """``NAME://host:port,...`` (``[::1]`` for IPv6; port 0 for any free port)."""
    endpoints = []
    for item in _items(raw):
        name, separator, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not separator or not colon or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"{item!r} is not NAME://host:port")
        endpoints.append(Endpoint(_check_name(name), host.strip("[]"), int(port)))
    names = [endpoint.name for endpoint in endpoints]
    if len(set(names)) != len(names):
        raise ValueError("a listener name appears twice")
    return tuple(endpoints)


def parse_protocol_map(raw: Any) -> tuple[tuple[str, SecurityProtocol], ...]:
    """``NAME:PROTOCOL,...``."""
    pairs: dict[str, SecurityProtocol] = {}
    for item in _items(raw):
        name, colon, protocol = item.partition(":")
        if not colon:
            raise ValueError(f"{item!r} is not NAME:PROTOCOL")
        try:
            pairs[_check_name(name)] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            known = ", ".join(SecurityProtocol)
            raise ValueError(f"{protocol.strip()!r} is not a security protocol ({known})") from None
    return tuple(pairs.items())


def parse_listener_names(raw: Any) -> tuple[str, ...]:
    return tuple(_check_name(item) for item in _items(raw))


def format_endpoints(endpoints: Iterable[Endpoint]) -> str:
    return ",".join(str(endpoint) for endpoint in endpoints)


def format_protocol_map(pairs: Iterable[tuple[str, SecurityProtocol]]) -> str:
    return ",".join(f"{name}:{protocol.value}" for name, protocol in pairs)
