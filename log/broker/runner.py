"""``platform serve``: build the broker config from the command line and run it.

Every role of a node (a standalone broker, a cluster member, a controller) runs
here, so this is the one place a broken invariant ends the process (see
:func:`~eventplatform.log.invariants.crash_on_invariant_error`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import trio

from eventplatform.log.broker.server import serve_until_signalled
from eventplatform.log.config import BrokerConfig, BrokerConfigError
from eventplatform.log.invariants import crash_on_invariant_error
from eventplatform.log.metrics_endpoint import (
    MetricsEndpointError,
    bind_metrics_socket,
    parse_metrics_listen,
)

log = logging.getLogger("eventplatform.broker")


def parse_listen(listen: str) -> tuple[str, int]:
    host, separator, port = listen.rpartition(":")
    if not separator or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise BrokerConfigError(f"--listen {listen!r} is not host:port")
    return host.strip("[]") or "127.0.0.1", int(port)


def run_broker(
    *,
    data_dir: Path | None,
    listen: str,
    advertised_host: str | None,
    config_file: Path | None,
    overrides: Iterable[str],
    log_level: str,
    echo: Callable[[str], Any],
    metrics_listen: str | None = None,
) -> None:
    """Run the node ``platform serve`` describes until SIGINT or SIGTERM; a bad setting
    (or a ``metrics_listen`` address that cannot be bound) raises BrokerConfigError
    before anything starts."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    host, port = parse_listen(listen)
    fields: dict[str, Any] = {"listen_host": host, "listen_port": port}
    if data_dir is not None:
        fields["data_dir"] = data_dir
    if advertised_host is not None:
        fields["advertised_host"] = advertised_host
    config = BrokerConfig.load(config_file, overrides, **fields)
    metrics_socket = None
    if metrics_listen is not None:
        try:
            metrics_socket = bind_metrics_socket(*parse_metrics_listen(metrics_listen))
        except MetricsEndpointError as exc:
            raise BrokerConfigError(str(exc)) from exc
    with crash_on_invariant_error(log):
        trio.run(partial(serve_until_signalled, config, metrics_socket=metrics_socket))
    echo("broker stopped")
