"""The client workers of the systems in :mod:`peers`, each run in its own ``spawn`` process.

For each system: ``produce`` and ``consume`` for throughput, ``latency_produce`` and
``latency_consume`` for end-to-end latency at a fixed rate. They take plain, picklable
arguments (see :mod:`peers`). A throughput worker sends one warm-up record, waits on the
shared barrier, and returns when its step started and ended; a consumer reads
``count + 1`` records (the warm-up record included) and starts its clock at the first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from bench.harness import Deadline
from bench.peers import (
    KAFKA_FETCH_QUEUE_BACKOFF_MS,
    KAFKA_QUEUED_MESSAGES_MIN,
    LATENCY_WARMUP_S,
    NATS_FETCH,
    NATS_PENDING_MAX,
    PRIME,
    PRIME_INTERVAL_S,
    RABBIT_BATCH,
    RABBIT_UNCONFIRMED_MAX,
    REDIS_PIPELINE,
    REDIS_READ_COUNT,
    START_TIMEOUT_S,
    STEP_TIMEOUT_S,
    STOP,
)

# ---------------------------------------------------------------- throughput workers


def send_all(
    producer: Any, topic: str, value: bytes, count: int, delivered: Any, deadline: Deadline
) -> None:
    """Hand librdkafka ``count`` records as fast as it takes them, polling while its queue
    is full."""
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.001)
                if deadline.passed():
                    raise SystemExit("produce ran out of time") from None


def kafka_produce(
    endpoint: dict[str, Any], stream: str, value_bytes: int, count: int, barrier: Any
) -> tuple[float, float]:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": endpoint["bootstrap"],
            "acks": endpoint["acks"],
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    failures: list[Any] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(error)

    producer.produce(stream, b"warm-up", on_delivery=delivered)
    producer.flush(STEP_TIMEOUT_S)
    value = b"x" * value_bytes
    barrier.wait(START_TIMEOUT_S)
    started = time.monotonic()
    send_all(producer, stream, value, count, delivered, Deadline(STEP_TIMEOUT_S))
    if producer.flush(STEP_TIMEOUT_S) != 0 or failures:
        raise SystemExit(f"produce failed: {failures[:3]}")
    return started, time.monotonic()


def connected_consumer(bootstrap: str, topic: str) -> Any:
    """A confluent-kafka consumer for a throughput step (fetches of up to 64 MB, no
    commits), connected and with ``topic``'s leaders known before the step starts:
    otherwise librdkafka, having dropped its bootstrap connection, may look a leader up
    only on its next one-second timer, and that consumer starts a second late."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "queued.max.messages.kbytes": 1024 * 1024,
            # librdkafka stops fetching a partition that has queued.min.messages
            # (100,000) waiting and tries again fetch.queue.backoff.ms (1 s) later:
            # a step of 100 B records spent most of its time in that pause.
            "queued.min.messages": KAFKA_QUEUED_MESSAGES_MIN,
            "fetch.queue.backoff.ms": KAFKA_FETCH_QUEUE_BACKOFF_MS,
        }
    )
    consumer.list_topics(topic, timeout=START_TIMEOUT_S)
    return consumer


def kafka_consume(
    endpoint: dict[str, Any], stream: str, count: int, barrier: Any
) -> tuple[float, float]:
    from confluent_kafka import TopicPartition

    consumer = connected_consumer(endpoint["bootstrap"], stream)
    barrier.wait(START_TIMEOUT_S)
    consumer.assign([TopicPartition(stream, 0, 0)])
    received, first, batch = 0, 0.0, []
    deadline = Deadline(STEP_TIMEOUT_S)
    while received <= count and not deadline.passed():
        # Never ask for more than remain: consume() waits its timeout for a full batch.
        # Counted per batch, as the other clients count; the position checks it below.
        batch = consumer.consume(min(10_000, count + 1 - received), 1.0)
        if batch:
            first = first or time.monotonic()
            received += len(batch)
    finished = time.monotonic()
    errors = [message.error() for message in batch if message.error() is not None]
    position = consumer.position([TopicPartition(stream, 0)])[0].offset
    consumer.close()
    if received <= count or position != count + 1 or errors:
        raise SystemExit(
            f"consumed {received} of {count + 1} records, position {position}: {errors[:3]}"
        )
    return first, finished


def redis_produce(
    endpoint: dict[str, Any], stream: str, value_bytes: int, count: int, barrier: Any
) -> tuple[float, float]:
    import redis

    client = redis.Redis(host=endpoint["host"], port=endpoint["port"])
    client.xadd(stream, {"v": b"warm-up"})
    value = b"x" * value_bytes
    barrier.wait(START_TIMEOUT_S)
    started = time.monotonic()
    deadline = Deadline(STEP_TIMEOUT_S)
    sent = 0
    while sent < count and not deadline.passed():
        pipeline = client.pipeline(transaction=False)
        for _ in range(min(REDIS_PIPELINE, count - sent)):
            pipeline.xadd(stream, {"v": value})
        sent += len(pipeline.execute())
    if sent < count:
        raise SystemExit(f"produced {sent} of {count} records")
    return started, time.monotonic()


def redis_consume(
    endpoint: dict[str, Any], stream: str, count: int, barrier: Any
) -> tuple[float, float]:
    import redis

    client = redis.Redis(host=endpoint["host"], port=endpoint["port"])
    client.ping()
    barrier.wait(START_TIMEOUT_S)
    received, first = 0, 0.0
    deadline = Deadline(STEP_TIMEOUT_S)
    while received <= count and not deadline.passed():
        answer = client.xreadgroup(
            "bench", "reader", {stream: ">"}, count=REDIS_READ_COUNT, block=1000, noack=True
        )
        for _name, entries in answer:
            first = first or time.monotonic()
            received += len(entries)
    if received <= count:
        raise SystemExit(f"consumed {received} of {count + 1} records")
    return first, time.monotonic()


def nats_produce(
    endpoint: dict[str, Any], stream: str, value_bytes: int, count: int, barrier: Any
) -> tuple[float, float]:
    """JetStream's async publish at the protocol level: each message is published with a
    reply subject, the stream's acknowledgements arrive there, and at most
    ``NATS_PENDING_MAX`` are outstanding (nats-py's ``publish_async`` does the same with
    a future per message, which costs this Python client more than the publish)."""
    import nats

    async def run() -> tuple[float, float]:
        connection = await nats.connect(endpoint["url"])
        await connection.jetstream().publish(stream, b"warm-up")
        sent = acknowledged = 0
        failures: list[bytes] = []
        room, done = asyncio.Event(), asyncio.Event()

        async def on_acknowledgement(message: Any) -> None:
            nonlocal acknowledged
            acknowledged += 1
            if b'"error"' in message.data:
                failures.append(message.data)
            if sent - acknowledged <= NATS_PENDING_MAX // 2:
                room.set()
            if acknowledged >= count:
                done.set()

        inbox = connection.new_inbox()
        await connection.subscribe(inbox, cb=on_acknowledgement)
        value = b"x" * value_bytes
        barrier.wait(START_TIMEOUT_S)
        started = time.monotonic()
        deadline = Deadline(STEP_TIMEOUT_S)
        while sent < count:
            if sent - acknowledged >= NATS_PENDING_MAX:
                room.clear()
                await connection.flush()
                await asyncio.wait_for(room.wait(), STEP_TIMEOUT_S)
                if deadline.passed():
                    raise SystemExit("produce ran out of time")
            await connection.publish(stream, value, reply=inbox)
            sent += 1
        await connection.flush()
        await asyncio.wait_for(done.wait(), max(1.0, deadline.remaining()))
        finished = time.monotonic()
        await connection.close()
        if failures:
            raise SystemExit(f"{len(failures)} publishes failed: {failures[0]!r}")
        return started, finished

    return asyncio.run(run())


class NatsPull:
    """A pull consumer (AckNone) at the protocol level: two pull requests of
    ``NATS_FETCH`` messages are kept outstanding, each message's data goes to ``on_data``
    until it returns False, and ``done`` is set then. (nats-py's ``fetch`` awaits each
    message with a timeout of its own, which costs this Python client more than the
    message, and its short pull requests expire and are re-sent all the while.)"""

    def __init__(
        self, connection: Any, stream: str, durable: str, on_data: Callable[[bytes], bool]
    ) -> None:
        self.connection = connection
        self.stream = stream
        self.durable = durable
        self.on_data = on_data
        self.done = asyncio.Event()
        self.delivered = 0
        self.inbox = connection.new_inbox()

    async def open(self, deliver_policy: Any) -> None:
        """Create the consumer and subscribe to its deliveries (nothing is asked yet)."""
        from nats.js.api import AckPolicy, ConsumerConfig

        config = ConsumerConfig(
            durable_name=self.durable, ack_policy=AckPolicy.NONE, deliver_policy=deliver_policy
        )
        await self.connection.jetstream().add_consumer(self.stream, config=config)
        await self.connection.subscribe(self.inbox, cb=self._on_message)

    async def begin(self) -> None:
        await self._ask()
        await self._ask()

    async def _ask(self) -> None:
        request = json.dumps({"batch": NATS_FETCH, "expires": int(5e9)}).encode()
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.durable}"
        await self.connection.publish(subject, request, self.inbox)

    async def _on_message(self, message: Any) -> None:
        if self.done.is_set():
            return
        if not message.data and message.headers and message.headers.get("Status"):
            await self._ask()  # the request expired (408) or found nothing (404)
            return
        self.delivered += 1
        if not self.on_data(message.data):
            self.done.set()
        elif self.delivered % NATS_FETCH == 0:
            await self._ask()


def nats_consume(
    endpoint: dict[str, Any], stream: str, count: int, barrier: Any
) -> tuple[float, float]:
    """:class:`NatsPull` from the stream's first message."""
    import nats
    from nats.js.api import DeliverPolicy

    async def run() -> tuple[float, float]:
        connection = await nats.connect(endpoint["url"])
        first = 0.0

        def on_data(_data: bytes) -> bool:
            nonlocal first
            first = first or time.monotonic()
            return puller.delivered <= count

        puller = NatsPull(connection, stream, "bench", on_data)
        await puller.open(DeliverPolicy.ALL)
        barrier.wait(START_TIMEOUT_S)
        await puller.begin()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(puller.done.wait(), STEP_TIMEOUT_S)
        finished = time.monotonic()
        await connection.close()
        if puller.delivered <= count:
            raise SystemExit(f"consumed {puller.delivered} of {count + 1} records")
        return first, finished

    return asyncio.run(run())


def rabbit_produce(
    endpoint: dict[str, Any], stream: str, value_bytes: int, count: int, barrier: Any
) -> tuple[float, float]:
    from rstream import Producer

    async def run() -> tuple[float, float]:
        confirmed = 0
        failed = 0

        def on_confirm(status: Any) -> None:
            nonlocal confirmed, failed
            confirmed += 1
            if not status.is_confirmed:
                failed += 1

        async with Producer(
            endpoint["host"], endpoint["port"], username="guest", password="guest"
        ) as producer:
            await producer.send_wait(stream, b"warm-up")
            value = b"x" * value_bytes
            barrier.wait(START_TIMEOUT_S)
            started = time.monotonic()
            deadline = Deadline(STEP_TIMEOUT_S)
            sent = 0
            while sent < count and not deadline.passed():
                while sent - confirmed > RABBIT_UNCONFIRMED_MAX and not deadline.passed():
                    await asyncio.sleep(0.001)
                batch = [value] * min(RABBIT_BATCH, count - sent)
                await producer.send_batch(stream, batch, on_publish_confirm=on_confirm)
                sent += len(batch)
            while confirmed < sent and not deadline.passed():
                await asyncio.sleep(0.001)
            finished = time.monotonic()
        if confirmed < count or failed:
            raise SystemExit(f"{confirmed} of {count} confirmed, {failed} failed")
        return started, finished

    return asyncio.run(run())


def rabbit_consume(
    endpoint: dict[str, Any], stream: str, count: int, barrier: Any
) -> tuple[float, float]:
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    async def run() -> tuple[float, float]:
        received, first = 0, 0.0
        done = asyncio.Event()

        async def on_message(_message: Any, _context: Any) -> None:
            nonlocal received, first
            first = first or time.monotonic()
            received += 1
            if received > count:
                done.set()

        consumer = Consumer(endpoint["host"], endpoint["port"], username="guest", password="guest")
        await consumer.start()
        barrier.wait(START_TIMEOUT_S)
        await consumer.subscribe(
            stream,
            on_message,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
            initial_credit=32,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), STEP_TIMEOUT_S)
        finished = time.monotonic()
        await consumer.close()
        if received <= count:
            raise SystemExit(f"consumed {received} of {count + 1} records")
        return first, finished

    return asyncio.run(run())


# ---------------------------------------------------------------- latency workers
#
# The producer sends record i at start + i / rate and stamps that *intended* time in
# the record's first 8 bytes (wall-clock nanoseconds). When it falls behind it sends
# at once what is due, so a stall of the server or the client shows up in the
# latency of every record it delayed (no coordinated omission). The consumer
# subtracts the stamp from the time it received the record.


class Schedule:
    """Intended send times at a constant rate, and the records due by now."""

    def __init__(self, rate: int, seconds: float, value_bytes: int) -> None:
        self.interval_ns = int(1e9 / rate)
        self.total = int(rate * seconds)
        self.padding = b"x" * (value_bytes - 8)
        self.started_ns = time.time_ns()
        self.sent = 0

    def due(self) -> list[bytes]:
        """Block until at least one record is due; return every record due by now."""
        while True:
            now_ns = time.time_ns()
            next_ns = self.started_ns + self.sent * self.interval_ns
            if now_ns >= next_ns:
                break
            time.sleep(min((next_ns - now_ns) / 1e9, 0.01))
        count = min(
            self.total - self.sent, (now_ns - self.started_ns) // self.interval_ns + 1 - self.sent
        )
        values = [
            (self.started_ns + (self.sent + k) * self.interval_ns).to_bytes(8, "big") + self.padding
            for k in range(count)
        ]
        self.sent += count
        return values

    async def due_async(self) -> list[bytes]:
        now_ns = time.time_ns()
        next_ns = self.started_ns + self.sent * self.interval_ns
        if now_ns < next_ns:
            await asyncio.sleep((next_ns - now_ns) / 1e9)
        return self.due()

    @property
    def finished(self) -> bool:
        return self.sent >= self.total


class Latencies:
    """Receive-time minus intended-send-time, for records sent after the warm-up.

    Before the timed records, the producer sends priming records until the
    consumer has received one, so both are connected when the schedule starts.
    """

    def __init__(self, primed: Any) -> None:
        self.values_us: list[float] = []
        self.warm_until_ns: int | None = None
        self.primed = primed

    def record(self, value: bytes) -> bool:
        """Account one received value; False once it is the stop marker."""
        now_ns = time.time_ns()
        if value == STOP:
            return False
        if value == PRIME:
            self.primed.set()
            return True
        sent_ns = int.from_bytes(value[:8], "big")
        if self.warm_until_ns is None:
            self.warm_until_ns = sent_ns + int(LATENCY_WARMUP_S * 1e9)
        if sent_ns >= self.warm_until_ns:
            self.values_us.append((now_ns - sent_ns) / 1000)
        return True


def prime(send: Callable[[bytes], Any], primed: Any) -> None:
    """Send priming records until the consumer has seen one."""
    deadline = Deadline(START_TIMEOUT_S)
    while not primed.wait(PRIME_INTERVAL_S):
        send(PRIME)
        if deadline.passed():
            raise SystemExit("the latency consumer never received a priming record")


async def prime_async(send: Callable[[bytes], Any], primed: Any) -> None:
    deadline = Deadline(START_TIMEOUT_S)
    while not primed.is_set():
        await send(PRIME)
        await asyncio.sleep(PRIME_INTERVAL_S)
        if deadline.passed():
            raise SystemExit("the latency consumer never received a priming record")


def kafka_latency_produce(endpoint: dict[str, Any], stream: str, plan: Any, primed: Any) -> int:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": endpoint["bootstrap"], "acks": endpoint["acks"], "linger.ms": 1}
    )

    def send(value: bytes) -> None:
        producer.produce(stream, value)
        producer.poll(0)

    prime(send, primed)
    schedule = Schedule(*plan)
    while not schedule.finished:
        for value in schedule.due():
            producer.produce(stream, value)
        producer.poll(0)
    producer.produce(stream, STOP)
    producer.flush(STEP_TIMEOUT_S)
    return schedule.sent


def kafka_latency_consume(
    endpoint: dict[str, Any], stream: str, latencies: Latencies, ready: Any, deadline: Deadline
) -> None:
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": endpoint["bootstrap"],
            "group.id": f"bench-{stream}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(stream, 0, OFFSET_END)])
    consumer.consume(1, 1.0)
    ready.set()
    running = True
    while running and not deadline.passed():
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            running = latencies.record(message.value())
    consumer.close()


def redis_latency_produce(endpoint: dict[str, Any], stream: str, plan: Any, primed: Any) -> int:
    import redis

    client = redis.Redis(host=endpoint["host"], port=endpoint["port"])
    prime(lambda value: client.xadd(stream, {"v": value}), primed)
    schedule = Schedule(*plan)
    while not schedule.finished:
        pipeline = client.pipeline(transaction=False)
        for value in schedule.due():
            pipeline.xadd(stream, {"v": value})
        pipeline.execute()
    client.xadd(stream, {"v": STOP})
    return schedule.sent


def redis_latency_consume(
    endpoint: dict[str, Any], stream: str, latencies: Latencies, ready: Any, deadline: Deadline
) -> None:
    import redis

    client = redis.Redis(host=endpoint["host"], port=endpoint["port"])
    last = client.xinfo_stream(stream)["last-generated-id"]
    ready.set()
    running = True
    while running and not deadline.passed():
        for _name, entries in client.xread({stream: last}, count=1000, block=100) or []:
            for entry_id, fields in entries:
                last = entry_id
                if not latencies.record(fields[b"v"]):
                    running = False


def nats_latency_produce(endpoint: dict[str, Any], stream: str, plan: Any, primed: Any) -> int:
    import nats

    async def run() -> int:
        connection = await nats.connect(endpoint["url"])
        js = connection.jetstream(publish_async_max_pending=NATS_PENDING_MAX)
        await prime_async(lambda value: js.publish(stream, value), primed)
        schedule = Schedule(*plan)
        while not schedule.finished:
            for value in await schedule.due_async():
                await js.publish_async(stream, value)
        await js.publish(stream, STOP)
        await asyncio.wait_for(js.publish_async_completed(), STEP_TIMEOUT_S)
        await connection.close()
        return schedule.sent

    return asyncio.run(run())


def nats_latency_consume(
    endpoint: dict[str, Any], stream: str, latencies: Latencies, ready: Any, deadline: Deadline
) -> None:
    """:class:`NatsPull` from the messages published after it starts."""
    import nats
    from nats.js.api import DeliverPolicy

    async def run() -> None:
        connection = await nats.connect(endpoint["url"])
        puller = NatsPull(connection, stream, "latency", latencies.record)
        await puller.open(DeliverPolicy.NEW)
        await puller.begin()
        ready.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(puller.done.wait(), deadline.remaining())
        await connection.close()

    asyncio.run(run())


def rabbit_latency_produce(endpoint: dict[str, Any], stream: str, plan: Any, primed: Any) -> int:
    from rstream import Producer

    async def run() -> int:
        async with Producer(
            endpoint["host"], endpoint["port"], username="guest", password="guest"
        ) as producer:
            await prime_async(lambda value: producer.send_wait(stream, value), primed)
            schedule = Schedule(*plan)
            while not schedule.finished:
                await producer.send_batch(stream, await schedule.due_async())
            await producer.send_wait(stream, STOP)
            return schedule.sent

    return asyncio.run(run())


def rabbit_latency_consume(
    endpoint: dict[str, Any], stream: str, latencies: Latencies, ready: Any, deadline: Deadline
) -> None:
    from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

    async def run() -> None:
        done = asyncio.Event()

        async def on_message(message: Any, _context: Any) -> None:
            if not latencies.record(bytes(message)):
                done.set()

        consumer = Consumer(endpoint["host"], endpoint["port"], username="guest", password="guest")
        await consumer.start()
        await consumer.subscribe(
            stream,
            on_message,
            offset_specification=ConsumerOffsetSpecification(OffsetType.NEXT, None),
            initial_credit=32,
        )
        ready.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), max(1.0, deadline.remaining()))
        await consumer.close()

    asyncio.run(run())


WORKERS: dict[str, dict[str, Callable[..., Any]]] = {
    "kafka": {
        "produce": kafka_produce,
        "consume": kafka_consume,
        "latency_produce": kafka_latency_produce,
        "latency_consume": kafka_latency_consume,
    },
    "redis": {
        "produce": redis_produce,
        "consume": redis_consume,
        "latency_produce": redis_latency_produce,
        "latency_consume": redis_latency_consume,
    },
    "nats": {
        "produce": nats_produce,
        "consume": nats_consume,
        "latency_produce": nats_latency_produce,
        "latency_consume": nats_latency_consume,
    },
    "rabbitmq": {
        "produce": rabbit_produce,
        "consume": rabbit_consume,
        "latency_produce": rabbit_latency_produce,
        "latency_consume": rabbit_latency_consume,
    },
}


def client_family(system: str) -> str:
    return "kafka" if system.startswith("eventplatform") else system


# ---------------------------------------------------------------- running workers in processes


def throughput_worker(
    system: str,
    role: str,
    endpoint: dict[str, Any],
    stream: str,
    value_bytes: int,
    count: int,
    barrier: Any,
    results: Any,
) -> None:
    """One producer or consumer process: puts (stream, finish time or error) on ``results``."""
    try:
        worker = WORKERS[client_family(system)][role]
        if role == "produce":
            finished = worker(endpoint, stream, value_bytes, count, barrier)
        else:
            finished = worker(endpoint, stream, count, barrier)
        results.put((stream, finished, None))
    except BaseException as exc:  # reported to the parent, which fails the step
        barrier.abort()
        results.put((stream, None, f"{type(exc).__name__}: {exc}"))


def latency_producer_process(
    system: str,
    endpoint: dict[str, Any],
    stream: str,
    rate: int,
    seconds: float,
    value_bytes: int,
    primed: Any,
    results: Any,
) -> None:
    try:
        plan = (rate, seconds, value_bytes)
        sent = WORKERS[client_family(system)]["latency_produce"](endpoint, stream, plan, primed)
        results.put(("producer", sent, None))
    except BaseException as exc:
        results.put(("producer", None, f"{type(exc).__name__}: {exc}"))


def latency_consumer_process(
    system: str,
    endpoint: dict[str, Any],
    stream: str,
    seconds: float,
    ready: Any,
    primed: Any,
    results: Any,
) -> None:
    try:
        latencies = Latencies(primed)
        deadline = Deadline(seconds + 30)
        WORKERS[client_family(system)]["latency_consume"](
            endpoint, stream, latencies, ready, deadline
        )
        results.put(("consumer", latencies.values_us, None))
    except BaseException as exc:
        ready.set()
        results.put(("consumer", None, f"{type(exc).__name__}: {exc}"))
