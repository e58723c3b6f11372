"""Running the test app's projection in a background thread, as a group member."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from eventplatform.events import EventRef
from eventplatform.projections.apps import App
from eventplatform.projections.operations import run_projection, wait_until_applied

STOP_TIMEOUT_S = 30.0
APPLY_TIMEOUT_S = 30.0


@contextmanager
def running_projection(
    name: str, apps: Sequence[App], url: str, bootstrap: str, batch_size: int = 100
) -> Iterator[None]:
    """Projection ``name`` runs in a background thread until the block ends."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            run_projection(
                name, apps, database_url=url, bootstrap=bootstrap, batch_size=batch_size, stop=stop
            )
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, name="projection-runner", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(STOP_TIMEOUT_S)
        if failures:  # the runner's own error, even when it made the block time out
            raise failures[0]
    assert not thread.is_alive(), "the runner did not stop"


def apply_all(
    name: str,
    apps: Sequence[App],
    url: str,
    bootstrap: str,
    refs: list[EventRef],
    timeout_s: float = APPLY_TIMEOUT_S,
) -> None:
    """Run projection ``name`` until it has applied ``refs``."""
    with running_projection(name, apps, url, bootstrap):
        wait_until_applied(url, name, refs, timeout_s=timeout_s)
