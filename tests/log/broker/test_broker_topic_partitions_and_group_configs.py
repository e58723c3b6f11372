"""DescribeTopicPartitions pagination and group config resources, through the codec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import (
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_TOPIC_PARTITIONS,
    INCREMENTAL_ALTER_CONFIGS,
)

GROUP_RESOURCE = 32
SOURCE_DEFAULT = 5
TOPIC_OPERATIONS_BITS = sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))


def _body(topics: list[str], limit: int, cursor: tuple[str, int] | None = None) -> dict[str, Any]:
    return {
        "topics": [{"name": name} for name in topics],
        "response_partition_limit": limit,
        "cursor": None
        if cursor is None
        else {"topic_name": cursor[0], "partition_index": cursor[1]},
    }


def _pages(answer: dict[str, Any]) -> list[tuple[str, list[int]]]:
    return [
        (topic["name"], [p["partition_index"] for p in topic["partitions"]])
        for topic in answer["topics"]
    ]


async def test_describe_topic_partitions_pages_through_topics_in_name_order(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic("b", partitions=3)
        await client.create_topic("a", partitions=2)
        first = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, _body(["b", "a"], 3))
        assert _pages(first) == [("a", [0, 1]), ("b", [0])]
        assert first["next_cursor"] == {"topic_name": "b", "partition_index": 1}
        assert first["topics"][0]["topic_authorized_operations"] == TOPIC_OPERATIONS_BITS
        second = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, _body(["a", "b"], 3, ("b", 1)))
        assert _pages(second) == [("b", [1, 2])]
        assert second["next_cursor"] is None

        exact = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, _body(["a", "b"], 2))
        assert _pages(exact) == [("a", [0, 1])]
        assert exact["next_cursor"] == {"topic_name": "b", "partition_index": 0}


async def test_describe_topic_partitions_of_every_topic_and_of_missing_ones(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic("only", partitions=2)
        every = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, _body([], 2000))
        assert ("only", [0, 1]) in _pages(every)
        named = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, _body(["missing", "only"], 0))
        missing, only = named["topics"]
        assert (missing["name"], missing["error_code"]) == (
            "missing",
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        )
        assert (only["name"], len(only["partitions"])) == ("only", 1)  # a limit of 0 still moves
        assert named["next_cursor"] == {"topic_name": "only", "partition_index": 1}
        stray = await client.request(DESCRIBE_TOPIC_PARTITIONS, 0, _body(["only"], 10, ("z", 0)))
        assert [t["error_code"] for t in stray["topics"]] == [ErrorCode.INVALID_REQUEST]


async def test_describe_configs_of_a_group_lists_the_group_configs_with_their_defaults(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        body = {
            "resources": [
                {
                    "resource_type": GROUP_RESOURCE,
                    "resource_name": "any",
                    "configuration_keys": None,
                },
                {
                    "resource_type": GROUP_RESOURCE,
                    "resource_name": "any",
                    "configuration_keys": ["consumer.heartbeat.interval.ms", "unknown"],
                },
                {"resource_type": GROUP_RESOURCE, "resource_name": "", "configuration_keys": None},
            ],
            "include_synonyms": True,
        }
        every, some, nameless = (await client.request(DESCRIBE_CONFIGS, 3, body))["results"]
        values = {entry["name"]: entry["value"] for entry in every["configs"]}
        assert values["consumer.session.timeout.ms"] == "45000"
        assert values["consumer.heartbeat.interval.ms"] == "5000"
        assert {entry["config_source"] for entry in every["configs"]} == {SOURCE_DEFAULT}
        assert [(e["name"], e["value"]) for e in some["configs"]] == [
            ("consumer.heartbeat.interval.ms", "5000")
        ]
        assert nameless["error_code"] == ErrorCode.INVALID_REQUEST


async def test_a_group_config_is_set_checked_described_and_kept_across_a_restart(
    tmp_path: Path, wire: Any
) -> None:
    def alter(name: str, value: str | None, operation: int = 0) -> dict[str, Any]:
        config = {"name": name, "config_operation": operation, "value": value}
        resource = {"resource_type": GROUP_RESOURCE, "resource_name": "g", "configs": [config]}
        return {"resources": [resource], "validate_only": False}

    describe = {
        "resources": [
            {"resource_type": GROUP_RESOURCE, "resource_name": "g", "configuration_keys": None}
        ],
        "include_synonyms": True,
    }
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        for body in (
            alter("consumer.session.timeout.ms", "30000"),  # below Kafka's minimum
            alter("share.auto.offset.reset", "sometimes"),
            alter("no.such.config", "1"),
            alter("share.auto.offset.reset", "earliest", operation=2),  # not a list
        ):
            (answer,) = (await client.request(INCREMENTAL_ALTER_CONFIGS, 0, body))["responses"]
            assert answer["error_code"] == ErrorCode.INVALID_CONFIG, answer
        (answer,) = (
            await client.request(
                INCREMENTAL_ALTER_CONFIGS, 0, alter("share.auto.offset.reset", "earliest")
            )
        )["responses"]
        assert answer["error_code"] == ErrorCode.NONE
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        (result,) = (await client.request(DESCRIBE_CONFIGS, 3, describe))["results"]
        entries = {entry["name"]: entry for entry in result["configs"]}
        reset = entries["share.auto.offset.reset"]
        assert (reset["value"], reset["config_source"]) == ("earliest", 8)  # GROUP_CONFIG
        assert [s["source"] for s in reset["synonyms"]] == [8, SOURCE_DEFAULT]
        assert entries["consumer.session.timeout.ms"]["config_source"] == SOURCE_DEFAULT
        body = alter("share.auto.offset.reset", None, operation=1)  # DELETE: the default again
        (answer,) = (await client.request(INCREMENTAL_ALTER_CONFIGS, 0, body))["responses"]
        assert answer["error_code"] == ErrorCode.NONE
        (result,) = (await client.request(DESCRIBE_CONFIGS, 3, describe))["results"]
        values = {entry["name"]: entry["value"] for entry in result["configs"]}
        assert values["share.auto.offset.reset"] == "latest"


async def test_describe_log_dirs_reports_the_size_of_each_partition_held(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic("sized", partitions=2)
        appended = await client.produce("sized", wire.batch([b"x" * 100]), partition=1)
        assert appended["error_code"] == ErrorCode.NONE
        body = {
            "topics": [
                {"topic": "sized", "partitions": [1, 7]},
                {"topic": "nope", "partitions": [0]},
            ]
        }
        (result,) = (await client.request(DESCRIBE_LOG_DIRS, 4, body))["results"]
        assert result["error_code"] == ErrorCode.NONE
        assert Path(result["log_dir"]).is_absolute()
        assert result["total_bytes"] >= result["usable_bytes"] > 0
        ((name, sizes),) = [
            (
                topic["name"],
                {p["partition_index"]: p["partition_size"] for p in topic["partitions"]},
            )
            for topic in result["topics"]
        ]
        assert name == "sized" and list(sizes) == [1] and sizes[1] > 100
        every = (await client.request(DESCRIBE_LOG_DIRS, 1, {"topics": None}))["results"][0]
        sized = next(topic for topic in every["topics"] if topic["name"] == "sized")
        assert sorted(p["partition_index"] for p in sized["partitions"]) == [0, 1]
