"""EventProducer against a real broker: positions, partitions, corrections, async, refusals.

Every event class here writes to a topic of its own, created once for the
module, so each test can count the records it finds.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import trio
from confluent_kafka import Message

from eventplatform.events import (
    TYPE_HEADER,
    VERSION_HEADER,
    Correction,
    Envelope,
    Event,
    EventCatalog,
    EventProducer,
    EventRef,
    EventValidationError,
    IncompatibleSchemaError,
    Position,
    upcaster,
)
from eventplatform.events.partitioner import partition_for_key
from eventplatform.events.registry import SchemaRegistry
from eventplatform.log.extensions import ENTITY_VERSIONS_CONFIG

if TYPE_CHECKING:
    from conftest import Log

    from eventplatform.testing import BrokerProcess

DELIVERY_TIMEOUT_S = 20.0
ASYNC_TIMEOUT_S = 30.0
PAYMENT_PARTITIONS = 6


class OrderPlaced(Event, type="shop.order_placed", key="order_id", topic="sdk-producer-orders"):
    order_id: str
    total_cents: int


class PaymentTaken(Event, type="shop.payment_taken", key="account", topic="sdk-producer-payments"):
    account: str
    amount_cents: int


class PageViewed(Event, type="activity.page_viewed", key="user_id", topic="sdk-producer-views"):
    user_id: str
    url: str


class TaskDone(Event, type="work.task_done", key="task_id", topic="sdk-producer-async"):
    task_id: str


class InvoiceIssued(
    Event, type="billing.invoice_issued", key="invoice_id", topic="sdk-producer-invoices"
):
    invoice_id: str
    amount_cents: int


class ProfileUpdatedV1(
    Event,
    type="accounts.profile_updated",
    version=1,
    key="account_id",
    topic="sdk-producer-profiles",
):
    account_id: str
    name: str


class ProfileUpdatedV2(
    Event,
    type="accounts.profile_updated",
    version=2,
    key="account_id",
    topic="sdk-producer-profiles",
):
    """Adds a required field: a v2 reader cannot read v1 events."""

    account_id: str
    name: str
    email: str


class CartUpdatedV1(
    Event, type="shop.cart_updated", version=1, key="cart_id", topic="sdk-producer-carts"
):
    cart_id: str
    item: str


class CartUpdatedV2(
    Event, type="shop.cart_updated", version=2, key="cart_id", topic="sdk-producer-carts"
):
    cart_id: str
    items: list[str]


class CartUpdated(
    Event, type="shop.cart_updated", version=3, key="cart_id", topic="sdk-producer-carts"
):
    cart_id: str
    items: list[str]
    currency: str = "EUR"


@upcaster(CartUpdated, 1)
def _items_from_item(data: dict[str, Any]) -> dict[str, Any]:
    return {"cart_id": data["cart_id"], "items": [data["item"]]}


@upcaster(CartUpdated, 2)
def _currency_from_before_currencies(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "currency": "EUR"}


TOPICS = {
    OrderPlaced.event_topic: 3,
    PaymentTaken.event_topic: PAYMENT_PARTITIONS,
    PageViewed.event_topic: 4,
    TaskDone.event_topic: 1,
    InvoiceIssued.event_topic: 3,
    ProfileUpdatedV1.event_topic: 2,
    CartUpdated.event_topic: 2,
}


@pytest.fixture(scope="module")
def topics(log: Log) -> dict[str, int]:
    for topic, partitions in TOPICS.items():
        log.create_topic(topic, partitions)
    return TOPICS


@pytest.fixture
def producer(broker: BrokerProcess, topics: dict[str, int]) -> Iterator[EventProducer]:
    with EventProducer(broker.bootstrap, delivery_timeout_s=DELIVERY_TIMEOUT_S) as opened:
        yield opened


def decoded(catalog: EventCatalog, message: Message) -> Envelope[Event]:
    position = Position(message.topic() or "", message.partition() or 0, message.offset() or 0)
    return catalog.decode(message.value(), position)


def test_append_returns_refs_in_the_order_given(producer: EventProducer, log: Log) -> None:
    orders = [OrderPlaced(order_id="o-1", total_cents=cents) for cents in range(5)]
    orders += [OrderPlaced(order_id=f"o-{index}", total_cents=0) for index in range(2, 8)]
    envelopes = [Envelope(order) for order in orders]
    refs = producer.append(envelopes)
    assert [ref.event_id for ref in refs] == [envelope.event_id for envelope in envelopes]
    assert [ref.key for ref in refs] == [order.order_id for order in orders]
    same_entity = [ref.position for ref in refs[:5]]
    assert len({(position.topic, position.partition) for position in same_entity}) == 1
    assert [position.offset for position in same_entity] == list(
        range(same_entity[0].offset, same_entity[0].offset + 5)
    )
    catalog = EventCatalog([OrderPlaced])
    by_position = {
        envelope.position: envelope
        for envelope in (
            decoded(catalog, message) for message in log.records(OrderPlaced.event_topic)
        )
    }
    for ref, order in zip(refs, orders, strict=True):
        assert by_position[ref.position].event == order
        assert by_position[ref.position].event_id == ref.event_id


def test_appends_from_many_threads_at_once_each_get_their_own_refs(
    producer: EventProducer, log: Log
) -> None:
    """Blocking appends serve delivery reports on their own threads as well as on the
    producer's: every append must still get exactly its own events' positions."""
    threads, appends, size = 4, 5, 300
    results: dict[tuple[int, int], list[EventRef]] = {}
    sent: dict[tuple[int, int], list[OrderPlaced]] = {}

    def work(thread: int) -> None:
        for round_ in range(appends):
            batch = [
                OrderPlaced(order_id=f"mt-{thread}-{index % 7}", total_cents=round_ * size + index)
                for index in range(size)
            ]
            sent[thread, round_] = batch
            results[thread, round_] = producer.append(batch)

    workers = [threading.Thread(target=work, args=(thread,)) for thread in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=DELIVERY_TIMEOUT_S * appends)
    assert len(results) == threads * appends
    catalog = EventCatalog([OrderPlaced])
    by_position = {
        envelope.position: envelope.event
        for envelope in (
            decoded(catalog, message) for message in log.records(OrderPlaced.event_topic)
        )
    }
    positions = [ref.position for refs in results.values() for ref in refs]
    assert len(set(positions)) == len(positions) == threads * appends * size
    for slot, refs in results.items():
        assert [by_position[ref.position] for ref in refs] == sent[slot]
        assert [ref.key for ref in refs] == [event.order_id for event in sent[slot]]


def test_keyed_events_land_on_the_murmur2_partition(producer: EventProducer) -> None:
    accounts = [f"account-{index}" for index in range(60)]
    refs = producer.append([PaymentTaken(account=account, amount_cents=1) for account in accounts])
    partitions = [ref.position.partition for ref in refs]
    assert partitions == [
        partition_for_key(account.encode(), PAYMENT_PARTITIONS) for account in accounts
    ]
    assert len(set(partitions)) > 1


def test_a_correction_lands_in_the_original_partition(producer: EventProducer, log: Log) -> None:
    [original] = producer.append([PageViewed(user_id="u-42", url="/pricng")])
    correction = Correction(of=original, replacement=PageViewed(user_id="u-42", url="/pricing"))
    [corrected] = producer.append([correction])
    assert corrected.position.topic == original.position.topic
    assert corrected.position.partition == original.position.partition
    assert corrected.position.offset > original.position.offset
    assert corrected.key == "u-42"
    records = {
        (message.partition(), message.offset()): message
        for message in log.records(PageViewed.event_topic)
    }
    message = records[(corrected.position.partition, corrected.position.offset)]
    read = decoded(EventCatalog([PageViewed]), message)
    assert read.event == correction
    assert dict(message.headers() or [])[TYPE_HEADER] == b"eventplatform.correction"


def test_append_async_under_asyncio(producer: EventProducer) -> None:
    async def append() -> list[Any]:
        return await asyncio.wait_for(
            producer.append_async([TaskDone(task_id="asyncio-1"), TaskDone(task_id="asyncio-2")]),
            ASYNC_TIMEOUT_S,
        )

    refs = asyncio.run(append())
    assert [ref.key for ref in refs] == ["asyncio-1", "asyncio-2"]
    assert refs[1].position.offset == refs[0].position.offset + 1


async def test_append_async_under_trio(broker: BrokerProcess, topics: dict[str, int]) -> None:
    with (
        EventProducer(broker.bootstrap, delivery_timeout_s=DELIVERY_TIMEOUT_S) as producer,
        trio.fail_after(ASYNC_TIMEOUT_S),
    ):
        refs = await producer.append_async([TaskDone(task_id="trio-1"), TaskDone(task_id="trio-2")])
    assert [ref.key for ref in refs] == ["trio-1", "trio-2"]
    assert refs[1].position.offset == refs[0].position.offset + 1


def test_an_invalid_event_in_a_batch_sends_none_of_it(producer: EventProducer, log: Log) -> None:
    producer.append([InvoiceIssued(invoice_id="inv-0", amount_cents=100)])
    before = log.end_offsets(InvoiceIssued.event_topic)
    invalid = InvoiceIssued.model_construct(invoice_id="inv-2", amount_cents="a lot")
    batch = [
        InvoiceIssued(invoice_id="inv-1", amount_cents=100),
        invalid,
        InvoiceIssued(invoice_id="inv-3", amount_cents=300),
    ]
    with pytest.raises(EventValidationError, match="amount_cents"):
        producer.append(batch)
    with pytest.raises(EventValidationError, match="not an Event"):
        producer.append([InvoiceIssued(invoice_id="inv-4", amount_cents=1), "inv-5"])  # type: ignore[list-item]
    producer.flush(DELIVERY_TIMEOUT_S)
    assert log.end_offsets(InvoiceIssued.event_topic) == before
    assert sum(before.values()) == 1


def test_a_class_incompatible_with_the_registry_sends_none_of_its_batch(
    broker: BrokerProcess, topics: dict[str, int], log: Log, registry_topic: str
) -> None:
    with (
        SchemaRegistry(broker.bootstrap, topic=registry_topic, timeout_s=10) as registry,
        EventProducer(
            broker.bootstrap, schemas=registry, delivery_timeout_s=DELIVERY_TIMEOUT_S
        ) as producer,
    ):
        producer.append([ProfileUpdatedV1(account_id="a-1", name="Ada")])
        assert registry.versions(ProfileUpdatedV1) == [1]
        before = log.end_offsets(ProfileUpdatedV1.event_topic)
        batch = [
            ProfileUpdatedV1(account_id="a-2", name="Grace"),
            ProfileUpdatedV2(account_id="a-3", name="Edsger", email="e@example.org"),
        ]
        with pytest.raises(IncompatibleSchemaError, match="'email'") as raised:
            producer.append(batch)
        assert raised.value.field == "email"
        producer.flush(DELIVERY_TIMEOUT_S)
        assert log.end_offsets(ProfileUpdatedV1.event_topic) == before
        registry.refresh()
        assert registry.versions(ProfileUpdatedV1) == [1]


def test_old_versions_come_back_upcast_on_replay(producer: EventProducer, log: Log) -> None:
    cart = f"cart-{uuid.uuid4().hex[:6]}"
    producer.append(
        [
            CartUpdatedV1(cart_id=cart, item="apple"),
            CartUpdatedV2(cart_id=cart, items=["apple", "pear"]),
            CartUpdated(cart_id=cart, items=["plum"], currency="USD"),
        ]
    )
    messages = [
        message
        for message in log.records(CartUpdated.event_topic)
        if message.key() == cart.encode()
    ]
    assert [dict(message.headers() or [])[VERSION_HEADER] for message in messages] == [
        b"1",
        b"2",
        b"3",
    ]
    catalog = EventCatalog([CartUpdated])
    assert [decoded(catalog, message).event for message in messages] == [
        CartUpdated(cart_id=cart, items=["apple"], currency="EUR"),
        CartUpdated(cart_id=cart, items=["apple", "pear"], currency="EUR"),
        CartUpdated(cart_id=cart, items=["plum"], currency="USD"),
    ]


class AccountOpened(Event, type="bank.account_opened", key="account_id", topic="sdk-new-accounts"):
    account_id: str


def test_the_first_append_creates_an_event_topic_that_keeps_its_history(
    producer: EventProducer, log: Log
) -> None:
    [ref] = producer.append([AccountOpened(account_id="a-1")])
    assert ref.position.topic == AccountOpened.event_topic
    configs = log.topic_config(AccountOpened.event_topic)
    assert configs["retention.ms"] == "-1"
    assert configs["retention.bytes"] == "-1"
    assert configs["cleanup.policy"] == "delete"
    assert configs[ENTITY_VERSIONS_CONFIG] == "true"


def test_an_event_topic_that_exists_is_left_as_it_is(producer: EventProducer, log: Log) -> None:
    [ref] = producer.append([OrderPlaced(order_id="o-kept", total_cents=1)])
    assert ref.position.topic == OrderPlaced.event_topic
    configs = log.topic_config(OrderPlaced.event_topic)
    assert configs["retention.ms"] != "-1"  # created by the module's fixture, with defaults
    assert configs[ENTITY_VERSIONS_CONFIG] == "false"
