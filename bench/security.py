"""TLS and SASL benchmark: produce and consume throughput on each listener of one broker.

One ``platform serve`` broker (a fresh data directory, deleted at the end) serves four
listeners at once: PLAINTEXT, SSL (a server certificate from a development CA; no
client certificates), SASL_PLAINTEXT and SASL_SSL (SCRAM-SHA-512, for a user created
through the PLAINTEXT listener). The listeners take turns in rounds, PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL and the reverse order the next round, so that noise on a
shared machine falls on all of them. In each turn the listener gets a one-partition
topic of its own and three steps, each with a confluent-kafka client of its own:

* **connect**: a new producer asks for metadata, ``--connects`` times. The time covers
  the TCP connection, the TLS handshake, ApiVersions, the SASL exchange and Metadata:
  what a listener costs a client once per connection.
* **produce**: a producer with the suite's throughput settings (linger.ms=5, batch.size
  of 1 MB, no compression) and acks=all (on one broker with RF=1 the same wait as
  acks=1) sends one warm-up record, so that it is connected and authenticated; then the
  clock covers ``produce`` of ``--records`` records of 1 KB values and the flush that
  waits for every acknowledgement.
* **consume**: a consumer with the suite's settings (fetches of up to 64 MB, no
  commits) first asks the topic's end offset, so that it is connected and authenticated
  to the broker; then the clock covers reading the listener's topic from offset 0 to its
  end (the warm-up record included).

Reported per listener and step: the median over rounds (min-max) of records/s and
MB/s (values only, 1 MB = 10^6 bytes), the ratio of the median to PLAINTEXT's in the
same run, the broker process's CPU (user + system from ``/proc``) and this process's
(librdkafka's threads, which do the client's TLS) in milliseconds per MB, and the
median connection time.

Run ``python -m bench.security --quick`` for a smoke run of a few seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from bench.harness import (
    MEGABYTE,
    BrokerProcess,
    Deadline,
    Spread,
    Stopwatch,
    check_free_space,
    describe_machine,
    format_spread,
    invocation,
    markdown_table,
    progress,
)
from bench.peers import KAFKA_FETCH_QUEUE_BACKOFF_MS, KAFKA_QUEUED_MESSAGES_MIN, cpu_seconds
from eventplatform.client_config import load_client_config
from eventplatform.dev_certificates import issue, make_authority
from eventplatform.events.log_connection import open_connection, round_trip
from eventplatform.log.protocol.apis import METADATA

LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
BASELINE = "PLAINTEXT"
MECHANISM = "SCRAM-SHA-512"
CLIENT_ID = "bench-security"
SCRAM_ITERATIONS = 4096
USER = "bench"
PASSWORD = "bench-security-password"
VALUE_BYTES = 1_000
RECORDS_DEFAULT = 200_000
ROUNDS_DEFAULT = 5
CONNECTS_DEFAULT = 50
QUICK_RECORDS = 5_000
QUICK_ROUNDS = 1
QUICK_CONNECTS = 2
ADMIN_TIMEOUT_S = 30.0
STEP_TIMEOUT_S = 300.0
CONSUME_BATCH_MAX = 10_000
CONSUME_POLL_S = 1.0
QUEUE_FULL_BACKOFF_S = 0.001
FREE_BYTES_MARGIN = 2
PRODUCER_SETTINGS: dict[str, Any] = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
}
CONSUMER_SETTINGS: dict[str, Any] = {
    "enable.auto.commit": False,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.max.messages.kbytes": 1024 * 1024,
    "queued.min.messages": KAFKA_QUEUED_MESSAGES_MIN,
    "fetch.queue.backoff.ms": KAFKA_FETCH_QUEUE_BACKOFF_MS,
}


class SecuredBroker:
    """The broker process and the client settings of each of its listeners."""

    def __init__(self, process: BrokerProcess, authority: Path) -> None:
        self.process = process
        self.authority = authority

    def security(self, listener: str) -> dict[str, str]:
        """The listener's security settings, without the brokers' addresses."""
        return {k: v for k, v in self.client(listener).items() if k != "bootstrap.servers"}

    def client(self, listener: str) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.process.bootstrap_of(listener),
            "security.protocol": listener,
        }
        if "SSL" in listener:
            config["ssl.ca.location"] = str(self.authority / "ca.pem")
        if listener.startswith("SASL"):
            config |= {"sasl.mechanism": MECHANISM, "sasl.username": USER}
            config["sasl.password"] = PASSWORD
        return config

    def cpu_seconds(self) -> float:
        assert self.process.process is not None
        return cpu_seconds([self.process.process.pid])


def start_broker(scratch: Path) -> SecuredBroker:
    """A broker with the four listeners and one SCRAM user (both SHA mechanisms)."""
    certificates = scratch / "certificates"
    make_authority(certificates)
    server = issue(certificates, "broker", hosts=("127.0.0.1", "localhost"))
    listeners = ",".join(f"{name}://127.0.0.1:0" for name in LISTENERS)
    process = BrokerProcess(
        scratch / "data",
        [
            f"listeners={listeners}",
            f"sasl.enabled.mechanisms={MECHANISM}",
            f"ssl.keystore.location={server.keystore}",
            f"ssl.truststore.location={certificates / 'ca.pem'}",
        ],
    ).start()
    broker = SecuredBroker(process, certificates)
    admin = AdminClient(broker.client(BASELINE))
    upsertion = UserScramCredentialUpsertion(
        USER,
        ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
        PASSWORD.encode(),
    )
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(ADMIN_TIMEOUT_S)
    return broker


def create_topics(broker: SecuredBroker, names: Sequence[str]) -> None:
    admin = AdminClient(broker.client(BASELINE))
    topics = [NewTopic(name, 1, 1) for name in names]
    for future in admin.create_topics(topics, operation_timeout=ADMIN_TIMEOUT_S).values():
        future.result(ADMIN_TIMEOUT_S)


def topic_name(listener: str, round_number: int) -> str:
    return f"security-{listener.lower().replace('_', '-')}-{round_number}"


# ---------------------------------------------------------------- steps


@dataclass(frozen=True)
class Sample:
    """One timed step on one listener: ``records`` of ``size_bytes`` in all in ``seconds``;
    the broker's and this process's CPU seconds over the same clock."""

    listener: str
    step: str
    round_number: int
    records: int
    size_bytes: int
    seconds: float
    broker_cpu_seconds: float
    client_cpu_seconds: float

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds

    @property
    def megabytes_per_second(self) -> float:
        return self.size_bytes / MEGABYTE / self.seconds

    @property
    def broker_cpu_ms_per_megabyte(self) -> float:
        return self.broker_cpu_seconds * 1000 / (self.size_bytes / MEGABYTE)

    @property
    def client_cpu_ms_per_megabyte(self) -> float:
        return self.client_cpu_seconds * 1000 / (self.size_bytes / MEGABYTE)


def timed(broker: SecuredBroker, work: Callable[[], int]) -> tuple[int, float, float, float]:
    """``work()`` (which returns a record count) on the clock: the count, the seconds, and
    the broker's and this process's CPU seconds."""
    broker_started = broker.cpu_seconds()
    clock = Stopwatch()
    records = work()
    seconds, client_cpu_seconds = clock.elapsed()
    return records, seconds, broker.cpu_seconds() - broker_started, client_cpu_seconds


# ---------------------------------------------------------------- connecting


def connect_once(broker: SecuredBroker, listener: str, topic: str) -> float:
    """Seconds from a TCP connect to the first Metadata answer: the TLS handshake and the
    SCRAM exchange as the listener asks, done by the platform's own connection code as
    any client must (a fresh TLS session, the salted password computed)."""
    started = time.perf_counter()
    client = load_client_config(
        bootstrap=broker.process.bootstrap_of(listener),
        settings=broker.security(listener),
        environ={},
    )
    address = ("127.0.0.1", broker.process.listener_ports[listener])
    with open_connection(address, client, timeout_s=ADMIN_TIMEOUT_S, client_id=CLIENT_ID) as sock:
        metadata = round_trip(
            sock, METADATA, 1, {"topics": [{"name": topic}]}, correlation_id=1, client_id=CLIENT_ID
        )
    if [entry["name"] for entry in metadata["topics"]] != [topic]:
        raise SystemExit(f"Metadata of {topic} through {listener}: {metadata}")
    return time.perf_counter() - started


def measure_connects(
    broker: SecuredBroker, listener: str, topic: str, connects: int
) -> tuple[list[float], float]:
    """``connects`` connections one after another: each one's seconds, and the broker's
    CPU seconds over all of them."""
    broker_started = broker.cpu_seconds()
    durations = [connect_once(broker, listener, topic) for _ in range(connects)]
    return durations, broker.cpu_seconds() - broker_started


# ---------------------------------------------------------------- produce and consume


def produce_all(producer: Producer, topic: str, count: int, deadline: Deadline) -> int:
    """Hand librdkafka ``count`` records, polling while its queue is full; flush; the count
    of records delivered."""
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            failures.append(error)

    value = b"x" * VALUE_BYTES
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                if deadline.passed():
                    raise SystemExit(f"{topic}: produce ran out of time") from None
                producer.poll(QUEUE_FULL_BACKOFF_S)
    if producer.flush(deadline.remaining()) != 0 or failures:
        raise SystemExit(f"{topic}: records not delivered: {failures[:3]}")
    return count


def measure_produce(broker: SecuredBroker, listener: str, topic: str, count: int) -> Sample:
    producer = Producer({**broker.client(listener), **PRODUCER_SETTINGS})
    deadline = Deadline(STEP_TIMEOUT_S)
    produce_all(producer, topic, 1, deadline)
    records, seconds, broker_cpu, client_cpu = timed(
        broker, lambda: produce_all(producer, topic, count, deadline)
    )
    return Sample(
        listener, "produce", 0, records, records * VALUE_BYTES, seconds, broker_cpu, client_cpu
    )


def read_until(consumer: Consumer, topic: str, end_offset: int, deadline: Deadline) -> int:
    """Read the assigned partition of ``topic`` until ``end_offset``; the records read."""
    received = 0
    while received < end_offset and not deadline.passed():
        batch = consumer.consume(min(CONSUME_BATCH_MAX, end_offset - received), CONSUME_POLL_S)
        errors = [message.error() for message in batch if message.error() is not None]
        if errors:
            raise SystemExit(f"{topic}: consume failed: {errors[:3]}")
        received += len(batch)
    position = consumer.position([TopicPartition(topic, 0)])[0].offset
    if received != end_offset or position != end_offset:
        raise SystemExit(f"{topic}: read {received} of {end_offset} records, at {position}")
    return received


def measure_consume(broker: SecuredBroker, listener: str, topic: str, count: int) -> Sample:
    """``count`` records and the producer's warm-up record, from offset 0."""
    settings = {**broker.client(listener), **CONSUMER_SETTINGS, "group.id": f"bench-{topic}"}
    consumer = Consumer(settings)
    deadline = Deadline(STEP_TIMEOUT_S)
    try:
        # Asking the leader for the end offset connects (and authenticates) to it, and
        # leaves no fetch in flight that the clocked one would queue behind.
        partition = TopicPartition(topic, 0)
        _low, end_offset = consumer.get_watermark_offsets(partition, timeout=ADMIN_TIMEOUT_S)
        if end_offset != count + 1:
            raise SystemExit(f"{topic} ends at {end_offset}, not {count + 1}")

        def read_topic() -> int:
            consumer.assign([TopicPartition(topic, 0, 0)])
            return read_until(consumer, topic, end_offset, deadline)

        records, seconds, broker_cpu, client_cpu = timed(broker, read_topic)
    finally:
        consumer.close()
    return Sample(
        listener, "consume", 0, records, records * VALUE_BYTES, seconds, broker_cpu, client_cpu
    )


@dataclass(frozen=True)
class Plan:
    records: int
    rounds: int
    connects: int


@dataclass(frozen=True)
class Turn:
    """One listener's steps in one round."""

    listener: str
    round_number: int
    connect_seconds: list[float]
    connect_broker_cpu_seconds: float
    samples: list[Sample]


def run_turn(broker: SecuredBroker, listener: str, round_number: int, plan: Plan) -> Turn:
    topic = topic_name(listener, round_number)
    connects, connect_broker_cpu = measure_connects(broker, listener, topic, plan.connects)
    samples = [
        measure_produce(broker, listener, topic, plan.records),
        measure_consume(broker, listener, topic, plan.records),
    ]
    samples = [Sample(**{**asdict(sample), "round_number": round_number}) for sample in samples]
    for sample in samples:
        progress(
            f"round {round_number}, {listener}, {sample.step}: "
            f"{sample.records_per_second:,.0f} records/s, {sample.megabytes_per_second:.1f} MB/s, "
            f"broker {sample.broker_cpu_ms_per_megabyte:.2f} CPU ms/MB"
        )
    return Turn(listener, round_number, connects, connect_broker_cpu, samples)


def round_order(round_number: int) -> tuple[str, ...]:
    """The listeners in order in even rounds and in reverse in odd ones."""
    return LISTENERS if round_number % 2 == 0 else LISTENERS[::-1]


def run_rounds(broker: SecuredBroker, plan: Plan) -> list[Turn]:
    create_topics(
        broker,
        [topic_name(name, number) for number in range(plan.rounds) for name in LISTENERS],
    )
    deadline = Deadline(STEP_TIMEOUT_S * 2 * len(LISTENERS) * plan.rounds)
    turns = []
    for round_number in range(plan.rounds):
        for listener in round_order(round_number):
            if deadline.passed():
                raise SystemExit(f"ran out of time in round {round_number} at {listener}")
            turns.append(run_turn(broker, listener, round_number, plan))
    return turns


# ---------------------------------------------------------------- report


@dataclass(frozen=True)
class Summary:
    """One listener's step over all rounds: medians (min-max), and the ratio of its
    records/s median to the baseline listener's."""

    listener: str
    step: str
    records_per_second: Spread
    megabytes_per_second: Spread
    ratio_to_baseline: float
    broker_cpu_ms_per_megabyte: float
    client_cpu_ms_per_megabyte: float


def summarize(samples: Sequence[Sample], step: str) -> list[Summary]:
    chosen = [sample for sample in samples if sample.step == step]
    baseline = statistics.median(
        sample.records_per_second for sample in chosen if sample.listener == BASELINE
    )
    summaries = []
    for listener in LISTENERS:
        mine = [sample for sample in chosen if sample.listener == listener]
        if not mine:
            continue
        rate = Spread.of([sample.records_per_second for sample in mine])
        summaries.append(
            Summary(
                listener=listener,
                step=step,
                records_per_second=rate,
                megabytes_per_second=Spread.of([sample.megabytes_per_second for sample in mine]),
                ratio_to_baseline=rate.median / baseline,
                broker_cpu_ms_per_megabyte=statistics.median(
                    sample.broker_cpu_ms_per_megabyte for sample in mine
                ),
                client_cpu_ms_per_megabyte=statistics.median(
                    sample.client_cpu_ms_per_megabyte for sample in mine
                ),
            )
        )
    return summaries


def step_table(summaries: Sequence[Summary]) -> str:
    rows = [
        [
            "listener",
            "records/s",
            "MB/s",
            f"x {BASELINE}",
            "broker CPU ms/MB",
            "client CPU ms/MB",
        ]
    ]
    for summary in summaries:
        rows.append(
            [
                summary.listener,
                format_spread(summary.records_per_second),
                format_spread(summary.megabytes_per_second, 1),
                f"{summary.ratio_to_baseline:.2f}",
                f"{summary.broker_cpu_ms_per_megabyte:.2f}",
                f"{summary.client_cpu_ms_per_megabyte:.2f}",
            ]
        )
    return markdown_table(rows)


def connect_table(turns: Sequence[Turn]) -> str:
    rows = [["listener", "connect to Metadata, ms", f"x {BASELINE}", "broker CPU ms/connection"]]
    baseline = statistics.median(
        seconds for turn in turns if turn.listener == BASELINE for seconds in turn.connect_seconds
    )
    for listener in LISTENERS:
        mine = [turn for turn in turns if turn.listener == listener]
        durations = [seconds for turn in mine for seconds in turn.connect_seconds]
        if not durations:
            continue
        broker_cpu = sum(turn.connect_broker_cpu_seconds for turn in mine) / len(durations)
        rows.append(
            [
                listener,
                format_spread(Spread.of([1000 * seconds for seconds in durations]), 2),
                f"{statistics.median(durations) / baseline:.2f}",
                f"{1000 * broker_cpu:.2f}",
            ]
        )
    return markdown_table(rows)


def report(turns: Sequence[Turn], plan: Plan) -> str:
    samples = [sample for turn in turns for sample in turn.samples]
    return "\n\n".join(
        [
            f"{plan.records:,} records of {VALUE_BYTES:,} B per step, {plan.rounds} rounds; "
            "medians (min-max) over rounds.",
            "Produce:\n\n" + step_table(summarize(samples, "produce")),
            "Consume:\n\n" + step_table(summarize(samples, "consume")),
            "Connect:\n\n" + connect_table(turns),
        ]
    )


# ---------------------------------------------------------------- main


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=None, help="records per step")
    parser.add_argument("--rounds", type=int, default=None, help="turns of every listener")
    parser.add_argument("--connects", type=int, default=None, help="connections per turn")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run: {QUICK_RECORDS:,} records per step, {QUICK_ROUNDS} round",
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="parent of the scratch dir")
    parser.add_argument("--json", type=Path, default=None, help="write raw results here")
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> None:
    arguments = parse_arguments(argv)
    quick = arguments.quick
    plan = Plan(
        records=arguments.records or (QUICK_RECORDS if quick else RECORDS_DEFAULT),
        rounds=arguments.rounds or (QUICK_ROUNDS if quick else ROUNDS_DEFAULT),
        connects=arguments.connects or (QUICK_CONNECTS if quick else CONNECTS_DEFAULT),
    )
    scratch = Path(tempfile.mkdtemp(prefix="bench-security-", dir=arguments.data_dir))
    results: dict[str, Any] = {"plan": asdict(plan), "machine": describe_machine(scratch)}
    try:
        check_free_space(
            scratch, FREE_BYTES_MARGIN * plan.records * VALUE_BYTES * plan.rounds * len(LISTENERS)
        )
        broker = start_broker(scratch)
        try:
            turns = run_rounds(broker, plan)
        finally:
            broker.process.kill()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["command"] = invocation(__file__, argv)
    results["producer_settings"] = PRODUCER_SETTINGS
    results["consumer_settings"] = CONSUMER_SETTINGS
    results["turns"] = [asdict(turn) for turn in turns]
    results["summaries"] = [
        asdict(summary)
        for step in ("produce", "consume")
        for summary in summarize([s for turn in turns for s in turn.samples], step)
    ]
    print(f"command: {results['command']}\n")
    print(report(turns, plan))
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
