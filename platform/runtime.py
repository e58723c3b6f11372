"""The embedded runtime: a broker and projection runners inside the calling process.

``platform demo`` runs everything in one process on embedded defaults. The
broker runs its own ``trio.run`` in a background thread; runners run as
threads too, each one consumer-group member, exactly as ``platform
projections run`` would run them.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import trio

from eventplatform.client_config import KafkaConnection
from eventplatform.events import Position
from eventplatform.log.broker.server import BrokerServer
from eventplatform.log.config import BrokerConfig
from eventplatform.log.invariants import crash_on_invariant_error
from eventplatform.projections.apps import App
from eventplatform.projections.kafka import log_ends
from eventplatform.projections.operations import run_projection, wait_until_applied

log = logging.getLogger("eventplatform.broker")

BROKER_START_TIMEOUT_S = 60.0
BROKER_STOP_TIMEOUT_S = 30.0
RUNNER_STOP_TIMEOUT_S = 60.0
RUNNER_BATCH_SIZE = 1000


class EmbeddedRuntimeError(Exception):
    """The embedded broker or a runner failed."""


@contextmanager
def embedded_broker(config: BrokerConfig) -> Iterator[str]:
    """A broker serving ``config`` in a background thread; yields its bootstrap address."""
    reports: queue.Queue[tuple[str, Any]] = queue.Queue()
    server = BrokerServer(config)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.run)
            reports.put(("started", (trio.lowlevel.current_trio_token(), port)))

    def run() -> None:
        try:
            with crash_on_invariant_error(log):  # ends the whole process, as platform serve
                trio.run(main)
        except BaseException as exc:  # reported to the caller's thread
            reports.put(("failed", exc))

    thread = threading.Thread(target=run, name="embedded-broker", daemon=True)
    thread.start()
    try:
        kind, value = reports.get(timeout=BROKER_START_TIMEOUT_S)
    except queue.Empty:
        raise EmbeddedRuntimeError(
            f"the broker did not start in {BROKER_START_TIMEOUT_S:.0f} s"
        ) from None
    if kind == "failed":
        raise EmbeddedRuntimeError(f"the broker did not start: {value}") from value
    token, port = value
    try:
        yield f"127.0.0.1:{port}"
    finally:
        trio.from_thread.run_sync(server.shutdown, trio_token=token)
        thread.join(BROKER_STOP_TIMEOUT_S)


@contextmanager
def running_projections(
    names: Sequence[str], apps: Sequence[App], database_url: str, bootstrap: KafkaConnection
) -> Iterator[None]:
    """Projections ``names`` run, each in a thread, until the block ends."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run(name: str) -> None:
        try:
            run_projection(
                name,
                apps,
                database_url=database_url,
                bootstrap=bootstrap,
                batch_size=RUNNER_BATCH_SIZE,
                stop=stop,
            )
        except BaseException as exc:  # reported when the block ends
            failures.append(exc)

    threads = [
        threading.Thread(target=run, args=(name,), name=f"runner {name}", daemon=True)
        for name in names
    ]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(RUNNER_STOP_TIMEOUT_S)
    if failures:
        raise EmbeddedRuntimeError(f"a projection runner failed: {failures[0]}") from failures[0]


def wait_caught_up(
    names: Sequence[str],
    database_url: str,
    bootstrap: KafkaConnection,
    topics: Sequence[str],
    timeout_s: float,
) -> None:
    """Block until every projection in ``names`` has applied its topics up to their ends."""
    ends = log_ends(bootstrap, topics)
    last = [Position(t, p, high - 1) for (t, p), (_, high) in ends.items() if high]
    for name in names:
        wait_until_applied(database_url, name, last, timeout_s=timeout_s)
