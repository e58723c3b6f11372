"""The scaling benchmark's client side: a pool of spawned confluent-kafka processes that
is reused across its steps, the restart probe, and the admin calls it makes from the
parent (see :mod:`scaling`)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.pool import AsyncResult
from types import TracebackType
from typing import Any

from bench.broker import STEP_TIMEOUT_S
from bench.harness import Deadline

PRODUCERS = 2
CONSUMERS = 2
CLIENT_PROCESSES = max(PRODUCERS, CONSUMERS)
RESTART_TIMEOUT_S = 180.0
RECONNECT_BACKOFF_MS = 10
RECONNECT_BACKOFF_MS_MAX = 100
PROBE_POLL_S = 0.01
LOG_LEVEL_CRITICAL = 2


def _import_client() -> None:
    import confluent_kafka  # noqa: F401


def _call(
    function: Callable[..., Any], arguments: tuple[Any, ...], keywords: dict[str, Any]
) -> Any:
    """Run a worker; its SystemExit becomes an error the pool hands back instead of a dead
    worker whose result never comes."""
    try:
        return function(*arguments, **keywords)
    except SystemExit as exc:
        raise RuntimeError(f"{function.__name__}: {exc}") from None


class ClientPool:
    """Warm client processes (spawned once, confluent-kafka imported) and a manager for the
    barriers that start several of them together. Used from one thread."""

    def __init__(self, processes: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.processes = processes
        self._manager = context.Manager()
        self._pool = context.Pool(processes, initializer=_import_client)

    def __enter__(self) -> ClientPool:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._pool.terminate()
        self._pool.join()
        self._manager.shutdown()

    def run(
        self, function: Callable[..., Any], argument_lists: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        """``function(*arguments, barrier=...)`` in one process per argument list, at once."""
        if len(argument_lists) > self.processes:
            raise ValueError(f"{len(argument_lists)} steps for {self.processes} processes")
        barrier = self._manager.Barrier(len(argument_lists))
        pending = [
            self._pool.apply_async(_call, (function, arguments, {"barrier": barrier}))
            for arguments in argument_lists
        ]
        return [wait_result(result, STEP_TIMEOUT_S + 60) for result in pending]

    def start(self, function: Callable[..., Any], *arguments: Any) -> AsyncResult[Any]:
        """``function(*arguments)`` in one process; collect it with :func:`wait_result`."""
        return self._pool.apply_async(_call, (function, arguments, {}))


def wait_result(result: AsyncResult[Any], timeout_s: float) -> Any:
    try:
        return result.get(timeout_s)
    except multiprocessing.TimeoutError:
        raise SystemExit(f"a client process gave no result in {timeout_s:.0f} s") from None
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None


def restart_probe(bootstrap: str, topic: str, last_offset: int) -> dict[str, Any]:
    """While the broker restarts: produce one record and fetch ``last_offset`` of partition 0.

    Both clients exist before the broker listens and retry every 10-100 ms. Returns
    the monotonic times of the acknowledgement and of the fetch (None if they did not
    happen), the offset the new record got (the log end after recovery) and the high
    watermark at the end.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    # librdkafka connects only when a metadata or leader query is due: keep those frequent too.
    reconnect = {
        "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
        "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MS_MAX,
        "retry.backoff.ms": RECONNECT_BACKOFF_MS,
        "retry.backoff.max.ms": RECONNECT_BACKOFF_MS_MAX,
        "topic.metadata.refresh.fast.interval.ms": RECONNECT_BACKOFF_MS,
        "log_level": LOG_LEVEL_CRITICAL,  # "connection refused" until the broker listens
    }
    outcome: dict[str, Any] = {"acknowledged_at": None, "recovered_end": None, "fetched_at": None}
    producer_thread = threading.Thread(
        target=_probe_produce, args=(bootstrap, topic, reconnect, outcome), daemon=True
    )
    producer_thread.start()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-restart-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            **reconnect,
        }
    )
    consumer.assign([TopicPartition(topic, 0, last_offset)])
    deadline = Deadline(RESTART_TIMEOUT_S)
    while outcome["fetched_at"] is None and not deadline.passed():
        message = consumer.poll(PROBE_POLL_S)
        if message is None:
            continue
        error = message.error()
        if error is None and message.offset() == last_offset:
            outcome["fetched_at"] = time.monotonic()
        elif error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET:
            break  # the offset is gone: the record was lost
    producer_thread.join(RESTART_TIMEOUT_S)
    outcome["high_watermark"] = consumer.get_watermark_offsets(
        TopicPartition(topic, 0), timeout=10
    )[1]
    consumer.close()
    return outcome


def _probe_produce(
    bootstrap: str, topic: str, reconnect: dict[str, int], outcome: dict[str, Any]
) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 0,
            "message.timeout.ms": int(RESTART_TIMEOUT_S * 1000),
            **reconnect,
        }
    )

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            outcome["acknowledged_at"] = time.monotonic()
            outcome["recovered_end"] = message.offset()

    producer.produce(topic, b"after-restart", partition=0, on_delivery=delivered)
    deadline = Deadline(RESTART_TIMEOUT_S)
    while outcome["acknowledged_at"] is None and not deadline.passed():
        producer.poll(PROBE_POLL_S)
    producer.flush(1)


def create_topics(bootstrap: str, names: Sequence[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names],
        operation_timeout=60,
    )
    for future in futures.values():
        future.result(timeout=120)


class StallProbe:
    """ListGroups requests one after another, from a thread of this process, while the
    broker does something else: the slowest answer is the longest time the broker served
    nothing else (its one event loop was busy or blocked)."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self._ask()  # connected before the measurement
        self.longest_s = 0.0
        self.requests = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StallProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(STEP_TIMEOUT_S)

    def _ask(self) -> None:
        self.admin.list_consumer_groups(request_timeout=STEP_TIMEOUT_S).result()

    def _run(self) -> None:
        deadline = Deadline(STEP_TIMEOUT_S)
        while not self._stop.is_set() and not deadline.passed():
            started = time.monotonic()
            self._ask()
            self.longest_s = max(self.longest_s, time.monotonic() - started)
            self.requests += 1
            time.sleep(PROBE_POLL_S)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-scaling-offsets"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1]
            for partition in range(partitions)
        ]
    finally:
        consumer.close()
