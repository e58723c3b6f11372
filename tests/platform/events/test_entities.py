"""The entity store and the repository against the shared broker: a bank account read,
decided and appended at its version, by one teller and by several at once."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from bank.events import TOPIC, Deposited, Opened, Withdrawn
from bank.model import BANK, Account, Deposit, Open, Withdraw, account_of
from confluent_kafka import Producer

from eventplatform.events import (
    ERASED_HEADER,
    CommandRejectedError,
    ConcurrencyError,
    Correction,
    EntityStore,
    EntityStoreError,
    EventProducer,
    EventRef,
    MemorySnapshots,
    Position,
    Repository,
    VersionConflictError,
)
from eventplatform.testing import BrokerProcess

if TYPE_CHECKING:
    from conftest import Log

CATALOG = [Opened, Deposited, Withdrawn]
TELLERS = 6
WITHDRAWALS_EACH = 8


@pytest.fixture
def store(broker: BrokerProcess) -> Iterator[EntityStore]:
    with EntityStore(broker.bootstrap, CATALOG) as opened:
        yield opened


@pytest.fixture
def account() -> str:
    return f"acct-{uuid.uuid4()}"


def repository(
    store: EntityStore, attempts: int = 5
) -> Repository[Open | Deposit | Withdraw, Account]:
    return Repository(store, TOPIC, BANK, account_of, attempts=attempts)


def test_an_account_is_opened_deposited_to_and_never_overdrawn(
    store: EntityStore, account: str
) -> None:
    bank = repository(store)
    for command in (Open(account), Deposit(account, 30), Withdraw(account, 20)):
        bank.handle(command)
    with pytest.raises(CommandRejectedError, match="holds 10, not 11"):
        bank.handle(Withdraw(account, 11))
    with pytest.raises(CommandRejectedError, match="open already"):
        bank.handle(Open(account))
    state, history = bank.load(account)
    assert state == Account(opened=True, balance=10)
    assert history.version == 3
    assert [type(e.event) for e in history.envelopes] == [Opened, Deposited, Withdrawn]
    offsets = [e.position.offset for e in history.envelopes if e.position is not None]
    assert offsets == sorted(offsets) and len(set(offsets)) == 3


def test_a_second_opening_decided_on_the_same_version_is_refused_by_the_log(
    store: EntityStore, account: str
) -> None:
    first = store.append(TOPIC, account, [Opened(account_id=account)], expected_version=0)
    assert len(first) == 1
    with pytest.raises(VersionConflictError, match="version 1, not the expected 0") as caught:
        store.append(TOPIC, account, [Opened(account_id=account)], expected_version=0)
    assert caught.value.expected == 0
    assert store.load(TOPIC, account).version == 1


def test_a_decision_of_several_events_is_appended_whole_or_not_at_all(
    store: EntityStore, account: str
) -> None:
    events = [Opened(account_id=account), Deposited(account_id=account, amount=5)]
    refs = store.append(TOPIC, account, events, expected_version=0)
    assert [r.position.offset for r in refs] == [refs[0].position.offset + i for i in range(2)]
    more = [Deposited(account_id=account, amount=n) for n in range(1, 4)]
    with pytest.raises(VersionConflictError):
        store.append(TOPIC, account, more, expected_version=1)
    assert store.load(TOPIC, account).version == 2, "nothing of the refused decision"
    store.append(TOPIC, account, more, expected_version=2)
    assert store.load(TOPIC, account).version == 5


def test_a_command_sent_again_returns_its_first_events(store: EntityStore, account: str) -> None:
    bank = repository(store)
    bank.handle(Open(account))
    deposit = Deposit(account, 12)
    first = bank.handle(deposit)
    again = bank.handle(deposit)
    assert again.repeated and list(again.events) == list(first.events)
    assert again.expected_version == first.expected_version == 1
    state, history = bank.load(account)
    assert state.balance == 12 and history.version == 2


def test_a_correction_is_honoured_and_counted(
    store: EntityStore, account: str, broker: BrokerProcess
) -> None:
    bank = repository(store)
    bank.handle(Open(account))
    bank.handle(Deposit(account, 300))
    _, history = bank.load(account)
    mistaken = history.envelopes[-1]
    with EventProducer(broker.bootstrap) as producer:
        producer.append(
            [
                Correction(
                    of=mistaken,
                    replacement=Deposited(account_id=account, amount=30),
                    reason="typo",
                )
            ]
        )
    state, history = bank.load(account)
    assert state.balance == 30
    assert history.version == 3, "the correction is a record of the entity"
    assert [e.event.amount for e in history.corrected if isinstance(e.event, Deposited)] == [30]
    with pytest.raises(CommandRejectedError):
        bank.handle(Withdraw(account, 31))
    bank.handle(Withdraw(account, 30))


def test_events_of_the_producer_and_of_the_store_are_one_entity(
    store: EntityStore, account: str, broker: BrokerProcess
) -> None:
    with EventProducer(broker.bootstrap) as producer:
        producer.append([Opened(account_id=account), Deposited(account_id=account, amount=7)])
    history = store.load(TOPIC, account)
    assert history.version == 2
    store.append(TOPIC, account, [Withdrawn(account_id=account, amount=7)], expected_version=2)


def test_a_topic_without_entity_versions_is_refused(store: EntityStore, log: Log) -> None:
    plain = log.create_topic(f"plain-{uuid.uuid4().hex[:8]}")
    with pytest.raises(EntityStoreError, match="entity versions"):
        store.load(plain, "anyone")


def test_tellers_racing_on_one_account_never_overdraw_it(
    broker: BrokerProcess, account: str
) -> None:
    """Several tellers, each with its own store, withdraw from one account at once: every
    decision is made on the version it read, so the balance never goes below zero."""
    with EntityStore(broker.bootstrap, CATALOG) as store:
        bank = repository(store)
        bank.handle(Open(account))
        bank.handle(Deposit(account, 10 * TELLERS * WITHDRAWALS_EACH // 2))
    outcomes: list[str] = []
    conflicts: list[int] = []
    lock = threading.Lock()

    def teller() -> None:
        with EntityStore(broker.bootstrap, CATALOG) as own:
            teller_bank = repository(own, attempts=200)
            for _ in range(WITHDRAWALS_EACH):
                try:
                    teller_bank.handle(Withdraw(account, 10))
                    outcome = "paid"
                except CommandRejectedError:
                    outcome = "refused"
                except ConcurrencyError:
                    outcome = "gave up"
                with lock:
                    outcomes.append(outcome)
            with lock:
                conflicts.append(teller_bank.conflicts)

    threads = [threading.Thread(target=teller) for _ in range(TELLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    with EntityStore(broker.bootstrap, CATALOG) as store:
        state, history = repository(store).load(account)
    paid = outcomes.count("paid")
    assert paid == TELLERS * WITHDRAWALS_EACH // 2, outcomes
    assert state.balance == 0
    balance = 0
    for envelope in history.envelopes:  # never negative in any prefix of the history
        balance = BANK.evolve(Account(opened=True, balance=balance), envelope.event).balance
        assert balance >= 0
    assert history.version == 2 + paid
    assert sum(conflicts) > 0, "the tellers raced"


def snapshotting(store: EntityStore, snapshots: MemorySnapshots, every: int = 5) -> Any:
    return Repository(store, TOPIC, BANK, account_of, snapshots=snapshots, snapshot_every=every)


def test_snapshots_fold_only_the_events_after_them_and_change_nothing(
    store: EntityStore, account: str
) -> None:
    snapshots = MemorySnapshots()
    bank = snapshotting(store, snapshots)
    bank.handle(Open(account))
    for amount in range(1, 13):
        bank.handle(Deposit(account, amount))
    taken = snapshots.get(TOPIC, account)
    assert taken is not None and taken.version == 10
    state, history = bank.load(account)
    assert (history.first_version, history.version) == (10, 13)
    assert len(history.envelopes) == 3, "only the events after the snapshot were read"
    assert state == Account(opened=True, balance=78)
    assert repository(store).load(account)[0] == state, "the log alone gives the same state"


def test_a_command_sent_again_is_recognised_from_before_the_snapshot(
    store: EntityStore, account: str
) -> None:
    bank = snapshotting(store, MemorySnapshots())
    bank.handle(Open(account))
    deposit = Deposit(account, 40)
    first = bank.handle(deposit)
    for _ in range(8):
        bank.handle(Deposit(account, 1))
    _, history = bank.load(account)
    assert history.first_version > first.expected_version, "its events lie before the snapshot"
    again = bank.handle(deposit)
    assert again.repeated and list(again.events) == list(first.events)
    assert again.expected_version == first.expected_version
    assert bank.load(account)[1].version == 10, "nothing appended"


def test_a_correction_of_an_event_before_the_snapshot_sets_the_snapshot_aside(
    store: EntityStore, account: str, broker: BrokerProcess
) -> None:
    snapshots = MemorySnapshots()
    bank = snapshotting(store, snapshots)
    bank.handle(Open(account))
    bank.handle(Deposit(account, 500))
    for _ in range(4):
        bank.handle(Deposit(account, 1))
    mistaken = repository(store).load(account)[1].envelopes[1]
    assert snapshots.get(TOPIC, account) is not None
    with EventProducer(broker.bootstrap) as producer:
        producer.append(
            [Correction(of=mistaken, replacement=Deposited(account_id=account, amount=50))]
        )
    state, history = bank.load(account)
    assert state.balance == 54 and history.first_version == 0, "folded from the log"
    with pytest.raises(CommandRejectedError):
        bank.handle(Withdraw(account, 55))


def test_an_erased_record_counts_in_its_entitys_version_and_holds_no_event(
    store: EntityStore, account: str, broker: BrokerProcess
) -> None:
    bank = repository(store)
    bank.handle(Open(account))
    bank.handle(Deposit(account, 30))
    partition = store.partition_of(TOPIC, account)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    delivered: list[Any] = []
    producer.produce(
        TOPIC,
        key=account.encode(),
        value=None,
        headers=[(ERASED_HEADER, b"")],
        partition=partition,
        on_delivery=lambda error, message: delivered.append(message),
    )
    assert producer.flush(10) == 0
    erased_at = Position(TOPIC, partition, delivered[0].offset())

    state, history = bank.load(account)
    assert (state.balance, history.version) == (30, 3)
    assert [record.position for record in history.erased] == [erased_at]
    assert bank.handle(Deposit(account, 5)).expected_version == 3, "the log counts it too"

    with EventProducer(broker.bootstrap) as events:
        named = EventRef(uuid.uuid4(), account, erased_at)
        events.append([Correction(of=named, replacement=Deposited(account_id=account, amount=4))])
    state, history = bank.load(account)
    assert (state.balance, history.version) == (39, 5), "the replacement stands in for it"
