"""Transactions over the wire: transactional batches produced by a client, markers
written by the partition's leader, and what read_uncommitted and read_committed
consumers see (records, last stable offset, aborted transactions, ListOffsets), across
a clean restart and a kill; and one transaction run through the coordinator's APIs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import (
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_PRODUCERS,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    PRODUCE,
)
from eventplatform.log.storage import Record
from eventplatform.log.storage.record_batch import decode_record_set, encode_batch

TOPIC = "payments"
TID = "payments-writer"
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
TIMESTAMP_MS = 1_700_000_000_000
TRANSACTIONAL_TIMESTAMP_MS = TIMESTAMP_MS + 1_000
"""Later than the plain records' (``wire.batch``), so a timestamp lookup can find them."""
MARKERS_TIMEOUT_S = 10.0


def transactional_batch(
    values: list[bytes], *, producer_id: int, epoch: int, sequence: int, transactional=True
) -> bytes:
    records = [
        Record(i, TRANSACTIONAL_TIMESTAMP_MS, b"k%d" % i, value) for i, value in enumerate(values)
    ]
    return encode_batch(
        records,
        base_offset=0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )


async def produce(
    client: Any, records: bytes, *, transactional_id: str | None = TID
) -> dict[str, Any]:
    body = {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}],
    }
    response = await client.request(PRODUCE, 8, body)
    return response["responses"][0]["partition_responses"][0]


class TransactionalClient:
    """A producer id's transactions, written by the test as a transactional client would
    (batches with transactional_id) and ended as a coordinator would (the leader's
    :meth:`Partition.write_marker`)."""

    def __init__(self, client: Any, broker: Any, producer_id: int, epoch: int) -> None:
        self.client = client
        self.broker = broker
        self.producer_id = producer_id
        self.epoch = epoch
        self.sequence = 0

    async def send(self, *values: bytes) -> int:
        batch = transactional_batch(
            list(values), producer_id=self.producer_id, epoch=self.epoch, sequence=self.sequence
        )
        answer = await produce(self.client, batch)
        assert answer["error_code"] == ErrorCode.NONE, answer
        self.sequence += len(values)
        return int(answer["base_offset"])

    def end(self, *, commit: bool) -> int:
        partition = self.broker.topics.partition(TOPIC, 0)
        result = partition.write_marker(self.producer_id, self.epoch, commit, 0)
        assert result.error == ErrorCode.NONE, result
        return int(result.base_offset)


async def setup(running: Any) -> tuple[Any, Any]:
    client = await running.connect()
    await client.create_topic(TOPIC)
    return client, running.broker


async def plain(client: Any, wire: Any, value: bytes) -> int:
    answer = await client.produce(TOPIC, wire.batch([value]))
    assert answer["error_code"] == ErrorCode.NONE
    return int(answer["base_offset"])


def values(wire: Any, fetched: dict[str, Any]) -> list[bytes | None]:
    return [record.value for record in wire.records_of(fetched["records"])]


async def data_values(client: Any, wire: Any, offset: int, isolation: int) -> list[bytes | None]:
    """The data records a consumer of ``isolation`` reads from ``offset`` (markers left out,
    as clients leave them out)."""
    fetched = await client.fetch(TOPIC, offset, isolation_level=isolation)
    return [
        record.value
        for batch in decode_record_set(fetched["records"] or b"")
        if not batch.header.is_control
        for record in batch.records
    ]


async def latest(client: Any, isolation: int, timestamp: int = -1) -> int:
    """ListOffsets: the latest offset (-1), or the first at or after ``timestamp``."""
    body = {
        "replica_id": -1,
        "isolation_level": isolation,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}
                ],
            }
        ],
    }
    response = await client.request(LIST_OFFSETS, 5, body)
    answer = response["topics"][0]["partitions"][0]
    assert answer["error_code"] == ErrorCode.NONE
    return int(answer["offset"])


# ---------------------------------------------------------------- isolation levels


async def test_read_committed_waits_for_the_open_transaction(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client, broker = await setup(running)
        await plain(client, wire, b"before")
        producer_id, epoch = await client.init_producer_id()
        transaction = TransactionalClient(client, broker, producer_id, epoch)
        start = await transaction.send(b"open-1", b"open-2")
        await plain(client, wire, b"behind")

        uncommitted = await client.fetch(TOPIC, 0, isolation_level=READ_UNCOMMITTED)
        assert uncommitted["high_watermark"] == 4
        assert uncommitted["last_stable_offset"] == start == 1
        assert uncommitted["aborted_transactions"] is None
        assert values(wire, uncommitted) == [b"before", b"open-1", b"open-2", b"behind"]

        committed = await client.fetch(TOPIC, 0, isolation_level=READ_COMMITTED)
        assert committed["last_stable_offset"] == 1
        assert values(wire, committed) == [b"before"]
        assert committed["aborted_transactions"] == []
        # at the stable offset a read_committed consumer waits, without an error
        held = await client.fetch(TOPIC, 1, isolation_level=READ_COMMITTED)
        assert held["error_code"] == ErrorCode.NONE and not held["records"]

        assert await latest(client, READ_UNCOMMITTED) == 4
        assert await latest(client, READ_COMMITTED) == 1
        # a timestamp lookup finds no record at or past the stable offset for read_committed
        lookup = TRANSACTIONAL_TIMESTAMP_MS - 1
        assert await latest(client, READ_UNCOMMITTED, lookup) == 1
        assert await latest(client, READ_COMMITTED, lookup) == -1

        transaction.end(commit=True)
        assert await latest(client, READ_COMMITTED) == 5
        assert await latest(client, READ_COMMITTED, lookup) == 1
        assert await data_values(client, wire, 0, READ_COMMITTED) == [
            b"before",
            b"open-1",
            b"open-2",
            b"behind",
        ]


async def test_read_committed_gets_the_aborted_transactions_of_its_range(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client, broker = await setup(running)
        first = TransactionalClient(client, broker, *await client.init_producer_id())
        second = TransactionalClient(client, broker, *await client.init_producer_id())
        aborted_start = await first.send(b"aborted-1")  # 0
        await second.send(b"committed-1")  # 1
        await first.send(b"aborted-2")  # 2
        aborted_marker = first.end(commit=False)  # 3
        second.end(commit=True)  # 4
        after = await plain(client, wire, b"after")  # 5

        fetched = await client.fetch(TOPIC, 0, isolation_level=READ_COMMITTED)
        assert fetched["last_stable_offset"] == fetched["high_watermark"] == 6
        assert fetched["aborted_transactions"] == [
            {"producer_id": first.producer_id, "first_offset": aborted_start}
        ]
        # the records all come: the consumer drops the aborted producer's up to its marker
        assert values(wire, fetched) == [
            b"aborted-1",
            b"committed-1",
            b"aborted-2",
            b"\x00\x00\x00\x00\x00\x00",  # the abort marker's value
            b"\x00\x00\x00\x00\x00\x00",  # the commit marker's value
            b"after",
        ]
        past = await client.fetch(TOPIC, aborted_marker + 1, isolation_level=READ_COMMITTED)
        assert past["aborted_transactions"] == []
        assert values(wire, past)[-1] == b"after"
        # a fetch whose data ends before the transaction began gets nothing either
        plain_only = await client.fetch(TOPIC, after, isolation_level=READ_COMMITTED)
        assert plain_only["aborted_transactions"] == []
        # read_uncommitted never gets the list
        uncommitted = await client.fetch(TOPIC, 0, isolation_level=READ_UNCOMMITTED)
        assert uncommitted["aborted_transactions"] is None


async def test_the_aborted_list_covers_only_the_data_a_small_fetch_returns(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client, broker = await setup(running)
        first = TransactionalClient(client, broker, *await client.init_producer_id())
        await plain(client, wire, b"x" * 200)  # 0
        late_start = await first.send(b"y" * 200)  # 1
        first.end(commit=False)  # 2
        one_batch = await client.fetch(
            TOPIC, 0, isolation_level=READ_COMMITTED, partition_max_bytes=10
        )
        assert values(wire, one_batch) == [b"x" * 200]
        assert one_batch["aborted_transactions"] == []
        rest = await client.fetch(TOPIC, 1, isolation_level=READ_COMMITTED)
        assert rest["aborted_transactions"] == [
            {"producer_id": first.producer_id, "first_offset": late_start}
        ]


# ---------------------------------------------------------------- produce rules


async def test_a_client_control_batch_is_an_invalid_record(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client, _ = await setup(running)
        producer_id, epoch = await client.init_producer_id()
        control = encode_batch(
            [Record(0, TIMESTAMP_MS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
            base_offset=0,
            producer_id=producer_id,
            producer_epoch=epoch,
            is_transactional=True,
            is_control=True,
        )
        answer = await produce(client, control)
        assert answer["error_code"] == ErrorCode.INVALID_RECORD
        assert (await client.fetch(TOPIC, 0))["high_watermark"] == 0


async def test_transactional_batches_need_a_transactional_id(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client, _ = await setup(running)
        producer_id, epoch = await client.init_producer_id()
        batch = transactional_batch([b"v"], producer_id=producer_id, epoch=epoch, sequence=0)
        refused = await produce(client, batch, transactional_id=None)
        assert refused["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        accepted = await produce(client, batch)
        assert accepted["error_code"] == ErrorCode.NONE


async def test_an_unsequenced_client_batch_is_an_invalid_record(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client, _ = await setup(running)
        producer_id, epoch = await client.init_producer_id()
        batch = transactional_batch([b"v"], producer_id=producer_id, epoch=epoch, sequence=-1)
        assert (await produce(client, batch))["error_code"] == ErrorCode.INVALID_RECORD


async def test_a_plain_batch_inside_a_transaction_is_an_invalid_state(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client, broker = await setup(running)
        transaction = TransactionalClient(client, broker, *await client.init_producer_id())
        await transaction.send(b"in")
        batch = transactional_batch(
            [b"out"],
            producer_id=transaction.producer_id,
            epoch=transaction.epoch,
            sequence=1,
            transactional=False,
        )
        answer = await produce(client, batch)
        assert answer["error_code"] == ErrorCode.INVALID_TXN_STATE


# ---------------------------------------------------------------- restarts


async def test_an_open_transaction_survives_a_clean_restart_and_a_kill(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client, broker = await setup(running)
        await plain(client, wire, b"before")
        aborted = TransactionalClient(client, broker, *await client.init_producer_id())
        aborted_start = await aborted.send(b"aborted")
        aborted.end(commit=False)
        pending = TransactionalClient(client, broker, *await client.init_producer_id())
        pending_start = await pending.send(b"pending")
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        fetched = await client.fetch(TOPIC, 0, isolation_level=READ_COMMITTED)
        assert fetched["last_stable_offset"] == pending_start
        assert fetched["aborted_transactions"] == [
            {"producer_id": aborted.producer_id, "first_offset": aborted_start}
        ]
        running.crash_on_exit()
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert await latest(client, READ_COMMITTED) == pending_start
        pending.broker = running.broker
        pending.client = client
        pending.end(commit=True)
        assert await latest(client, READ_COMMITTED) == await latest(client, READ_UNCOMMITTED)
        assert await data_values(client, wire, 0, READ_COMMITTED) == [
            b"before",
            b"aborted",
            b"pending",
        ]


# ---------------------------------------------------------------- through the coordinator


async def coordinator_ready(client: Any) -> None:
    """FindCoordinator for the transactional id until it names this broker."""
    with trio.fail_after(MARKERS_TIMEOUT_S):
        while True:
            body = {"key": TID, "key_type": 1}
            answer = await client.request(FIND_COORDINATOR, 1, body)
            if answer["error_code"] == ErrorCode.NONE:
                return
            await trio.sleep(0.05)


async def retried(client: Any, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """The request, again while the coordinator answers a retriable error."""
    retriable = {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
    with trio.fail_after(MARKERS_TIMEOUT_S):
        while True:
            answer: dict[str, Any] = await client.request(api, version, body)
            if answer.get("error_code") not in retriable:
                return answer
            await trio.sleep(0.05)


async def test_a_transaction_ended_through_the_coordinator(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client, _ = await setup(running)
        await coordinator_ready(client)
        init = await retried(
            client, INIT_PRODUCER_ID, 1, {"transactional_id": TID, "transaction_timeout_ms": 60_000}
        )
        assert init["error_code"] == ErrorCode.NONE, init
        producer_id, epoch = init["producer_id"], init["producer_epoch"]
        for committed, value in ((False, b"aborted"), (True, b"committed")):
            added = await retried(
                client,
                ADD_PARTITIONS_TO_TXN,
                3,
                {
                    "v3_and_below_transactional_id": TID,
                    "v3_and_below_producer_id": producer_id,
                    "v3_and_below_producer_epoch": epoch,
                    "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}],
                },
            )
            [result] = added["results_by_topic_v3_and_below"][0]["results_by_partition"]
            assert result["partition_error_code"] == ErrorCode.NONE, added
            sequence = 0 if not committed else 1
            batch = transactional_batch(
                [value], producer_id=producer_id, epoch=epoch, sequence=sequence
            )
            assert (await produce(client, batch))["error_code"] == ErrorCode.NONE
            body = {
                "transactional_id": TID,
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "committed": committed,
            }
            ended = await retried(client, END_TXN, 3, body)
            assert ended["error_code"] == ErrorCode.NONE, ended
            # the markers follow the answer: wait for the stable offset to pass them
            with trio.fail_after(MARKERS_TIMEOUT_S):
                while await latest(client, READ_COMMITTED) < await latest(client, 0):
                    await trio.sleep(0.05)
        fetched = await client.fetch(TOPIC, 0, isolation_level=READ_COMMITTED)
        assert fetched["aborted_transactions"] == [{"producer_id": producer_id, "first_offset": 0}]
        assert await data_values(client, wire, 0, READ_COMMITTED) == [b"aborted", b"committed"]


async def test_describe_producers_shows_an_open_transaction_and_its_end(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client, broker = await setup(running)
        producer_id, epoch = await client.init_producer_id()
        transaction = TransactionalClient(client, broker, producer_id, epoch)
        await plain(client, wire, b"first")
        start = await transaction.send(b"a", b"b")
        body = {"topics": [{"name": TOPIC, "partition_indexes": [0, 9]}]}

        async def described() -> list[dict[str, Any]]:
            answer = await client.request(DESCRIBE_PRODUCERS, 0, body)
            found, missing = answer["topics"][0]["partitions"]
            assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert found["error_code"] == ErrorCode.NONE
            return [p for p in found["active_producers"] if p["producer_id"] == producer_id]

        (open_,) = await described()
        assert (open_["producer_epoch"], open_["last_sequence"]) == (epoch, 1)
        assert open_["current_txn_start_offset"] == start
        transaction.end(commit=True)
        (ended,) = await described()
        assert ended["current_txn_start_offset"] == -1
