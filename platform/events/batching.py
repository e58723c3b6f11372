"""Appending from a trio listener that cannot wait: a bounded queue, one writer, batches.

A UDP or syslog listener takes events as they arrive and must not block its
socket on the log. :class:`AppendQueue` takes them without waiting
(:meth:`~AppendQueue.put`) and one writer task (:meth:`~AppendQueue.run`)
appends what is queued as one batch of up to ``batch_events``. When more
than ``queue_events`` wait, new events are dropped and counted: the sender's
protocol has no way to be told to slow down, and the listener must keep
reading. A failed append drops its batch and is counted and logged.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from eventplatform.events.model import Event
from eventplatform.events.producer import EventProducer

log = logging.getLogger(__name__)

BATCH_EVENTS_DEFAULT = 5_000
QUEUE_EVENTS_DEFAULT = 100_000
APPEND_TIMEOUT_S_DEFAULT = 30.0
DRAIN_POLL_S = 0.01
DATAGRAM_BYTES_MAX = 65_535


@dataclass
class AppendStats:
    queued: int = 0
    appended: int = 0
    dropped: int = 0
    append_errors: int = 0


class AppendQueue:
    """Events queued without waiting, appended in batches by :meth:`run`."""

    def __init__(
        self,
        producer: EventProducer,
        *,
        batch_events: int = BATCH_EVENTS_DEFAULT,
        queue_events: int = QUEUE_EVENTS_DEFAULT,
        append_timeout_s: float = APPEND_TIMEOUT_S_DEFAULT,
    ) -> None:
        self.producer = producer
        self.batch_events = batch_events
        self.queue_events = queue_events
        self.append_timeout_s = append_timeout_s
        self.stats = AppendStats()
        self._send, self._receive = trio.open_memory_channel[list[Event]](math.inf)
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Events queued and not yet appended (nor dropped)."""
        return self._waiting

    def put(self, events: list[Any]) -> bool:
        """Queue ``events`` for the writer; False (and counted) when the queue is full."""
        if not events:
            return True
        if self._waiting + len(events) > self.queue_events:
            self.stats.dropped += len(events)
            return False
        self._waiting += len(events)
        self.stats.queued += len(events)
        self._send.send_nowait(events)
        return True

    async def wait_drained(self) -> None:
        """Wait until every queued event has been appended (or dropped by a failure)."""
        while self._waiting:
            await trio.sleep(DRAIN_POLL_S)

    async def run(self) -> None:
        """The writer: append what is queued, a batch at a time, until cancelled."""
        while True:
            batch = await self._receive.receive()
            while len(batch) < self.batch_events:
                try:
                    batch.extend(self._receive.receive_nowait())
                except trio.WouldBlock:
                    break
            try:
                with trio.fail_after(self.append_timeout_s):
                    await self.producer.append_async(batch)
                self.stats.appended += len(batch)
            except Exception as exc:  # the log refused or timed out: the sender cannot resend
                self.stats.append_errors += 1
                self.stats.dropped += len(batch)
                log.error("appending %d events failed: %s", len(batch), exc)
            finally:
                self._waiting -= len(batch)


async def serve_datagrams(
    host: str,
    port: int,
    take: Callable[[bytes, str], None],
    *,
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Receive UDP datagrams on ``host:port`` until cancelled, handing each to ``take`` with
    its sender's address; reports the bound port through ``task_status``. ``take`` must
    not block: it queues (:meth:`AppendQueue.put`)."""
    family = trio.socket.AF_INET6 if ":" in host else trio.socket.AF_INET
    sock = trio.socket.socket(family, trio.socket.SOCK_DGRAM)
    with sock:
        await sock.bind((host, port))
        task_status.started(sock.getsockname()[1])
        while True:
            datagram, sender = await sock.recvfrom(DATAGRAM_BYTES_MAX)
            take(datagram, str(sender[0]))
