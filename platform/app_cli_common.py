"""What the bundled apps' commands share: the simulated window, listen addresses, appending."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import click

APPEND_CHUNK_EVENTS = 10_000


def window_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--hours``, ``--start`` and ``--seed``: the window a simulator fills."""
    for option in reversed(
        [
            click.option(
                "--hours",
                type=click.FloatRange(min=0, min_open=True),
                default=1.0,
                show_default=True,
                help="Length of the simulated window.",
            ),
            click.option(
                "--start",
                default=None,
                metavar="TIME",
                help="Start of the window (ISO 8601; UTC if no zone).  "
                "[default: --hours before now]",
            ),
            click.option("--seed", type=int, default=0, show_default=True),
        ]
    ):
        command = option(command)
    return command


def moment(value: str | None, option: str = "--start") -> datetime | None:
    """An ISO 8601 time (UTC when it names no zone), or None for None."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time", param_hint=option) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def window(start: str | None, hours: float) -> tuple[datetime, datetime]:
    begin = moment(start) or datetime.now(UTC) - timedelta(hours=hours)
    return begin, begin + timedelta(hours=hours)


def address(listen: str, option: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as a pair; a usage error otherwise."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(f"{listen!r} is not host:port", param_hint=option)
    return host.strip("[]"), int(port)


def append_in_chunks(bootstrap: str, events: Sequence[Any]) -> None:
    from eventplatform.events import EventProducer

    with EventProducer(bootstrap) as producer:
        for first in range(0, len(events), APPEND_CHUNK_EVENTS):
            producer.append(events[first : first + APPEND_CHUNK_EVENTS])


def log_to_stderr() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")


def this_host() -> str:
    return socket.gethostname() or "localhost"
