"""The crash policy: a broken invariant stops the process; a bad request does not.

A broken invariant is a programmer error, and going on would risk a log that
lies, so it must pass every catch-all that keeps one bad client from taking the
broker down, and end the real process with a non-zero status and the message
in its log, without the clean-shutdown marker (the next start recovers).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from invariant_broker import EMBEDDED_WAIT_S, KEPT_RUNNING, PLANTED_MESSAGE, PROBE_TOPIC

from eventplatform.log.invariants import (
    CRASH_EXIT_STATUS,
    InvariantError,
    find_invariant_error,
    require,
)
from eventplatform.log.storage.files import CLEAN_SHUTDOWN_FILE
from eventplatform.testing import BrokerProcess

LAUNCHER = Path(__file__).parents[2] / "support" / "invariant_broker.py"
EXIT_WAIT_S = 15.0


def test_an_invariant_error_passes_through_a_catch_all_for_exceptions() -> None:
    with pytest.raises(InvariantError):
        try:
            require(False, "offsets must increase")
        except Exception:  # what a per-request catch-all does
            pytest.fail("a catch-all for Exception swallowed a broken invariant")


def test_an_invariant_error_is_found_inside_exception_groups_and_causes() -> None:
    broken = InvariantError("HW above LEO")
    try:
        raise RuntimeError("wrapper") from broken
    except RuntimeError as wrapped:
        group = BaseExceptionGroup("tasks", [ValueError("other"), wrapped])
    assert find_invariant_error(group) is broken
    assert find_invariant_error(ExceptionGroup("tasks", [ValueError("x")])) is None


async def _produce_to_probe(port: int, wire: Any) -> None:
    client = wire.BrokerClient(await trio.open_tcp_stream("127.0.0.1", port))
    try:
        await client.create_topic(PROBE_TOPIC)
        with pytest.raises((wire.ConnectionClosedError, trio.BrokenResourceError)):
            await client.produce(PROBE_TOPIC, wire.batch([b"value"]))
    finally:
        await client.aclose()


def test_a_broken_invariant_inside_a_request_stops_the_broker_process_with_its_message(
    tmp_path: Path, wire: Any
) -> None:
    broker = BrokerProcess(tmp_path, launcher=[sys.executable, str(LAUNCHER)]).start()
    try:
        trio.run(_produce_to_probe, broker.port, wire)
        assert broker.process is not None
        try:
            status = broker.process.wait(EXIT_WAIT_S)
        except Exception:
            pytest.fail("the broker kept running after a broken invariant:\n" + broker.log_text())
    finally:
        broker.kill()
    assert status == CRASH_EXIT_STATUS, broker.log_text()
    assert "CRITICAL" in broker.log_text() and PLANTED_MESSAGE in broker.log_text()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_a_broken_invariant_in_the_embedded_broker_stops_the_whole_process(
    tmp_path: Path,
) -> None:
    """``platform demo`` runs the broker in a thread: a broken invariant there must not
    leave the rest of the process running on a dead broker."""
    command = [sys.executable, str(LAUNCHER), "embedded", str(tmp_path)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=EXIT_WAIT_S + EMBEDDED_WAIT_S + 30
    )
    output = done.stdout + done.stderr
    assert KEPT_RUNNING not in output, output
    assert done.returncode == CRASH_EXIT_STATUS, output
    assert PLANTED_MESSAGE in output
