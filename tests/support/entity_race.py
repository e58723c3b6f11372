"""The entity race: many processes send bank commands to a few accounts at once, through
the repository, while (on a cluster) the leader of the accounts' partitions is killed
and restarted; then the log is checked.

Each worker process runs its own :class:`~eventplatform.events.EntityStore` and
:class:`~eventplatform.events.Repository` and sends ``commands`` commands (open, deposit,
withdraw; a withdrawal more than the balance is rejected) to random accounts. It writes
what it learned to ``worker-<n>.json``: the ids of the events the log acknowledged, the
ids of those whose fate it could not learn (the log did not answer in time), and how
many conflicts, rejections and give-ups it met.

:func:`check_race` reads the whole topic with an independent consumer and checks:

- every record of an account carries ``eventplatform.expected.version`` equal to the
  number of the account's records before it: versions run 1..n, no gap, no repeat;
- no account's balance is negative after any prefix of its history;
- every acknowledged event is in the log exactly once, and no event id appears twice;
- every event in the log is one a worker sent (acknowledged or of unknown fate);
- conflicts happened, and were decided again.

:func:`assert_tables_equal_the_log` then folds the bank's projection into a fresh SQLite
database and compares its ``bank_balances`` with the balances the check computed.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from bank.events import TOPIC, Deposited, Opened, Withdrawn
from bank.model import BANK, Account, Deposit, Open, Withdraw, account_of
from confluent_kafka import Consumer, TopicPartition

from eventplatform.events import (
    CommandRejectedError,
    ConcurrencyError,
    EntityStore,
    EventError,
    Repository,
)
from eventplatform.events.topics import create_event_topics
from eventplatform.log.extensions import EXPECTED_VERSION_HEADER

CATALOG = [Opened, Deposited, Withdrawn]
ATTEMPTS = 200
"""Decisions a worker makes on one command before it gives up on a busy account."""
REQUEST_TIMEOUT_S = 5.0
WORKER_TIMEOUT_S = 900.0
READ_TIMEOUT_S = 60.0


def worker(bootstrap: str, number: int, commands: int, accounts: int, seed: int, out: str) -> None:
    """One racing process (see the module docstring)."""
    rng = random.Random(seed * 1_000 + number)
    acked: list[str] = []
    unknown: list[str] = []
    counts: Counter[str] = Counter()
    with EntityStore(bootstrap, CATALOG, request_timeout_s=REQUEST_TIMEOUT_S) as store:
        bank = Repository(store, TOPIC, BANK, account_of, attempts=ATTEMPTS)
        for _ in range(commands):
            account = f"account-{rng.randrange(accounts)}"
            roll = rng.random()
            command: Open | Deposit | Withdraw
            if roll < 0.05:
                command = Open(account)
            elif roll < 0.5:
                command = Deposit(account, rng.randint(1, 100))
            else:
                command = Withdraw(account, rng.randint(1, 150))
            try:
                decision = bank.handle(command)
            except CommandRejectedError:
                counts["rejected"] += 1
                continue
            except ConcurrencyError:
                counts["gave up"] += 1
                continue
            except EventError as exc:  # no answer in time: the events may be in the log
                counts["unknown"] += 1
                unknown.append(str(command.command_id))
                counts[f"error {type(exc).__name__}: {str(exc)[:120]}"] += 1
                continue
            if decision.repeated:
                counts["repeated"] += 1
            counts["decided"] += 1
            acked.append(str(command.command_id))
        counts["conflicts"] = bank.conflicts
    Path(out).write_text(json.dumps({"acked": acked, "unknown": unknown, "counts": counts}))


@dataclass
class RaceResult:
    acked: set[str] = field(default_factory=set)
    """Command ids whose events the log acknowledged."""
    unknown: set[str] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)


def run_race(
    bootstrap: str,
    work_dir: Path,
    *,
    processes: int,
    commands: int,
    accounts: int,
    seed: int,
    nemesis: Callable[[threading.Event], None] | None = None,
) -> RaceResult:
    """Create the bank's event topic, as ``platform db upgrade --bootstrap`` would, then run
    the workers to the end (with ``nemesis`` in a thread meanwhile); their results.

    The topic exists before anything else asks for it: a client's metadata request may
    create a missing topic with the broker's defaults (auto.create.topics.enable), and
    the workers would then find an event topic without entity versions, which the entity
    store refuses."""
    create_event_topics({"bootstrap.servers": bootstrap}, [TOPIC], timeout_s=READ_TIMEOUT_S)
    context = multiprocessing.get_context("spawn")
    outputs = [work_dir / f"worker-{n}.json" for n in range(processes)]
    workers = [
        context.Process(
            target=worker, args=(bootstrap, n, commands, accounts, seed, str(outputs[n]))
        )
        for n in range(processes)
    ]
    stop = threading.Event()
    chaos = threading.Thread(target=nemesis, args=(stop,), daemon=True) if nemesis else None
    for process in workers:
        process.start()
    if chaos is not None:
        chaos.start()
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    try:
        for process in workers:
            process.join(max(0.0, deadline - time.monotonic()))
    finally:
        stop.set()
        if chaos is not None:
            chaos.join(timeout=120)
        for process in workers:
            if process.is_alive():
                process.kill()
    failed = [n for n, process in enumerate(workers) if process.exitcode != 0]
    if failed:
        raise AssertionError(
            f"workers {failed} failed (exit codes {[p.exitcode for p in workers]})"
        )
    result = RaceResult()
    for output in outputs:
        document = json.loads(output.read_text())
        result.acked.update(document["acked"])
        result.unknown.update(document["unknown"])
        result.counts.update(document["counts"])
    return result


@dataclass(frozen=True)
class Logged:
    """One record of the topic as the check reads it."""

    offset: int
    account: str
    expected: int | None
    event_id: str
    causation_id: str | None
    event_type: str
    amount: int


def read_topic(bootstrap: str) -> dict[int, list[Logged]]:
    """Every record of the bank topic, per partition, up to its high watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "entity-race-check",
            "enable.auto.commit": False,
        }
    )
    try:
        metadata = consumer.list_topics(TOPIC, timeout=READ_TIMEOUT_S).topics[TOPIC]
        found: dict[int, list[Logged]] = {}
        for partition in metadata.partitions:
            high = consumer.get_watermark_offsets(
                TopicPartition(TOPIC, partition), timeout=READ_TIMEOUT_S
            )[1]
            records: list[Logged] = []
            consumer.assign([TopicPartition(TOPIC, partition, 0)])
            deadline = time.monotonic() + READ_TIMEOUT_S
            while len(records) < high and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is None or message.error() is not None:
                    continue
                records.append(_logged(message.offset(), message.value(), message.headers()))
            assert len(records) == high, f"read {len(records)} of {high} records of {partition}"
            found[partition] = records
        return found
    finally:
        consumer.close()


def _logged(offset: int, value: bytes | None, headers: Sequence[Any] | None) -> Logged:
    document = orjson.loads(value or b"{}")
    expected = None
    for name, header in headers or ():
        if name == EXPECTED_VERSION_HEADER:
            expected = int(header)
    return Logged(
        offset,
        document["key"],
        expected,
        document["id"],
        document.get("causation_id"),
        document["type"],
        int(document["data"].get("amount", 0)),
    )


def check_race(
    bootstrap: str, result: RaceResult
) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """The checks of the module docstring; returns what was counted, and each account's
    balance and number of events as a fold of the log gives them."""
    by_account: dict[str, list[Logged]] = {}
    for records in read_topic(bootstrap).values():
        for record in records:
            by_account.setdefault(record.account, []).append(record)
    events = [record for records in by_account.values() for record in records]
    duplicates = [i for i, n in Counter(r.event_id for r in events).items() if n > 1]
    assert not duplicates, f"event ids in the log twice: {duplicates[:5]}"
    balances: dict[str, tuple[int, int]] = {}
    for account, records in by_account.items():
        state = Account()
        for version, record in enumerate(records):
            assert record.expected == version, (
                f"{account}: record at offset {record.offset} expected version "
                f"{record.expected}, but {version} records came before it"
            )
            state = BANK.evolve(state, _event(record))
            assert state.balance >= 0, f"{account} went to {state.balance} at {record.offset}"
        balances[account] = (state.balance, len(records))
    commands = {record.causation_id for record in events}
    lost = result.acked - commands
    assert not lost, f"acknowledged commands missing from the log: {sorted(lost)[:5]}"
    strangers = commands - result.acked - result.unknown
    assert not strangers, f"commands in the log that no worker sent: {sorted(strangers)[:5]}"
    assert result.counts["conflicts"] > 0, "the workers never raced"
    counted = {
        "accounts": len(by_account),
        "events": len(events),
        "acknowledged commands": len(result.acked),
        "unknown commands": len(result.unknown),
        "unknown in the log": len(result.unknown & commands),
        **result.counts,
    }
    return counted, balances


def _event(record: Logged) -> Opened | Deposited | Withdrawn:
    if record.event_type == Opened.event_type:
        return Opened(account_id=record.account)
    if record.event_type == Deposited.event_type:
        return Deposited(account_id=record.account, amount=record.amount)
    return Withdrawn(account_id=record.account, amount=record.amount)


def assert_tables_equal_the_log(
    bootstrap: str, directory: Path, balances: dict[str, tuple[int, int]]
) -> None:
    """The bank's projection, run to the end of the topic, holds what the log folds to."""
    from click.testing import CliRunner
    from sqlalchemy import create_engine, text

    from eventplatform.cli import main
    from eventplatform.projections.apps import load_app
    from eventplatform.runtime import running_projections, wait_caught_up

    url = f"sqlite:///{directory / 'bank.db'}"
    upgraded = CliRunner().invoke(main, ["db", "upgrade", "--database", url, "--app", "bank"])
    assert upgraded.exit_code == 0, upgraded.output
    app = load_app("bank")
    [projection] = app.projections
    with running_projections([projection.name], [app], url, bootstrap):
        wait_caught_up([projection.name], url, bootstrap, [TOPIC], READ_TIMEOUT_S)
    engine = create_engine(url)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT account_id, balance, events FROM bank_balances"))
        tables = {account: (balance, events) for account, balance, events in rows}
    engine.dispose()
    assert tables == balances
