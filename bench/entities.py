"""Entity benchmark: conditional appends, entity loads, version memory, and commands
beside the ``eventsourcing`` library, in one run against one ``platform serve`` process.

1. **Conditional against plain appends.** ``--writers`` threads (1, then 64), each with
   its own connection, append single-event batches to entities of its own among
   ``--entities`` (10,000), to a one-partition topic: plain appends to a topic without
   entity versions, then the same events as conditional appends (each expecting its
   entity's version) to one with them, alternating, ``--repetitions`` times. The ratio
   of the medians is what the check costs (goal: at least 0.8).
2. **Entity loads.** A one-partition versioned topic gets ``--total-events`` events (10
   million): filler batches of 100 events of 100 entities each, with the events of three
   target entities (10, 1,000 and 10,000 events) spread evenly among them, one event per
   batch as the entity store appends decisions. Then ``EntityStore.load`` reads each
   target whole ``--loads`` times; p50 and p99 of the wall time (goal: p99 under 20 ms
   at 1,000 events). Then a repository with snapshots every 100 events, kept in
   PostgreSQL (``SqlSnapshots``), loads it with 50 events after its last snapshot, as a
   command's load does.
3. **Memory per million entities.** A fresh process appends a million distinct 36-byte
   keys, in batches of 100, to a partition of a versioned topic; the growth of its
   resident set (goal: under 100 MB), the part of it that is not file pages, and what
   the versions and the entity index take on disk.
4. **Commands beside the eventsourcing library.** ``--commands`` deposits to 1,000
   accounts, decided one after another: through this SDK's ``Repository`` over the log,
   and through the ``eventsourcing`` library's ``Application`` and repository on
   PostgreSQL (``--postgres``), alternating; commands per second and their ratio.

Results print as a table and go to ``--json``; ``docs/benchmarks.md`` records them.
Run with ``--quick`` for a smoke run.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import (
    Deadline,
    Spread,
    describe_machine,
    format_spread,
    invocation,
    markdown_table,
    progress,
)
from eventplatform.events import (
    Command,
    CommandRejectedError,
    Decider,
    EntityStore,
    Envelope,
    Event,
    Repository,
    SqlSnapshots,
    encode,
)
from eventplatform.events.log_client import LogClient
from eventplatform.log.extensions import ENTITY_VERSIONS_CONFIG, EXPECTED_VERSION_HEADER
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.storage.record_batch import Record, encode_batch
from eventplatform.testing import BrokerProcess

TOPIC_TIMEOUT_S = 30.0
STEP_TIMEOUT_S = 1_800.0
FILLER_BATCH = 100
FILLER_ENTITIES = 1_000_000
TARGET_SIZES = (10, 1_000, 10_000)
VALUE = b'{"amount": 1, "note": "' + b"x" * 150 + b'"}'
ACCOUNTS = 1_000
SNAPSHOT_EVERY = 100
SNAPSHOT_TAIL = 50
"""Events after the last snapshot when a repository's load is timed (half the interval)."""
POSTGRES_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


class Deposited(Event, type="benchbank.deposited", version=1, key="account_id", topic="benchbank"):
    account_id: str
    amount: int


@dataclass(frozen=True)
class Deposit(Command):
    account_id: str
    amount: int


def _decide(command: Deposit, balance: int) -> list[Event]:
    if command.amount <= 0:
        raise CommandRejectedError("a deposit is positive")
    return [Deposited(account_id=command.account_id, amount=command.amount)]


def _evolve(balance: int, event: Event) -> int:
    return balance + event.amount if isinstance(event, Deposited) else balance


BANK: Decider[Deposit, int] = Decider(initial=0, decide=_decide, evolve=_evolve)


# ---------------------------------------------------------------- 1. appends


def create_topic(bootstrap: str, name: str, versioned: bool) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {ENTITY_VERSIONS_CONFIG: "true"} if versioned else {}
    futures = admin.create_topics([NewTopic(name, 1, 1, config=configs)])
    futures[name].result(timeout=TOPIC_TIMEOUT_S)


def append_rate(
    bootstrap: str, topic: str, *, writers: int, entities: int, events: int, conditional: bool
) -> float:
    """Events per second that ``writers`` threads append, one event per batch."""
    per_writer = events // writers
    errors: list[str] = []
    barrier = threading.Barrier(writers + 1)

    def write(number: int) -> None:
        owned = [f"entity-{n}" for n in range(number, entities, writers)]
        versions = dict.fromkeys(owned, 0)
        with LogClient(bootstrap) as client:
            client.partition_count(topic)
            barrier.wait()
            for sent in range(per_writer):
                key = owned[sent % len(owned)]
                headers: tuple[tuple[str, bytes], ...] = ()
                if conditional:
                    headers = ((EXPECTED_VERSION_HEADER, str(versions[key]).encode()),)
                batch = encode_batch([Record(0, 1_000, key.encode(), VALUE, headers)])
                answer = client.produce(topic, 0, batch, timeout_ms=30_000)
                if answer.error is not ErrorCode.NONE:
                    errors.append(f"{answer.error.name}: {answer.message}")
                    return
                versions[key] += 1

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join(STEP_TIMEOUT_S)
    elapsed = time.perf_counter() - started
    if errors:
        raise SystemExit(f"an append failed: {errors[0]}")
    return per_writer * writers / elapsed


@dataclass
class AppendResult:
    writers: int
    plain: list[float] = field(default_factory=list)
    conditional: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return statistics.median(self.conditional) / statistics.median(self.plain)


def measure_appends(bootstrap: str, arguments: argparse.Namespace) -> list[AppendResult]:
    results = []
    for writers in arguments.writers:
        result = AppendResult(writers)
        for repetition in range(arguments.repetitions):
            for conditional in (False, True) if repetition % 2 == 0 else (True, False):
                topic = f"appends-{writers}-{repetition}-{'c' if conditional else 'p'}"
                create_topic(bootstrap, topic, versioned=conditional)
                rate = append_rate(
                    bootstrap,
                    topic,
                    writers=writers,
                    entities=arguments.entities,
                    events=arguments.append_events,
                    conditional=conditional,
                )
                (result.conditional if conditional else result.plain).append(rate)
                progress(
                    f"{writers} writers, {'conditional' if conditional else 'plain'}: "
                    f"{rate:,.0f} events/s"
                )
        results.append(result)
    return results


# ---------------------------------------------------------------- 2. loads


def target_key(size: int) -> str:
    return f"target-{size}"


def build_partition(bootstrap: str, topic: str, total: int, sizes: Sequence[int]) -> None:
    """``total`` events: filler batches with the targets' events spread among them."""
    create_topic(bootstrap, topic, versioned=True)
    targets = sum(sizes)
    filler_batches = max(1, (total - targets) // FILLER_BATCH)
    # each target event goes after filler batch number (its rank * filler_batches / count)
    schedule: dict[int, list[str]] = {}
    for size in sizes:
        for rank in range(size):
            schedule.setdefault(rank * filler_batches // size, []).append(target_key(size))
    versions: dict[str, int] = {}
    filler_value = b"f" * 100
    deadline = Deadline(STEP_TIMEOUT_S)
    with LogClient(bootstrap) as client:
        for number in range(filler_batches):
            if deadline.passed():
                raise SystemExit("building the partition took too long")
            first = number * FILLER_BATCH % FILLER_ENTITIES
            filler = [
                Record(i, 1_000, b"filler-%d" % (first + i), filler_value)
                for i in range(FILLER_BATCH)
            ]
            _produce(client, topic, encode_batch(filler))
            for key in schedule.get(number, ()):
                version = versions.get(key, 0)
                encoded = encode(Envelope(Deposited(account_id=key, amount=1)))
                headers = (*encoded.headers, (EXPECTED_VERSION_HEADER, str(version).encode()))
                record = Record(0, encoded.timestamp_ms, encoded.key, encoded.value, headers)
                _produce(client, topic, encode_batch([record]))
                versions[key] = version + 1
            if number % 10_000 == 0:
                progress(f"built {number * FILLER_BATCH:,} filler events of {total:,}")


def _produce(client: LogClient, topic: str, batch: bytes) -> None:
    answer = client.produce(topic, 0, batch, timeout_ms=30_000)
    if answer.error is not ErrorCode.NONE:
        raise SystemExit(f"building the partition: {answer.error.name}: {answer.message}")


@dataclass
class LoadResult:
    events: int
    p50_ms: float
    p99_ms: float
    loads: int
    snapshot_p50_ms: float
    snapshot_p99_ms: float


def percentiles(timings: list[float]) -> tuple[float, float]:
    ordered = sorted(timings)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def measure_loads(bootstrap: str, arguments: argparse.Namespace) -> list[LoadResult]:
    """Each target read whole (``EntityStore.load``), then loaded by a repository with
    snapshots every 100 events, ``SNAPSHOT_TAIL`` events after its last snapshot."""
    topic = Deposited.event_topic
    sizes = [size for size in TARGET_SIZES if size * 2 <= arguments.total_events]
    started = time.perf_counter()
    build_partition(bootstrap, topic, arguments.total_events, sizes)
    progress(f"built {arguments.total_events:,} events in {time.perf_counter() - started:.0f} s")
    results = []
    snapshots = SqlSnapshots(arguments.postgres, int)  # as several processes would share
    snapshots.clear(topic)
    with EntityStore(bootstrap, [Deposited]) as store:
        for size in sizes:
            key = target_key(size)
            assert store.load(topic, key).version == size
            whole = []
            for _ in range(arguments.loads):
                began = time.perf_counter()
                history = store.load(topic, key)
                whole.append((time.perf_counter() - began) * 1000)
                assert history.version == size
            bank = Repository(
                store,
                topic,
                BANK,
                lambda command: command.account_id,
                snapshots=snapshots,
                snapshot_every=SNAPSHOT_EVERY,
            )
            for _ in range(SNAPSHOT_EVERY + SNAPSHOT_TAIL):  # a snapshot, then a tail
                bank.handle(Deposit(key, 1))
            snapshotted = []
            for _ in range(arguments.loads):
                began = time.perf_counter()
                balance, tail = bank.load(key)
                snapshotted.append((time.perf_counter() - began) * 1000)
                assert balance == size + SNAPSHOT_EVERY + SNAPSHOT_TAIL
                assert len(tail.envelopes) <= SNAPSHOT_EVERY
            p50, p99 = percentiles(whole)
            near_p50, near_p99 = percentiles(snapshotted)
            results.append(LoadResult(size, p50, p99, len(whole), near_p50, near_p99))
            progress(
                f"load of {size} events: p50 {p50:.1f} ms, p99 {p99:.1f} ms; with snapshots "
                f"p50 {near_p50:.1f} ms, p99 {near_p99:.1f} ms"
            )
    snapshots.clear(topic)
    snapshots.close()
    return results


# ---------------------------------------------------------------- 3. memory


MEMORY_PROBE = """
import sys, tempfile, uuid
from pathlib import Path
from eventplatform.log.replica.partition import Partition
from eventplatform.log.storage import LogConfig
from eventplatform.log.storage.record_batch import Record, encode_batch

def resident():
    with open("/proc/self/statm") as f:
        fields = f.read().split()
    return int(fields[1]) * 4096, int(fields[2]) * 4096  # all, and the file-backed part

count = int(sys.argv[1])
with tempfile.TemporaryDirectory() as directory:
    config = LogConfig(eventplatform_entity_versions_enable=True)
    partition = Partition.open("entities", 0, Path(directory), config)
    partition.append(encode_batch([Record(0, 0, b"first", b"v")]))
    before, before_files = resident()
    for start in range(0, count, 100):
        keys = [str(uuid.UUID(int=start + n)).encode() for n in range(100)]
        records = [Record(n, 0, key, b"v") for n, key in enumerate(keys)]
        assert partition.append(encode_batch(records)).error == 0
    after, after_files = resident()
    on_disk = sum(f.stat().st_size for f in Path(directory).rglob("*") if "entity" in str(f))
    partition.close()
print(after - before, (after - after_files) - (before - before_files), on_disk)
"""


@dataclass(frozen=True)
class Memory:
    resident_mb: float
    anonymous_mb: float
    disk_mb: float


def measure_memory(entities: int) -> Memory:
    """Per million entities: how much a partition of a versioned topic grows resident, and
    how much of it is not file pages, counting ``entities`` distinct 36-byte keys appended
    in batches of 100; and the bytes its versions and index take on disk."""
    completed = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(entities)],
        capture_output=True,
        text=True,
        check=True,
        timeout=STEP_TIMEOUT_S,
    )
    resident, anonymous, disk = (int(field) for field in completed.stdout.split())
    millions = entities / 1_000_000
    return Memory(resident / 1e6 / millions, anonymous / 1e6 / millions, disk / 1e6 / millions)


# ---------------------------------------------------------------- 4. commands


def ours(bootstrap: str, commands: int) -> float:
    with EntityStore(bootstrap, [Deposited]) as store:
        bank = Repository(store, "benchbank", BANK, lambda command: command.account_id)
        bank.handle(Deposit("account-warmup", 1))
        started = time.perf_counter()
        for number in range(commands):
            bank.handle(Deposit(f"account-{number % ACCOUNTS}", 1))
        return commands / (time.perf_counter() - started)


@functools.cache
def peer_classes() -> tuple[Any, Any]:
    """The peer's aggregate and application, declared once: the library registers each
    class under its name, and refuses a second class of the same name."""
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class Account(Aggregate):
        def __init__(self, name: str) -> None:
            self.name = name
            self.balance = 0

        @event("Deposited")
        def deposit(self, amount: int) -> None:
            self.balance += amount

    class Bank(Application[uuid.UUID]):
        pass

    return Account, Bank


def theirs(postgres: str, commands: int) -> float:
    from sqlalchemy.engine import make_url

    Account, Bank = peer_classes()  # noqa: N806 - classes
    url = make_url(postgres)
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": url.database or "test",
        "POSTGRES_HOST": url.host or "127.0.0.1",
        "POSTGRES_PORT": str(url.port or 5432),
        "POSTGRES_USER": url.username or "postgres",
        "POSTGRES_PASSWORD": url.password or "",
        "POSTGRES_SCHEMA": "public",
        "CREATE_TABLE": "y",
    }
    bank = Bank(env=env)
    ids = []
    for number in range(ACCOUNTS):
        account = Account(f"account-{number}")
        bank.save(account)
        ids.append(account.id)
    started = time.perf_counter()
    for number in range(commands):
        account = bank.repository.get(ids[number % ACCOUNTS])
        account.deposit(1)
        bank.save(account)
    rate = commands / (time.perf_counter() - started)
    bank.close()
    return rate


@dataclass
class CommandResult:
    ours: list[float] = field(default_factory=list)
    theirs: list[float] = field(default_factory=list)
    peer: str = ""

    @property
    def ratio(self) -> float:
        return statistics.median(self.ours) / statistics.median(self.theirs)


def measure_commands(bootstrap: str, arguments: argparse.Namespace) -> CommandResult:
    result = CommandResult(peer=f"eventsourcing {importlib.metadata.version('eventsourcing')}")
    for repetition in range(arguments.repetitions):
        order = ("ours", "theirs") if repetition % 2 == 0 else ("theirs", "ours")
        for side in order:
            if side == "ours":
                result.ours.append(ours(bootstrap, arguments.commands))
            else:
                result.theirs.append(theirs(arguments.postgres, arguments.commands))
            progress(f"commands, {side}: {getattr(result, side)[-1]:,.0f}/s")
    return result


# ---------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--append-events", type=int, default=50_000)
    parser.add_argument("--total-events", type=int, default=10_000_000)
    parser.add_argument("--loads", type=int, default=200)
    parser.add_argument("--memory-entities", type=int, default=1_000_000)
    parser.add_argument("--commands", type=int, default=3_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--postgres", default=POSTGRES_DEFAULT)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true", help="a smoke run, minutes not hours")
    arguments = parser.parse_args(argv)
    if arguments.quick:
        arguments = replace_namespace(
            arguments,
            append_events=3_000,
            total_events=200_000,
            loads=30,
            memory_entities=200_000,
            commands=300,
            repetitions=1,
        )
    command = invocation(__file__, sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="bench-entities-") as scratch:
        broker = BrokerProcess(Path(scratch) / "data").start()
        try:
            appends = measure_appends(broker.bootstrap, arguments)
            loads = measure_loads(broker.bootstrap, arguments)
            memory = measure_memory(arguments.memory_entities)
            commands = measure_commands(broker.bootstrap, arguments)
        finally:
            broker.stop()
    rows = [["measure", "result", "goal"]]
    for result in appends:
        rows.append(
            [
                f"conditional / plain appends, {result.writers} writers (events/s)",
                f"{result.ratio:.2f} ({format_spread(Spread.of(result.conditional))} / "
                f"{format_spread(Spread.of(result.plain))})",
                ">= 0.8",
            ]
        )
    for load in loads:
        rows.append(
            [
                f"read of an entity of {load.events:,} events in {arguments.total_events:,}",
                f"p50 {load.p50_ms:.1f} ms, p99 {load.p99_ms:.1f} ms",
                "p99 < 20 ms" if load.events == 1_000 else "",
            ]
        )
        rows.append(
            [
                f"repository load of it, snapshots every {SNAPSHOT_EVERY} in PostgreSQL, "
                f"{SNAPSHOT_TAIL} events after the last",
                f"p50 {load.snapshot_p50_ms:.1f} ms, p99 {load.snapshot_p99_ms:.1f} ms",
                "",
            ]
        )
    rows.append(
        [
            "resident memory per million entities (of it not file pages; on disk)",
            f"{memory.resident_mb:.0f} MB ({memory.anonymous_mb:.0f} MB; {memory.disk_mb:.0f} MB)",
            "< 100 MB",
        ]
    )
    rows.append(
        [
            f"commands/s, Repository over the log / {commands.peer} on PostgreSQL",
            f"{commands.ratio:.2f} ({format_spread(Spread.of(commands.ours))} / "
            f"{format_spread(Spread.of(commands.theirs))})",
            "",
        ]
    )
    print(command)
    print(markdown_table(rows))
    if arguments.json is not None:
        arguments.json.write_text(
            json.dumps(
                {
                    "command": command,
                    "machine": describe_machine(Path(tempfile.gettempdir())),
                    "appends": [
                        {"writers": r.writers, "plain": r.plain, "conditional": r.conditional}
                        for r in appends
                    ],
                    "loads": [vars(load) for load in loads],
                    "memory_mb_per_million": vars(memory),
                    "commands": {"ours": commands.ours, "theirs": commands.theirs},
                },
                indent=2,
            )
        )


def replace_namespace(namespace: argparse.Namespace, **changes: Any) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(namespace), **changes})


if __name__ == "__main__":
    main()
