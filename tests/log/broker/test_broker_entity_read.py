"""EntityRead through the wire: one entity's batches from an in-process broker, paged,
refused where it cannot answer, and not listed by ApiVersions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eventplatform.log.extensions import ENTITY_READ_API_KEY, ENTITY_VERSIONS_CONFIG
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import API_VERSIONS, ENTITY_READ
from eventplatform.log.storage import Compression

TOPIC = "accounts"
VERSIONED = {ENTITY_VERSIONS_CONFIG: "true"}


def read_body(key: bytes, from_offset: int = 0, max_bytes: int = 1 << 20, **fields: Any) -> Any:
    body = {
        "topic": TOPIC,
        "partition": 0,
        "current_leader_epoch": -1,
        "key": key,
        "from_offset": from_offset,
        "max_bytes": max_bytes,
    }
    return body | fields


async def read_entity(client: Any, wire: Any, key: bytes, max_bytes: int = 1 << 20) -> list[Any]:
    """Every record of ``key``, page by page from offset 0 to the high watermark."""
    found: list[Any] = []
    offset = 0
    for _ in range(1_000):
        answer = await client.request(ENTITY_READ, 0, read_body(key, offset, max_bytes))
        assert answer["error_code"] == 0, answer
        found += [r for r in wire.records_of(answer["records"]) if r.key == key]
        if answer["next_offset"] == answer["high_watermark"]:
            return found
        assert answer["next_offset"] > offset
        offset = answer["next_offset"]
    raise AssertionError("the read never reached the high watermark")


async def test_an_entity_is_read_in_order_from_its_batches_alone(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs=VERSIONED)
        expected: dict[bytes, list[bytes]] = {}
        for n in range(120):
            keys = [b"acct-%d" % (n % 7), b"acct-%d" % (n % 3)]
            values = [b"event %d.%d" % (n, i) for i in range(2)]
            compression = Compression.LZ4 if n % 2 else Compression.NONE
            answer = await client.produce(
                TOPIC, wire.batch(values, keys=keys, compression=compression)
            )
            assert answer["error_code"] == 0
            for key, value in zip(keys, values, strict=True):
                expected.setdefault(key, []).append(value)
        for key, values in expected.items():
            assert [r.value for r in await read_entity(client, wire, key)] == values
            paged = await read_entity(client, wire, key, max_bytes=1)
            assert [r.value for r in paged] == values
        assert await read_entity(client, wire, b"no such account") == []


async def test_entity_read_refuses_what_it_cannot_answer(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        plain = await client.request(ENTITY_READ, 0, read_body(b"a"))
        assert plain["error_code"] == ErrorCode.INVALID_REQUEST
        assert ENTITY_VERSIONS_CONFIG in plain["error_message"]
        missing = await client.request(ENTITY_READ, 0, read_body(b"a", topic="nothing"))
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await client.create_topic("versioned", configs=VERSIONED)
        ahead = await client.request(ENTITY_READ, 0, read_body(b"a", 5, topic="versioned"))
        assert ahead["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        negative = await client.request(
            ENTITY_READ, 0, read_body(b"a", max_bytes=-1, topic="versioned")
        )
        assert negative["error_code"] == ErrorCode.INVALID_REQUEST
        fenced = await client.request(
            ENTITY_READ, 0, read_body(b"a", topic="versioned", current_leader_epoch=7)
        )
        assert fenced["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH


async def test_api_versions_does_not_list_entity_read(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        answer = await client.request(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
        assert ENTITY_READ_API_KEY not in {entry["api_key"] for entry in answer["api_keys"]}
