"""Admin and offset APIs through the codec: configs, records and offsets, producer ids."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio
from admin_requests import (
    APPEND,
    BROKER_RESOURCE,
    DELETE,
    RETENTION_MS_DEFAULT,
    SET,
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_TOPIC,
    SOURCE_STATIC_BROKER,
    SUBTRACT,
    TOPIC,
    TOPIC_RESOURCE,
    describe_topic,
    incremental_alter,
    list_offset,
    topic_configs,
)

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import (
    ALTER_CONFIGS,
    DELETE_RECORDS,
    DESCRIBE_CONFIGS,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    OFFSET_FOR_LEADER_EPOCH,
)
from eventplatform.log.storage import LogConfig

# ---------------------------------------------------------------- configs


async def test_describe_configs_reports_sources_and_synonyms(tmp_path: Path, wire: Any) -> None:
    config = replace(wire.broker_config(tmp_path), log_defaults=LogConfig(retention_ms=3_600_000))
    async with wire.open_broker(tmp_path, config) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs={"segment.bytes": "1048576"})
        result = await describe_topic(client, TOPIC)
        assert (result["error_code"], result["resource_name"]) == (0, TOPIC)
        entries = {entry["name"]: entry for entry in result["configs"]}
        segment = entries["segment.bytes"]
        assert (segment["value"], segment["config_source"]) == ("1048576", SOURCE_DYNAMIC_TOPIC)
        assert [(item["name"], item["value"], item["source"]) for item in segment["synonyms"]] == [
            ("segment.bytes", "1048576", SOURCE_DYNAMIC_TOPIC),
            ("segment.bytes", str(1 << 30), SOURCE_DEFAULT),
        ]
        retention = entries["retention.ms"]
        assert (retention["value"], retention["config_source"]) == ("3600000", SOURCE_STATIC_BROKER)
        assert [(item["name"], item["source"]) for item in retention["synonyms"]] == [
            ("log.retention.ms", SOURCE_STATIC_BROKER),
            ("retention.ms", SOURCE_DEFAULT),
        ]
        policy = entries["cleanup.policy"]
        assert (policy["value"], policy["config_source"]) == ("delete", SOURCE_DEFAULT)
        assert not any(entry["read_only"] for entry in entries.values())

        only = await describe_topic(client, TOPIC, ["retention.ms", "cleanup.policy"])
        assert sorted(entry["name"] for entry in only["configs"]) == [
            "cleanup.policy",
            "retention.ms",
        ]
        v0 = await describe_topic(client, TOPIC, ["segment.bytes", "cleanup.policy"], version=0)
        assert {entry["name"]: entry["is_default"] for entry in v0["configs"]} == {
            "segment.bytes": False,
            "cleanup.policy": True,
        }
        missing = await describe_topic(client, "missing")
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_describe_configs_of_the_broker(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path, num_partitions=4) as running:
        client = await running.connect()
        resources = [
            {"resource_type": BROKER_RESOURCE, "resource_name": "1", "configuration_keys": None},
            {"resource_type": BROKER_RESOURCE, "resource_name": "7", "configuration_keys": None},
            {"resource_type": 99, "resource_name": "x", "configuration_keys": None},
        ]
        response = await client.request(DESCRIBE_CONFIGS, 3, {"resources": resources})
        own, other, unknown = response["results"]
        assert own["error_code"] == 0
        entries = {entry["name"]: entry for entry in own["configs"]}
        assert (entries["num.partitions"]["value"], entries["num.partitions"]["config_source"]) == (
            "4",
            SOURCE_STATIC_BROKER,
        )
        assert entries["delete.topic.enable"]["config_source"] == SOURCE_DEFAULT
        assert all(entry["read_only"] for entry in entries.values())
        assert other["error_code"] == unknown["error_code"] == ErrorCode.INVALID_REQUEST


async def test_incremental_alter_configs_set_delete_append_subtract(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs={"cleanup.policy": "delete"})
        assert await incremental_alter(client, TOPIC, [("retention.ms", SET, "5000")]) == 0
        assert (await topic_configs(client, TOPIC))["retention.ms"] == "5000"
        assert await incremental_alter(client, TOPIC, [("cleanup.policy", APPEND, "compact")]) == 0
        assert (await topic_configs(client, TOPIC))["cleanup.policy"] == "compact,delete"
        assert await incremental_alter(client, TOPIC, [("cleanup.policy", SUBTRACT, "delete")]) == 0
        assert (await topic_configs(client, TOPIC))["cleanup.policy"] == "compact"
        assert await incremental_alter(client, TOPIC, [("retention.ms", DELETE, None)]) == 0
        configs = await topic_configs(client, TOPIC)
        assert configs["retention.ms"] == RETENTION_MS_DEFAULT
        result = await describe_topic(client, TOPIC, ["retention.ms"])
        assert result["configs"][0]["config_source"] == SOURCE_DEFAULT


async def test_append_to_a_list_config_starts_from_the_value_in_force(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        assert await incremental_alter(client, TOPIC, [("cleanup.policy", APPEND, "compact")]) == 0
        assert (await topic_configs(client, TOPIC))["cleanup.policy"] == "compact,delete"


async def test_incremental_alter_configs_refusals_change_nothing(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs={"retention.ms": "5000"})
        before = await topic_configs(client, TOPIC)
        refusals = {
            "validate only": (
                [("retention.ms", SET, "1")],
                {"validate_only": True},
                0,
            ),
            "bad value": ([("retention.ms", SET, "x")], {}, ErrorCode.INVALID_CONFIG),
            "unknown key": ([("no.such", SET, "1")], {}, ErrorCode.INVALID_CONFIG),
            "null set": ([("retention.ms", SET, None)], {}, ErrorCode.INVALID_CONFIG),
            "append scalar": ([("retention.ms", APPEND, "1")], {}, ErrorCode.INVALID_CONFIG),
            "bad operation": ([("retention.ms", 9, "1")], {}, ErrorCode.INVALID_REQUEST),
            "half valid": (
                [("segment.bytes", SET, "2048"), ("retention.ms", SET, "x")],
                {},
                ErrorCode.INVALID_CONFIG,
            ),
            "broker": (
                [("num.partitions", SET, "3")],
                {"resource_type": BROKER_RESOURCE},
                ErrorCode.INVALID_REQUEST,
            ),
        }
        for name, (operations, options, error) in refusals.items():
            target = "1" if options.get("resource_type") == BROKER_RESOURCE else TOPIC
            assert await incremental_alter(client, target, operations, **options) == error, name
        assert await incremental_alter(client, "missing", [("retention.ms", SET, "1")]) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert await topic_configs(client, TOPIC) == before


async def test_altered_configs_apply_to_the_log(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        large = wire.batch([b"x" * 400])
        assert (await client.produce(TOPIC, large))["error_code"] == 0
        assert await incremental_alter(client, TOPIC, [("max.message.bytes", SET, "300")]) == 0
        assert (await client.produce(TOPIC, large))["error_code"] == ErrorCode.MESSAGE_TOO_LARGE
        assert await incremental_alter(client, TOPIC, [("cleanup.policy", SET, "compact")]) == 0
        keyless = wire.batch([b"v"], keys=[None])
        assert (await client.produce(TOPIC, keyless))["error_code"] == ErrorCode.INVALID_RECORD
        assert await incremental_alter(client, TOPIC, [("segment.bytes", SET, "200")]) == 0
        for index in range(3):
            answer = await client.produce(TOPIC, wire.batch([b"%d" % index]))
            assert answer["error_code"] == 0
        assert len(list((tmp_path / f"{TOPIC}-0").glob("*.log"))) >= 3
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        configs = await topic_configs(client, TOPIC)
        assert (configs["max.message.bytes"], configs["cleanup.policy"]) == ("300", "compact")


async def test_alter_configs_replaces_every_override(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, configs={"retention.ms": "5000", "segment.bytes": "4096"})

        async def alter(name: str, configs: dict[str, str | None], validate_only: bool) -> int:
            body = {
                "resources": [
                    {
                        "resource_type": TOPIC_RESOURCE,
                        "resource_name": name,
                        "configs": [
                            {"name": key, "value": value} for key, value in configs.items()
                        ],
                    }
                ],
                "validate_only": validate_only,
            }
            response = await client.request(ALTER_CONFIGS, 1, body)
            return int(response["responses"][0]["error_code"])

        assert await alter(TOPIC, {"max.message.bytes": "2000"}, True) == 0
        assert (await topic_configs(client, TOPIC))["retention.ms"] == "5000"
        assert await alter(TOPIC, {"max.message.bytes": "bad"}, False) == ErrorCode.INVALID_CONFIG
        assert await alter("missing", {}, False) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert await alter(TOPIC, {"max.message.bytes": "2000"}, False) == 0
        configs = await topic_configs(client, TOPIC)
        assert configs["max.message.bytes"] == "2000"
        assert configs["retention.ms"] == RETENTION_MS_DEFAULT
        assert configs["segment.bytes"] == str(1 << 30)


# ---------------------------------------------------------------- records and offsets


async def test_delete_records_moves_the_log_start(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=2)
        for index in range(5):
            assert (await client.produce(TOPIC, wire.batch([b"%d" % index])))["error_code"] == 0
        body = {
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {"partition_index": 0, "offset": 3},
                        {"partition_index": 1, "offset": 1},
                        {"partition_index": 9, "offset": 0},
                    ],
                },
                {"name": "missing", "partitions": [{"partition_index": 0, "offset": 0}]},
            ],
            "timeout_ms": 1000,
        }
        response = await client.request(DELETE_RECORDS, 1, body)
        answers = [
            (entry["partition_index"], entry["error_code"], entry["low_watermark"])
            for topic in response["topics"]
            for entry in topic["partitions"]
        ]
        assert answers == [
            (0, 0, 3),
            (1, ErrorCode.OFFSET_OUT_OF_RANGE, -1),
            (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
            (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        ]
        assert (await list_offset(client, -2))["offset"] == 3
        body = {
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": -1}]}],
            "timeout_ms": 1000,
        }
        response = await client.request(DELETE_RECORDS, 1, body)
        assert response["topics"][0]["partitions"][0]["low_watermark"] == 5
        assert (await list_offset(client, -2))["offset"] == 5
        # The log start never moves back.
        body["topics"][0]["partitions"][0]["offset"] = 2
        response = await client.request(DELETE_RECORDS, 1, body)
        assert response["topics"][0]["partitions"][0]["low_watermark"] == 5
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert (await list_offset(client, -2))["offset"] == 5


async def test_list_offsets_earliest_latest_and_by_timestamp(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        for start in (1_000, 2_000, 3_000):
            data = wire.batch([b"a", b"b"], timestamp_ms=start)
            assert (await client.produce(TOPIC, data))["error_code"] == 0
        assert (await list_offset(client, -2))["offset"] == 0
        latest = await list_offset(client, -1)
        assert (latest["offset"], latest["leader_epoch"]) == (6, 0)
        found = await list_offset(client, 2_001)
        assert (found["offset"], found["timestamp"]) == (3, 2_001)
        found = await list_offset(client, 1_500)
        assert (found["offset"], found["timestamp"]) == (2, 2_000)
        assert (await list_offset(client, 9_999))["offset"] == -1
        missing = await list_offset(client, -1, partition=3)
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        future = await list_offset(client, -1, current_leader_epoch=1)
        assert future["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH


async def test_offset_for_leader_epoch(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        for index in range(3):
            assert (await client.produce(TOPIC, wire.batch([b"%d" % index])))["error_code"] == 0
        partitions = [
            {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 4},
            {"partition": 0, "current_leader_epoch": 2, "leader_epoch": 0},
            {"partition": 5, "current_leader_epoch": -1, "leader_epoch": 0},
        ]
        body = {"replica_id": -1, "topics": [{"topic": TOPIC, "partitions": partitions}]}
        for version in (2, 3):
            response = await client.request(OFFSET_FOR_LEADER_EPOCH, version, body)
            answers = [
                (entry["error_code"], entry["leader_epoch"], entry["end_offset"])
                for entry in response["topics"][0]["partitions"]
            ]
            assert answers == [
                (0, 0, 3),
                (0, -1, -1),
                (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1),
                (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
            ]


# ---------------------------------------------------------------- producer ids


@pytest.mark.parametrize("stop", ["clean", "crash"])
async def test_producer_ids_are_never_reused_across_restarts(
    tmp_path: Path, wire: Any, stop: str
) -> None:
    seen: list[int] = []
    for _ in range(3):
        async with wire.open_broker(tmp_path) as running:
            client = await running.connect()
            for _ in range(5):
                producer_id, epoch = await client.init_producer_id()
                assert epoch == 0
                seen.append(producer_id)
            if stop == "crash":
                running.crash_on_exit()
    assert len(set(seen)) == len(seen) == 15
    assert seen == sorted(seen)


async def test_a_transactional_id_gets_its_producer_id_with_the_epoch_raised_each_time(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        found = await client.request(FIND_COORDINATOR, 2, {"key": "tx", "key_type": 1})
        assert found["error_code"] == ErrorCode.NONE  # as clients ask first: it makes the topic
        body = {"transactional_id": "tx", "transaction_timeout_ms": 60_000}
        first = None
        for _attempt in range(100):  # __transaction_state is made and loaded at first use
            first = await client.request(INIT_PRODUCER_ID, 1, body)
            if first["error_code"] == ErrorCode.NONE:
                break
            assert first["error_code"] in (
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            ), first
            await trio.sleep(0.05)
        assert first is not None and first["error_code"] == ErrorCode.NONE
        again = await client.request(INIT_PRODUCER_ID, 1, body)
        assert (again["producer_id"], again["producer_epoch"]) == (first["producer_id"], 1)
        too_long = {"transactional_id": "tx", "transaction_timeout_ms": 10**9}
        refused = await client.request(INIT_PRODUCER_ID, 1, too_long)
        assert refused["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
