"""The producer facade: append events over confluent-kafka.

``append`` validates and encodes every event first, so an invalid event
raises before anything is sent. Then it produces them with idempotence on and
``acks=all`` (librdkafka retries without duplicates or reordering), and
returns each event's :class:`~eventplatform.events.EventRef`, log position
included, in the order given.

One background thread serves librdkafka's delivery callbacks, so ``append``
(blocking), ``submit`` (a ``concurrent.futures.Future``) and
``append_async`` (awaitable under asyncio or trio) can be mixed freely.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any, Protocol

import confluent_kafka
import sniffio

from eventplatform.client_config import KafkaConnection, kafka_settings
from eventplatform.events.codec import EncodedEvent, encode_rows
from eventplatform.events.errors import AppendError
from eventplatform.events.model import Appendable, Envelope, Event, EventRef, Position, appendables
from eventplatform.events.topics import create_event_topics

BOOTSTRAP_DEFAULT = "127.0.0.1:9092"
DELIVERY_TIMEOUT_S_DEFAULT = 30.0
POLL_INTERVAL_S = 0.05
APPEND_WAIT_EXTRA_S = 5.0
"""How much longer than the delivery timeout ``append`` waits for its last report."""
PARTITION_ANY = -1
"""The partition argument that leaves the choice to the partitioner."""
QUEUE_FULL_BACKOFF_S = 0.001
PRODUCER_DEFAULTS: dict[str, Any] = {
    # Keyed records land where the Java client puts them.
    "partitioner": "murmur2_random",
    "enable.idempotence": True,
    "acks": "all",
    # Send at once. An append waits for its acknowledgement, so lingering for more
    # records only delays it: a list is queued whole anyway, and while requests are in
    # flight the next records gather into batches of their own.
    "linger.ms": 0,
    "compression.type": "lz4",
}


class SchemaGuard(Protocol):
    """Checks an event class against the schema registry before its events are sent."""

    def ensure_registered(self, event_class: type[Event]) -> None: ...


class EventProducer:
    """Appends events to the log. Thread-safe; close it (or use ``with``) when done.

    ``bootstrap`` is the brokers, whose security settings then come from the client
    config file and environment, or a resolved
    :class:`~eventplatform.client_config.ClientConfig`; ``config`` adds librdkafka
    settings on top of both.
    """

    def __init__(
        self,
        bootstrap: KafkaConnection = BOOTSTRAP_DEFAULT,
        *,
        config: Mapping[str, Any] | None = None,
        schemas: SchemaGuard | None = None,
        delivery_timeout_s: float = DELIVERY_TIMEOUT_S_DEFAULT,
    ) -> None:
        settings = {
            **PRODUCER_DEFAULTS,
            **kafka_settings(bootstrap),
            "delivery.timeout.ms": int(delivery_timeout_s * 1000),
            **(config or {}),
        }
        self._producer = confluent_kafka.Producer(settings)
        self._settings = settings
        self._topics_ready: set[str] = set()
        self._topics_lock = threading.Lock()
        self._schemas = schemas
        self._checked: set[type[Event]] = set()
        self._delivery_timeout_s = delivery_timeout_s
        self._closing = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="event-producer", daemon=True)
        self._poller.start()

    def __enter__(self) -> EventProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def append(
        self,
        items: Iterable[Event | Envelope[Any]],
        *,
        correlation_id: uuid.UUID | None = None,
        causation_id: uuid.UUID | None = None,
    ) -> list[EventRef]:
        """Append ``items`` and wait for the log to acknowledge all of them."""
        future = self.submit(items, correlation_id=correlation_id, causation_id=causation_id)
        return future.result(timeout=self._delivery_timeout_s + APPEND_WAIT_EXTRA_S)

    async def append_async(
        self,
        items: Iterable[Event | Envelope[Any]],
        *,
        correlation_id: uuid.UUID | None = None,
        causation_id: uuid.UUID | None = None,
    ) -> list[EventRef]:
        """``append`` for asyncio and trio callers: awaits the acknowledgements."""
        future = self.submit(items, correlation_id=correlation_id, causation_id=causation_id)
        if sniffio.current_async_library() == "trio":
            return await _trio_wait(future)
        return await asyncio.wrap_future(future)

    def submit(
        self,
        items: Iterable[Event | Envelope[Any]],
        *,
        correlation_id: uuid.UUID | None = None,
        causation_id: uuid.UUID | None = None,
    ) -> Future[list[EventRef]]:
        """Validate and send ``items``; the future resolves once all are acknowledged."""
        rows = appendables(items, correlation_id=correlation_id, causation_id=causation_id)
        self._check_schemas(rows)
        records = encode_rows(rows)
        self._ensure_topics({record.topic for record in records})
        return self._send(rows, records)

    def flush(self, timeout_s: float = DELIVERY_TIMEOUT_S_DEFAULT) -> None:
        self._producer.flush(timeout_s)

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        self._poller.join(timeout=5)
        self._producer.flush(self._delivery_timeout_s)

    def _check_schemas(self, rows: list[Appendable]) -> None:
        if self._schemas is None:
            return
        for event_class in {type(row[0]) for row in rows}:
            if event_class not in self._checked:
                self._schemas.ensure_registered(event_class)
                self._checked.add(event_class)

    def _ensure_topics(self, topics: set[str]) -> None:
        """Create the event topics this producer has not appended to yet and that do not
        exist (:mod:`eventplatform.events.topics`), once per producer."""
        if topics <= self._topics_ready:
            return
        with self._topics_lock:
            missing = topics - self._topics_ready
            if missing:
                create_event_topics(self._settings, missing, timeout_s=self._delivery_timeout_s)
                self._topics_ready |= missing

    def _send(self, rows: list[Appendable], records: list[EncodedEvent]) -> Future[list[EventRef]]:
        batch = _PendingAppend(rows, records)
        produce: Any = self._producer.produce  # its stub types headers invariantly
        delivered = batch.delivered
        partial = functools.partial
        for index, record in enumerate(records):
            on_delivery = partial(delivered, index)
            partition = record.partition
            try:
                produce(
                    record.topic,
                    record.value,
                    record.key,
                    PARTITION_ANY if partition is None else partition,
                    on_delivery=on_delivery,
                    timestamp=record.timestamp_ms,
                    headers=record.headers,
                )
            except (BufferError, confluent_kafka.KafkaException):
                self._produce(record, on_delivery)  # waits for room, or says what failed
        return batch.future

    def _produce(self, record: EncodedEvent, on_delivery: Any) -> None:
        deadline = time.monotonic() + self._delivery_timeout_s
        arguments: dict[str, Any] = {
            "key": record.key,
            "value": record.value,
            "headers": record.headers,
            "timestamp": record.timestamp_ms,
            "on_delivery": on_delivery,
        }
        if record.partition is not None:
            arguments["partition"] = record.partition
        while True:
            try:
                self._producer.produce(record.topic, **arguments)
                return
            except BufferError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(QUEUE_FULL_BACKOFF_S)
            except confluent_kafka.KafkaException as exc:
                raise AppendError(f"cannot produce to {record.topic}: {exc}", []) from exc

    def _poll(self) -> None:
        while not self._closing.is_set():
            self._producer.poll(POLL_INTERVAL_S)


class _PendingAppend:
    """Collects the delivery reports of one append; resolves its future on the last one.

    A report only notes where its record landed; the refs are made once, when
    the last report is in.
    """

    def __init__(self, rows: list[Appendable], records: list[EncodedEvent]) -> None:
        self.rows = rows
        self.records = records
        self.partitions: list[int] = [0] * len(rows)
        self.offsets: list[int] = [-1] * len(rows)
        self.errors: list[str] = []
        self.failed: set[int] = set()
        self.last = len(rows) - 1
        self.reported = itertools.count()
        self.future: Future[list[EventRef]] = Future()
        if not rows:
            self.future.set_result([])

    def delivered(self, index: int, error: confluent_kafka.KafkaError | None, message: Any) -> None:
        """The delivery report of event ``index``, on whichever thread polls (``flush``
        serves reports too). Each report writes only its own slots, then counts
        itself with one atomic step; the one that counts last finishes."""
        if error is None:
            self.partitions[index] = message.partition()
            self.offsets[index] = message.offset()
        else:
            self.errors.append(f"event {index}: {error.str()}")
            self.failed.add(index)
        if next(self.reported) == self.last:
            self._finish()

    def _finish(self) -> None:
        refs = self._refs()
        if self.errors:
            failed = len(self.errors)
            events = "event was" if len(refs) == 1 else "events were"
            message = f"{failed} of {len(refs)} {events} not appended: {self.errors[0]}"
            self.future.set_exception(AppendError(message, list(refs)))
        else:
            self.future.set_result(refs)  # type: ignore[arg-type]  # no None: nothing failed

    def _refs(self) -> list[EventRef | None]:
        new, set_ = object.__new__, object.__setattr__
        refs: list[EventRef | None] = []
        failed = self.failed
        for index, (row, record, partition, offset) in enumerate(
            zip(self.rows, self.records, self.partitions, self.offsets, strict=True)
        ):
            if index in failed:
                refs.append(None)
                continue
            # EventRef(row[1], row[3], Position(record.topic, partition, offset)), without
            # the frozen dataclasses' __init__: the fields are known to be right
            position = new(Position)
            set_(position, "topic", record.topic)
            set_(position, "partition", partition)
            set_(position, "offset", offset)
            ref = new(EventRef)
            set_(ref, "event_id", row[1])
            set_(ref, "key", row[3])
            set_(ref, "position", position)
            refs.append(ref)
        return refs


async def _trio_wait(future: Future[list[EventRef]]) -> list[EventRef]:
    import trio

    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    future.add_done_callback(lambda _: token.run_sync_soon(done.set))
    await done.wait()
    return future.result()
