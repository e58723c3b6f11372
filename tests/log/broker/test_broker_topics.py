"""Topic APIs through the codec: CreateTopics, DeleteTopics, CreatePartitions, and Metadata's
auto-creation; a standalone broker creating a topic's files while it serves others."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import trio
from admin_requests import (
    TOPIC,
    create_topics,
    create_topics_body,
    delete_topics,
    existing_topics,
    new_topic,
    topic_configs,
)

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    FETCH,
    METADATA,
)
from eventplatform.log.replica.topics import TopicRegistry

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
        (
            new_topic(
                "t",
                -1,
                -1,
                assignments=[
                    {"partition_index": 0, "broker_ids": [1]},
                    {"partition_index": 2, "broker_ids": [1]},
                ],
            ),
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ),
        (
            new_topic("t", -1, -1, assignments=[{"partition_index": 0, "broker_ids": []}]),
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
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


SLOW_DISK_WAIT_S = 10.0


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
        body = create_topics_body(new_topic("slow-a", 3))
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
        body = create_topics_body(new_topic("slow-b", 2))
        await first.send(CREATE_TOPICS, 4, body)
        await disk.wait_until_creating()
        await second.send(CREATE_TOPICS, 4, body)
        await trio.sleep(0.1)
        disk.release()
        answers = [(await client.receive())[1]["topics"][0] for client in (first, second)]
        assert [answer["error_code"] for answer in answers] == [0, ErrorCode.TOPIC_ALREADY_EXISTS]
        assert (await existing_topics(first))["slow-b"] == 2


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


async def test_metadata_names_a_recreated_topic_by_its_new_id_and_refuses_the_old_one(
    tmp_path: Path, wire: Any
) -> None:
    """Metadata v10+ carries topic ids (and v12 asks by id alone): a client tells a topic
    deleted and re-created under the same name from the old one only by its id."""
    async with wire.open_broker(tmp_path, auto_create_topics_enable=False) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=6)
        old = (await client.request(METADATA, 12, {"topics": [{"name": TOPIC}]}))["topics"][0]
        await delete_topics(client, TOPIC)
        await client.create_topic(TOPIC, partitions=2)
        new = (await client.request(METADATA, 12, {"topics": [{"name": TOPIC}]}))["topics"][0]
        assert (old["error_code"], len(old["partitions"])) == (0, 6)
        assert (new["error_code"], len(new["partitions"])) == (0, 2)
        assert new["topic_id"] != old["topic_id"]
        assert bytes(16) not in (old["topic_id"], new["topic_id"])

        by_id = {
            "topics": [
                {"topic_id": new["topic_id"], "name": None},
                {"topic_id": old["topic_id"], "name": None},
            ]
        }
        found, gone = (await client.request(METADATA, 12, by_id))["topics"]
        assert (found["error_code"], found["name"], len(found["partitions"])) == (0, TOPIC, 2)
        assert (gone["error_code"], gone["name"]) == (ErrorCode.UNKNOWN_TOPIC_ID, None)
        assert gone["topic_id"] == old["topic_id"]
