"""A replica fetcher whose leader is gone retries every RETRY_DELAY_S; it says so once,
then at most every ERROR_LOG_INTERVAL_S, and once more when fetching works again."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

from eventplatform.log.cluster.peer import PeerError
from eventplatform.log.cluster.replication import (
    ERROR_LOG_INTERVAL_S,
    RETRY_DELAY_S,
    ReplicaFetcher,
)


def test_a_failing_fetcher_logs_once_an_interval_and_its_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="eventplatform.log.cluster.replication")
    manager: Any = object()
    fetcher = ReplicaFetcher(manager, 1)
    failures = int(2.5 * ERROR_LOG_INTERVAL_S / RETRY_DELAY_S)

    async def outage() -> None:
        for _ in range(failures):
            fetcher._failed(PeerError("127.0.0.1:9092: connection refused"))
            await trio.sleep(RETRY_DELAY_S)
        fetcher._recovered()

    trio.run(outage, clock=trio.testing.MockClock(autojump_threshold=0))
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 4, lines  # at 0 s, 10 s, 20 s, and the recovery
    assert lines[0].startswith("fetching from 1: 127.0.0.1:9092: connection refused (1 failures")
    assert lines[-1].startswith(f"fetching from 1 again after {failures} failures")
