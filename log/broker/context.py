"""What a handler receives besides its decoded request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from eventplatform.log.broker.broker import Broker
from eventplatform.log.protocol import Api, RequestHeader
from eventplatform.log.protocol.schema import Versions

Body = dict[str, Any]


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    client_host: str
    connection_id: int

    @property
    def version(self) -> int:
        return self.header.api_version


HandleFunction = Callable[[RequestContext, Body], Awaitable[Body | None]]


@dataclass(frozen=True, slots=True)
class Handler:
    """One API as the broker serves it: its table, the versions it accepts, its function.

    ``handle`` returns the response body, or None when no response is sent
    (Produce with acks=0).
    """

    api: Api
    versions: Versions
    handle: HandleFunction
