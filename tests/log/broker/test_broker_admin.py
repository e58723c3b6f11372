"""Admin and offset APIs through the codec: topics, partitions, configs, records, producer ids."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import trio

from eventplatform.log.broker.topics import TopicRegistry
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import (
    ALTER_CONFIGS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    FETCH,
    INCREMENTAL_ALTER_CONFIGS,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
)
from eventplatform.log.storage import LogConfig

TOPIC = "admin"
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
RETENTION_MS_DEFAULT = str(7 * 24 * 60 * 60 * 1000)
SLOW_DISK_WAIT_S = 10.0


def new_topic(
    name: str,
    partitions: int = 1,
    replication_factor: int = 1,
    configs: dict[str, str | None] | None = None,
    assignments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": replication_factor,
        "assignments": assignments or [],
        "configs": [{"name": key, "value": value} for key, value in (configs or {}).items()],
    }


async def create_topics(
    client: Any, *topics: dict[str, Any], validate_only: bool = False
) -> dict[str, int]:
    body = {"topics": list(topics), "timeout_ms": 1000, "validate_only": validate_only}
    response = await client.request(CREATE_TOPICS, 4, body)
    return {entry["name"]: entry["error_code"] for entry in response["topics"]}


async def existing_topics(client: Any) -> dict[str, int]:
    """Every topic the broker reports, with its partition count."""
    response = await client.metadata(None)
    return {topic["name"]: len(topic["partitions"]) for topic in response["topics"]}


async def describe_topic(
    client: Any, name: str, keys: list[str] | None = None, *, version: int = 3
) -> dict[str, Any]:
    body = {
        "resources": [
            {"resource_type": TOPIC_RESOURCE, "resource_name": name, "configuration_keys": keys}
        ],
        "include_synonyms": True,
    }
    response = await client.request(DESCRIBE_CONFIGS, version, body)
    return response["results"][0]


async def topic_configs(client: Any, name: str) -> dict[str, str | None]:
    result = await describe_topic(client, name)
    assert result["error_code"] == 0, result
    return {entry["name"]: entry["value"] for entry in result["configs"]}


async def incremental_alter(
    client: Any,
    name: str,
    operations: list[tuple[str, int, str | None]],
    *,
    validate_only: bool = False,
    resource_type: int = TOPIC_RESOURCE,
) -> int:
    body = {
        "resources": [
            {
                "resource_type": resource_type,
                "resource_name": name,
                "configs": [
                    {"name": key, "config_operation": operation, "value": value}
                    for key, operation, value in operations
                ],
            }
        ],
        "validate_only": validate_only,
    }
    response = await client.request(INCREMENTAL_ALTER_CONFIGS, 0, body)
    return int(response["responses"][0]["error_code"])


async def delete_topics(client: Any, *names: str) -> dict[str, int]:
    body = {"topic_names": list(names), "timeout_ms": 1000}
    response = await client.request(DELETE_TOPICS, 3, body)
    return {entry["name"]: entry["error_code"] for entry in response["responses"]}


async def list_offset(
    client: Any, timestamp: int, *, partition: int = 0, current_leader_epoch: int = -1
) -> dict[str, Any]:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {
                        "partition_index": partition,
                        "current_leader_epoch": current_leader_epoch,
                        "timestamp": timestamp,
                    }
                ],
            }
        ],
    }
    response = await client.request(LIST_OFFSETS, 5, body)
    return dict(response["topics"][0]["partitions"][0])


# ---------------------------------------------------------------- CreateTopics


async def test_create_topics_creates_partitions_with_their_configs(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        answers = await create_topics(
            client,
            new_topic("a", 3, configs={"retention.ms": "1000"}),
            new_topic("b", -1, replication_factor=-1),
        )
        assert answers == {"a": 0, "b": 0}
        topics = await existing_topics(client)
        assert (topics["a"], topics["b"]) == (3, 1)
        assert (await topic_configs(client, "a"))["retention.ms"] == "1000"
        assert (tmp_path / "a-2").is_dir()
        assert (await client.produce("a", wire.batch([b"x"]), partition=2))["error_code"] == 0


async def test_validate_only_checks_everything_and_creates_nothing(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        answers = await create_topics(
            client,
            new_topic("fine", 2),
            new_topic("bad config", 1),
            new_topic("bad-retention", 1, configs={"retention.ms": "soon"}),
            validate_only=True,
        )
        assert answers == {
            "fine": 0,
            "bad config": ErrorCode.INVALID_TOPIC_EXCEPTION,
            "bad-retention": ErrorCode.INVALID_CONFIG,
        }
        topics = await existing_topics(client)
        assert "fine" not in topics
        assert not (tmp_path / "fine-0").exists()


@pytest.mark.parametrize("name", ["", ".", "..", "with space", "slash/name", "ünï", "x" * 250])
async def test_illegal_topic_names_are_refused(tmp_path: Path, wire: Any, name: str) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert await create_topics(client, new_topic(name)) == {
            name: ErrorCode.INVALID_TOPIC_EXCEPTION
        }
        assert name not in await existing_topics(client)


async def test_the_longest_legal_name_is_accepted(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        name = "n" * 249
        assert await create_topics(client, new_topic(name)) == {name: 0}


async def test_duplicates_and_existing_topics(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic("exists")
        body = {
            "topics": [new_topic("twice"), new_topic("twice", 2), new_topic("exists")],
            "timeout_ms": 1000,
        }
        response = await client.request(CREATE_TOPICS, 4, body)
        errors = [(entry["name"], entry["error_code"]) for entry in response["topics"]]
        assert errors == [
            ("twice", ErrorCode.INVALID_REQUEST),
            ("twice", ErrorCode.INVALID_REQUEST),
            ("exists", ErrorCode.TOPIC_ALREADY_EXISTS),
        ]
        assert "twice" not in await existing_topics(client)


@pytest.mark.parametrize(
    ("topic", "error"),
    [
        (new_topic("t", configs={"retention.ms": "-5"}), ErrorCode.INVALID_CONFIG),
        (new_topic("t", configs={"no.such.config": "1"}), ErrorCode.INVALID_CONFIG),
        (new_topic("t", configs={"cleanup.policy": "shred"}), ErrorCode.INVALID_CONFIG),
        (new_topic("t", configs={"retention.ms": None}), ErrorCode.INVALID_CONFIG),
        (new_topic("t", replication_factor=3), ErrorCode.INVALID_REPLICATION_FACTOR),
        (new_topic("t", replication_factor=0), ErrorCode.INVALID_REPLICATION_FACTOR),
        (new_topic("t", 0), ErrorCode.INVALID_PARTITIONS),
        (new_topic("t", 10_001), ErrorCode.INVALID_PARTITIONS),
        (
            new_topic("t", -1, -1, assignments=[{"partition_index": 0, "broker_ids": [2]}]),
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ),
        (
            new_topic("t", -1, -1, assignments=[{"partition_index": 0, "broker_ids": [1, 1]}]),
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ),
        (
            new_topic("t", 2, 1, assignments=[{"partition_index": 0, "broker_ids": [1]}]),
            ErrorCode.INVALID_REQUEST,
        ),
    ],
)
async def test_bad_topic_settings_are_refused(
    tmp_path: Path, wire: Any, topic: dict[str, Any], error: ErrorCode
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert await create_topics(client, topic) == {"t": error}
        assert "t" not in await existing_topics(client)


async def test_assignments_to_this_node_set_the_partition_count(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assignments = [{"partition_index": index, "broker_ids": [1]} for index in range(4)]
        topic = new_topic("assigned", -1, -1, assignments=assignments)
        assert await create_topics(client, topic) == {"assigned": 0}
        assert (await existing_topics(client))["assigned"] == 4


# ---------------------------------------------------------------- DeleteTopics


async def test_a_deleted_topic_is_gone_from_every_api_and_from_disk(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path, auto_create_topics_enable=False) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=2)
        assert (await client.produce(TOPIC, wire.batch([b"a"])))["error_code"] == 0
        assert await delete_topics(client, TOPIC, "never-was") == {
            TOPIC: 0,
            "never-was": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        fetched = await client.fetch(TOPIC, 0)
        assert fetched["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        produced = await client.produce(TOPIC, wire.batch([b"b"]))
        assert produced["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        metadata = await client.metadata([TOPIC])
        assert metadata["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert not [path for path in tmp_path.iterdir() if path.name.startswith(TOPIC)]
        await client.create_topic(TOPIC)
        assert (await client.fetch(TOPIC, 0))["high_watermark"] == 0
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert (await existing_topics(client))[TOPIC] == 1


async def test_internal_topics_and_disabled_deletion_are_refused(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert "__consumer_offsets" in await existing_topics(client)
        assert await delete_topics(client, "__consumer_offsets") == {
            "__consumer_offsets": ErrorCode.INVALID_TOPIC_EXCEPTION
        }
    async with wire.open_broker(tmp_path, delete_topic_enable=False) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        assert await delete_topics(client, TOPIC) == {TOPIC: ErrorCode.TOPIC_DELETION_DISABLED}
        assert TOPIC in await existing_topics(client)


async def test_fetch_answers_in_flight_during_deletion_deliver_the_right_bytes(
    tmp_path: Path, wire: Any
) -> None:
    """Answers bigger than the socket buffers are still being sent while the files go."""
    async with wire.open_broker(tmp_path) as running:
        reader = await running.connect(receive_buffer_bytes=64 * 1024)
        admin = await running.connect()
        await admin.create_topic(TOPIC)
        values = [bytes([index]) * 900_000 for index in range(12)]
        for value in values:
            assert (await admin.produce(TOPIC, wire.batch([value])))["error_code"] == 0
        body = wire.fetch_body({TOPIC: [(0, 0)]}, partition_max_bytes=32 << 20)
        for _ in range(3):
            await reader.send(FETCH, 11, body)
        await trio.sleep(0.2)
        assert await delete_topics(admin, TOPIC) == {TOPIC: 0}
        assert not (tmp_path / f"{TOPIC}-0").exists()
        with trio.fail_after(30):
            for _ in range(3):
                _, response = await reader.receive()
                records = wire.records_of(response["responses"][0]["partitions"][0]["records"])
                assert [record.value for record in records] == values
        after = await reader.fetch(TOPIC, 0)
        assert after["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_fetches_racing_deletions_get_data_or_unknown_topic_never_a_dropped_connection(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        reader = await running.connect()
        admin = await running.connect()
        outcomes = set()
        for index in range(40):
            name = f"race-{index}"
            value = b"value-%d" % index
            await admin.create_topic(name)
            assert (await admin.produce(name, wire.batch([value])))["error_code"] == 0
            with trio.fail_after(10):
                await reader.send(FETCH, 11, wire.fetch_body({name: [(0, 0)]}))
                await admin.send(DELETE_TOPICS, 3, {"topic_names": [name], "timeout_ms": 1000})
                _, response = await reader.receive()
                await admin.receive()
            answer = response["responses"][0]["partitions"][0]
            values = [record.value for record in wire.records_of(answer["records"])]
            assert (answer["error_code"], values) in ((0, [value]), (3, [])), answer
            outcomes.add(answer["error_code"])
        assert 0 in outcomes


# ---------------------------------------------------------------- CreatePartitions


async def test_create_partitions_grows_a_topic(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC)
        await client.create_topic("other", partitions=2)

        async def grow(*topics: dict[str, Any], validate_only: bool = False) -> list[Any]:
            body = {"topics": list(topics), "timeout_ms": 1000, "validate_only": validate_only}
            response = await client.request(CREATE_PARTITIONS, 1, body)
            return [(entry["name"], entry["error_code"]) for entry in response["results"]]

        assert await grow({"name": TOPIC, "count": 3, "assignments": None}, validate_only=True) == [
            (TOPIC, 0)
        ]
        assert (await existing_topics(client))[TOPIC] == 1
        assert await grow({"name": TOPIC, "count": 3, "assignments": None}) == [(TOPIC, 0)]
        assert (await existing_topics(client))[TOPIC] == 3
        assert (await client.produce(TOPIC, wire.batch([b"x"]), partition=2))["error_code"] == 0
        assert await grow(
            {"name": "other", "count": 2, "assignments": None},
            {"name": "missing", "count": 4, "assignments": None},
            {"name": TOPIC, "count": 5, "assignments": [{"broker_ids": [2]}] * 2},
        ) == [
            ("other", ErrorCode.INVALID_PARTITIONS),
            ("missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            (TOPIC, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ]
        assert (
            await grow(
                {"name": "other", "count": 3, "assignments": None},
                {"name": "other", "count": 4, "assignments": None},
            )
            == [("other", ErrorCode.INVALID_REQUEST)] * 2
        )
        assert (await existing_topics(client))["other"] == 2
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        assert (await existing_topics(client))[TOPIC] == 3


class SlowDisk:
    """Creating a partition of a topic named ``slow-*`` waits until :meth:`release`, in
    whichever thread creates it, as a busy disk makes file creation wait."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.released = threading.Event()
        self.waiting = threading.Event()
        open_partition = TopicRegistry._open_partition

        def slow_open(registry: TopicRegistry, topic: str, index: int, config: Any) -> Any:
            if topic.startswith("slow-"):
                self.waiting.set()
                self.released.wait(SLOW_DISK_WAIT_S)
            return open_partition(registry, topic, index, config)

        monkeypatch.setattr(TopicRegistry, "_open_partition", slow_open)

    async def wait_until_creating(self) -> None:
        with trio.fail_after(SLOW_DISK_WAIT_S):
            while not self.waiting.is_set():
                await trio.sleep(0.01)

    def release(self) -> None:
        self.released.set()


async def test_the_broker_answers_others_while_a_topics_files_are_created(
    tmp_path: Path, wire: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = SlowDisk(monkeypatch)
    async with wire.open_broker(tmp_path) as running:
        creator, other = await running.connect(), await running.connect()
        body = {"topics": [new_topic("slow-a", 3)], "timeout_ms": 1000, "validate_only": False}
        await creator.send(CREATE_TOPICS, 4, body)
        await disk.wait_until_creating()
        with trio.fail_after(SLOW_DISK_WAIT_S / 2):
            topics = await existing_topics(other)
            grown = await other.request(
                CREATE_PARTITIONS,
                1,
                {"topics": [{"name": "slow-a", "count": 4, "assignments": None}],
                 "timeout_ms": 1000, "validate_only": False},
            )  # fmt: skip
        assert "slow-a" not in topics, "the topic was listed before its files existed"
        assert grown["results"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        disk.release()
        _, answer = await creator.receive()
        assert answer["topics"][0]["error_code"] == 0
        assert (await existing_topics(other))["slow-a"] == 3
        assert (await other.produce("slow-a", wire.batch([b"x"]), partition=2))["error_code"] == 0


async def test_a_topic_created_by_two_clients_at_once_is_created_once(
    tmp_path: Path, wire: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = SlowDisk(monkeypatch)
    async with wire.open_broker(tmp_path) as running:
        first, second = await running.connect(), await running.connect()
        body = {"topics": [new_topic("slow-b", 2)], "timeout_ms": 1000, "validate_only": False}
        await first.send(CREATE_TOPICS, 4, body)
        await disk.wait_until_creating()
        await second.send(CREATE_TOPICS, 4, body)
        await trio.sleep(0.1)
        disk.release()
        answers = [(await client.receive())[1]["topics"][0] for client in (first, second)]
        assert [answer["error_code"] for answer in answers] == [0, ErrorCode.TOPIC_ALREADY_EXISTS]
        assert (await existing_topics(first))["slow-b"] == 2


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


async def test_transactional_ids_are_refused(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        body = {"transactional_id": "tx", "transaction_timeout_ms": 1000}
        response = await client.request(INIT_PRODUCER_ID, 1, body)
        assert response["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert response["producer_id"] == -1


# ---------------------------------------------------------------- Metadata


async def test_metadata_creates_topics_when_auto_creation_is_on(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path, num_partitions=3) as running:
        client = await running.connect()
        answer = await client.metadata(["auto"])
        topic = answer["topics"][0]
        assert (topic["error_code"], topic["name"], len(topic["partitions"])) == (0, "auto", 3)
        assert [broker["port"] for broker in answer["brokers"]] == [running.port]
        assert all(partition["leader_id"] == 1 for partition in topic["partitions"])
        body = {"topics": [{"name": "not-asked"}], "allow_auto_topic_creation": False}
        refused = await client.request(METADATA, 8, body)
        assert refused["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # Before v4 there is no flag and creation is always allowed.
        old = await client.request(METADATA, 1, {"topics": [{"name": "old-client"}]})
        assert old["topics"][0]["error_code"] == 0
        invalid = await client.metadata(["bad name"])
        assert invalid["topics"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        topics = await existing_topics(client)
        assert {"auto", "old-client"} <= set(topics)
        assert not {"not-asked", "bad name"} & set(topics)


async def test_metadata_does_not_create_topics_when_auto_creation_is_off(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path, auto_create_topics_enable=False) as running:
        client = await running.connect()
        answer = await client.metadata(["auto"])
        assert answer["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "auto" not in await existing_topics(client)
        assert not (tmp_path / "auto-0").exists()
