"""Producer benchmark: ``EventProducer.append`` against a raw confluent-kafka producer.

The events are ``ItemAdded(cart_id, sku, quantity, price_cents)``, keyed by
cart (100,000 carts, fixed seed): records of an 11-byte key, a 286-byte value
and the two type headers. Each list size (``--list-size``, 1,000 and 20,000)
has its own topic of ``--partitions`` partitions, created before any run
with the configs the SDK gives the event topics it creates (entity versions
on; none on revisions whose SDK creates none, or with ``--plain-topics``),
on a ``platform serve`` broker started for the run (fresh data directory,
deleted at the end). Keeping entity versions costs the broker time on every
append, which the raw producer feels first: ``--plain-topics`` leaves the
producers' own costs as the difference, and the broker's work the same as
on revisions whose SDK creates no topics. Per list size,
``--events`` events are built once; both producers send them in lists of
that size, one list at a time, and wait for every acknowledgement of a list
before sending the next:

* **SDK**: a new ``EventProducer`` (its defaults) per run calls ``append``
  once per list. The clock covers what ``append`` does to the event objects
  it is given: validation, envelopes, encoding, producing and waiting for
  every delivery report. The event objects are built before the clock
  starts: they are the caller's input.
* **raw**: a new ``confluent_kafka.Producer`` per run, with the SDK
  producer's settings (``PRODUCER_DEFAULTS``: idempotence, ``acks=all``,
  ``linger.ms``, lz4, the ``murmur2_random`` partitioner; and its delivery
  timeout), sends the records the SDK's codec made of the same events:
  key, value, headers and timestamp, encoded once before the first run and
  outside every clock. Its clock covers ``produce`` for each record (with a
  delivery callback that only notes errors) and ``flush`` after each list.

Before its clock starts, each producer appends one event (or record) to the
topic, so that connecting, fetching metadata, getting an idempotent producer
id, and the SDK's check that the topic exists happen outside it. Each run
is repeated ``--repeat`` times, SDK and raw alternating (the order swapped
every repetition), so that noise on a shared machine hits both. Reported:
events/s median (min-max), CPU microseconds per event of this process
(user + system, every thread: the SDK's and librdkafka's too), and the ratio
of the medians SDK / raw per list size (goal: at least 0.5).

Run ``python -m bench.producer --quick`` for a smoke run of well under a minute.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import types
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import (
    BrokerProcess,
    Deadline,
    Spread,
    Stopwatch,
    describe_machine,
    format_spread,
    invocation,
    markdown_table,
    progress,
)
from eventplatform.events import Envelope, Event, EventProducer
from eventplatform.events.codec import EncodedEvent, encode
from eventplatform.events.producer import DELIVERY_TIMEOUT_S_DEFAULT, PRODUCER_DEFAULTS

try:
    from eventplatform.events.topics import EVENT_TOPIC_CONFIG
except ImportError:  # older revisions' SDK created no topics, so gave them no configs
    EVENT_TOPIC_CONFIG = {}

GOAL_RATIO = 0.5
EVENTS_DEFAULT = 200_000
LIST_SIZES = (1_000, 20_000)
REPEAT_DEFAULT = 5
PARTITIONS_DEFAULT = 4
QUICK_EVENTS = 20_000
QUICK_REPEAT = 3
EVENT_TYPE = "benchproducer.item_added"
CARTS = 100_000
SKUS = 5_000
QUANTITY_MAX = 5
PRICE_CENTS_MAX = 50_000
SEED = 20261121
TOPIC_TIMEOUT_S = 30.0
RUN_TIMEOUT_S = 600.0
QUEUE_FULL_BACKOFF_S = 0.001
PRODUCE_ATTEMPTS_MAX = 100_000
SIDES = ("sdk", "raw")


class CartItem(Event):
    """The payload of ``ItemAdded``; each list size's class adds its type and topic."""

    cart_id: str
    sku: str
    quantity: int
    price_cents: int


def item_added_class(topic: str) -> type[CartItem]:
    """``ItemAdded``, type ``benchproducer.item_added`` v1 keyed by cart, on ``topic``."""
    keywords = {"type": EVENT_TYPE, "version": 1, "key": "cart_id", "topic": topic}
    return cast(type[CartItem], types.new_class("ItemAdded", (CartItem,), keywords))


def items(event_class: type[CartItem], count: int) -> list[CartItem]:
    generator = random.Random(SEED)
    return [
        event_class(
            cart_id=f"cart-{generator.randrange(CARTS):06d}",
            sku=f"sku-{generator.randrange(SKUS):05d}",
            quantity=generator.randint(1, QUANTITY_MAX),
            price_cents=generator.randrange(PRICE_CENTS_MAX),
        )
        for _ in range(count)
    ]


def topic_name(list_size: int) -> str:
    return f"benchproducer-list-{list_size}"


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 1, config=config)
    futures = admin.create_topics([new], request_timeout=TOPIC_TIMEOUT_S)
    futures[topic].result(timeout=TOPIC_TIMEOUT_S)


def raw_settings(bootstrap: str) -> dict[str, Any]:
    """What ``EventProducer(bootstrap)`` gives its confluent-kafka producer."""
    return {
        **PRODUCER_DEFAULTS,
        "bootstrap.servers": bootstrap,
        "delivery.timeout.ms": int(DELIVERY_TIMEOUT_S_DEFAULT * 1000),
    }


# ---------------------------------------------------------------- runs


@dataclass(frozen=True)
class Sample:
    """One timed run: ``events`` appended in lists of ``list_size`` in ``seconds``."""

    producer: str
    list_size: int
    events: int
    seconds: float
    cpu_seconds: float

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_seconds / self.events * 1e6


@dataclass(frozen=True)
class Plan:
    events: int
    repeat: int
    partitions: int
    list_sizes: tuple[int, ...]
    topic_config: dict[str, str]


def run_sdk(bootstrap: str, events: Sequence[CartItem], list_size: int) -> Sample:
    deadline = Deadline(RUN_TIMEOUT_S)
    with EventProducer(bootstrap) as producer:
        producer.append(events[:1])
        clock = Stopwatch()
        for start in range(0, len(events), list_size):
            if deadline.passed():
                raise SystemExit(f"SDK, lists of {list_size}: ran out of time at {start}")
            chunk = events[start : start + list_size]
            refs = producer.append(chunk)
            if len(refs) != len(chunk):
                raise SystemExit(f"SDK: {len(refs)} refs for {len(chunk)} events")
        seconds, cpu_seconds = clock.elapsed()
    return Sample("sdk", list_size, len(events), seconds, cpu_seconds)


def run_raw(bootstrap: str, topic: str, records: Sequence[EncodedEvent], list_size: int) -> Sample:
    deadline = Deadline(RUN_TIMEOUT_S)
    producer = confluent_kafka.Producer(raw_settings(bootstrap))
    errors: list[str] = []

    def delivered(error: confluent_kafka.KafkaError | None, _message: Any) -> None:
        if error is not None:
            errors.append(error.str())

    produce(producer, topic, records[0], delivered, deadline)
    if producer.flush(DELIVERY_TIMEOUT_S_DEFAULT) or errors:
        raise SystemExit(f"raw: the first record was not delivered: {errors[:1]}")
    clock = Stopwatch()
    for start in range(0, len(records), list_size):
        if deadline.passed():
            raise SystemExit(f"raw, lists of {list_size}: ran out of time at {start}")
        for record in records[start : start + list_size]:
            produce(producer, topic, record, delivered, deadline)
        if producer.flush(DELIVERY_TIMEOUT_S_DEFAULT) or errors:
            raise SystemExit(f"raw: records not delivered: {errors[:1]}")
    seconds, cpu_seconds = clock.elapsed()
    return Sample("raw", list_size, len(records), seconds, cpu_seconds)


def produce(
    producer: confluent_kafka.Producer,
    topic: str,
    record: EncodedEvent,
    delivered: Any,
    deadline: Deadline,
) -> None:
    """One record as the SDK sends it (a correction's partition aside: there are none)."""
    headers: Any = record.headers  # confluent-kafka's stubs take a list of str | bytes | None
    for _ in range(PRODUCE_ATTEMPTS_MAX):
        try:
            producer.produce(
                topic,
                key=record.key,
                value=record.value,
                headers=headers,
                timestamp=record.timestamp_ms,
                on_delivery=delivered,
            )
            return
        except BufferError:
            if deadline.passed():
                raise
            producer.poll(QUEUE_FULL_BACKOFF_S)
    raise SystemExit(f"raw: the producer's queue stayed full for {PRODUCE_ATTEMPTS_MAX} polls")


def measure(bootstrap: str, list_size: int, plan: Plan) -> list[Sample]:
    topic = topic_name(list_size)
    create_topic(bootstrap, topic, plan.partitions, plan.topic_config)
    batch = items(item_added_class(topic), plan.events)
    records = [encode(Envelope(event)) for event in batch]
    if any(record.partition is not None or record.topic != topic for record in records):
        raise SystemExit(f"the codec routed an event away from {topic}")
    samples = []
    deadline = Deadline(RUN_TIMEOUT_S * len(SIDES) * plan.repeat)
    for repetition in range(plan.repeat):
        if deadline.passed():
            raise SystemExit(f"lists of {list_size}: ran out of time at repetition {repetition}")
        for side in SIDES if repetition % 2 == 0 else SIDES[::-1]:
            if side == "sdk":
                sample = run_sdk(bootstrap, batch, list_size)
            else:
                sample = run_raw(bootstrap, topic, records, list_size)
            samples.append(sample)
            progress(
                f"lists of {list_size:,}, repetition {repetition + 1}, {side}: "
                f"{sample.events_per_second:,.0f} events/s, "
                f"{sample.cpu_us_per_event:.1f} CPU µs/event"
            )
    return samples


# ---------------------------------------------------------------- report


def report(samples: Sequence[Sample], list_sizes: Sequence[int]) -> str:
    rows = [
        [
            "list size",
            "events per run",
            "SDK append events/s median (min-max)",
            "raw confluent-kafka events/s median (min-max)",
            "SDK CPU µs/event",
            "raw CPU µs/event",
            "SDK / raw",
            "goal",
            "met?",
        ]
    ]
    for list_size in list_sizes:
        sdk = [s for s in samples if s.list_size == list_size and s.producer == "sdk"]
        raw = [s for s in samples if s.list_size == list_size and s.producer == "raw"]
        if not sdk or not raw:
            continue
        sdk_rate = Spread.of([s.events_per_second for s in sdk])
        raw_rate = Spread.of([s.events_per_second for s in raw])
        ratio = sdk_rate.median / raw_rate.median
        rows.append(
            [
                f"{list_size:,}",
                f"{sdk[0].events:,}",
                format_spread(sdk_rate),
                format_spread(raw_rate),
                f"{statistics.median(s.cpu_us_per_event for s in sdk):.1f}",
                f"{statistics.median(s.cpu_us_per_event for s in raw):.1f}",
                f"{ratio:.2f}",
                f"ratio >= {GOAL_RATIO}",
                "yes" if ratio >= GOAL_RATIO else "no",
            ]
        )
    return markdown_table(rows)


def topic_configs(config: dict[str, str]) -> str:
    return ", ".join(f"{name}={value}" for name, value in config.items()) or "none"


# ---------------------------------------------------------------- main


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=None, help="events per run")
    parser.add_argument("--repeat", type=int, default=None, help="runs per producer")
    parser.add_argument("--list-size", type=int, action="append", default=None)
    parser.add_argument("--partitions", type=int, default=PARTITIONS_DEFAULT)
    parser.add_argument(
        "--plain-topics",
        action="store_true",
        help="create the topics without the configs of the SDK's event topics",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run: {QUICK_EVENTS:,} events per run, {QUICK_REPEAT} repetitions",
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the scratch dir")
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> None:
    arguments = parse_arguments(argv)
    quick = arguments.quick
    plan = Plan(
        events=arguments.events or (QUICK_EVENTS if quick else EVENTS_DEFAULT),
        repeat=arguments.repeat or (QUICK_REPEAT if quick else REPEAT_DEFAULT),
        partitions=arguments.partitions,
        list_sizes=tuple(arguments.list_size or LIST_SIZES),
        topic_config={} if arguments.plain_topics else dict(EVENT_TOPIC_CONFIG),
    )
    if plan.events < max(plan.list_sizes):
        raise SystemExit(f"--events {plan.events:,} is less than a list of the largest size")
    scratch = Path(tempfile.mkdtemp(prefix="bench-producer-", dir=arguments.data_dir))
    results: dict[str, Any] = {"plan": asdict(plan), "machine": describe_machine(scratch)}
    broker = BrokerProcess(scratch / "log").start()
    try:
        samples: list[Sample] = []
        for list_size in plan.list_sizes:
            progress(f"lists of {list_size:,}: {plan.events:,} events, {plan.repeat} repetitions")
            samples += measure(broker.bootstrap, list_size, plan)
    finally:
        broker.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    results["samples"] = [asdict(sample) for sample in samples]
    results["producer_settings"] = {
        key: value for key, value in raw_settings("").items() if key != "bootstrap.servers"
    }
    results["command"] = invocation(__file__, argv)
    print(f"command: {results['command']}\n")
    print(report(samples, plan.list_sizes))
    print(f"\nTopic configs: {topic_configs(plan.topic_config)}.")
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
