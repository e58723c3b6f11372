"""Client quotas over the wire: AlterClientQuotas and DescribeClientQuotas, a producer
and a consumer over their byte rates told to wait and made to, and a connection rate
per address."""

from __future__ import annotations

from typing import Any

import trio

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    FETCH,
    PRODUCE,
)

QUOTA_BYTES_PER_S = 8_000.0
"""100 kB at once is 10 kB/s over the 11 s window: a quarter over, so 2.75 s owed."""


def alter_body(
    entity: list[tuple[str, str | None]], key: str, value: float | None
) -> dict[str, Any]:
    return {
        "entries": [
            {
                "entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity],
                "ops": [{"key": key, "value": value or 0.0, "remove": value is None}],
            }
        ],
        "validate_only": False,
    }


async def test_a_producer_over_its_byte_rate_is_told_to_wait_and_is_held(
    tmp_path: Any, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        admin = await running.connect("admin")
        answer = await admin.request(
            ALTER_CLIENT_QUOTAS,
            1,
            alter_body([("client-id", "greedy")], "producer_byte_rate", QUOTA_BYTES_PER_S),
        )
        assert answer["entries"][0]["error_code"] == ErrorCode.NONE
        described = await admin.request(
            DESCRIBE_CLIENT_QUOTAS,
            1,
            {"components": [{"entity_type": "client-id", "match_type": 0, "match": "greedy"}]},
        )
        assert described["entries"] == [
            {
                "entity": [{"entity_type": "client-id", "entity_name": "greedy"}],
                "values": [{"key": "producer_byte_rate", "value": QUOTA_BYTES_PER_S}],
            }
        ]

        greedy = await running.connect("greedy")
        await greedy.create_topic("quota-topic")
        big = wire.batch([b"x" * 100_000])
        first = await greedy.request(
            PRODUCE,
            8,
            wire.produce_body("quota-topic", {0: big}, acks=1),
        )
        throttle_ms = first["throttle_time_ms"]
        assert 2000 < throttle_ms < 3500
        started = trio.current_time()
        await greedy.produce("quota-topic", wire.batch([b"y"]), acks=1)
        assert trio.current_time() - started >= throttle_ms / 1000 * 0.9  # the connection was held

        polite = await running.connect("polite")  # another client id: no quota
        second = await polite.request(
            PRODUCE, 8, wire.produce_body("quota-topic", {0: big}, acks=1)
        )
        assert second["throttle_time_ms"] == 0


async def test_a_consumer_over_its_byte_rate_is_told_to_wait(tmp_path: Any, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect("reader")
        await client.request(
            ALTER_CLIENT_QUOTAS,
            1,
            alter_body([("client-id", None)], "consumer_byte_rate", QUOTA_BYTES_PER_S),
        )
        await client.create_topic("quota-read")
        await client.produce("quota-read", wire.batch([b"z" * 300_000]), acks=1)
        body = wire.fetch_body({"quota-read": [(0, 0)]})
        answer = await client.request(FETCH, 11, body)
        assert answer["throttle_time_ms"] > 0


async def test_connections_over_an_addresss_creation_rate_are_closed(
    tmp_path: Any, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        admin = await running.connect("admin")
        answer = await admin.request(
            ALTER_CLIENT_QUOTAS,
            1,
            alter_body([("ip", "127.0.0.1")], "connection_creation_rate", 0.5),
        )
        assert answer["entries"][0]["error_code"] == ErrorCode.NONE
        closed = 0
        for _ in range(12):
            stream = await trio.open_tcp_stream("127.0.0.1", running.port)
            with trio.move_on_after(0.5):
                try:
                    if await stream.receive_some(1) == b"":
                        closed += 1
                except trio.BrokenResourceError:
                    closed += 1
            await stream.aclose()
        assert closed >= 5


async def test_quotas_the_broker_cannot_enforce_are_refused(tmp_path: Any, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        answer = await client.request(
            ALTER_CLIENT_QUOTAS, 1, alter_body([("user", "a")], "request_percentage", 50.0)
        )
        assert answer["entries"][0]["error_code"] == ErrorCode.INVALID_REQUEST
        assert "is not a quota" in answer["entries"][0]["error_message"]
