"""Share groups (KIP-932) over the wire on one broker: members join and are assigned,
records are acquired by one member at a time, acknowledged, released and delivered again,
sessions keep their epochs, and what a group settled outlives a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import (
    DELETE_GROUPS,
    DELETE_TOPICS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_GROUPS,
    METADATA,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    SHARE_GROUP_DESCRIBE,
    SHARE_GROUP_HEARTBEAT,
)
from eventplatform.log.storage.record_batch import split_batches

GROUP = "workers"
TOPIC = "jobs"
ACCEPT, RELEASE, REJECT = 1, 2, 3


async def topic_id(client: Any, name: str) -> bytes:
    answer = await client.request(
        METADATA, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False}
    )
    return bytes(answer["topics"][0]["topic_id"])


async def earliest(client: Any) -> None:
    config = {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}
    body = {
        "resources": [{"resource_type": 32, "resource_name": GROUP, "configs": [config]}],
        "validate_only": False,
    }
    (answer,) = (await client.request(INCREMENTAL_ALTER_CONFIGS, 0, body))["responses"]
    assert answer["error_code"] == ErrorCode.NONE


async def join(client: Any, member: str) -> dict[str, Any]:
    body = {
        "group_id": GROUP,
        "member_id": member,
        "member_epoch": 0,
        "subscribed_topic_names": [TOPIC],
    }
    answer = await client.request(SHARE_GROUP_HEARTBEAT, 1, body)
    assert answer["error_code"] == ErrorCode.NONE, answer
    return answer


async def share_fetch(
    client: Any,
    member: str,
    epoch: int,
    partitions: dict[bytes, list[int]] | None = None,
    acks: dict[int, list[tuple[int, int, int]]] | None = None,
    tid: bytes = b"",
    wait_ms: int = 2_000,
) -> dict[str, Any]:
    topics = []
    wanted = set((partitions or {}).get(tid, [])) | set(acks or {})
    if wanted:
        topics.append(
            {
                "topic_id": tid,
                "partitions": [
                    {
                        "partition_index": index,
                        "acknowledgement_batches": [
                            {"first_offset": f, "last_offset": last, "acknowledge_types": [kind]}
                            for f, last, kind in (acks or {}).get(index, [])
                        ],
                    }
                    for index in sorted(wanted)
                ],
            }
        )
    body = {
        "group_id": GROUP,
        "member_id": member,
        "share_session_epoch": epoch,
        "max_wait_ms": wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "max_records": 500,
        "batch_size": 500,
        "topics": topics,
        "forgotten_topics_data": [],
    }
    return await client.request(SHARE_FETCH, 1, body)


def acknowledge_body(tid: bytes, epoch: int, acks: list[tuple[int, int, int]]) -> dict[str, Any]:
    batches = [
        {"first_offset": first, "last_offset": last, "acknowledge_types": [kind]}
        for first, last, kind in acks
    ]
    return {
        "group_id": GROUP,
        "member_id": "m1",
        "share_session_epoch": epoch,
        "topics": [
            {
                "topic_id": tid,
                "partitions": [{"partition_index": 0, "acknowledgement_batches": batches}],
            }
        ],
    }


def acquired(answer: dict[str, Any]) -> dict[int, list[tuple[int, int, int]]]:
    assert answer["error_code"] == ErrorCode.NONE, answer
    out = {}
    for topic in answer["responses"]:
        for part in topic["partitions"]:
            assert part["error_code"] == ErrorCode.NONE, part
            runs = [
                (r["first_offset"], r["last_offset"], r["delivery_count"])
                for r in part["acquired_records"]
            ]
            if runs:
                out[part["partition_index"]] = runs
                assert split_batches(bytes(part["records"]), check_crc=True)
    return out


async def test_records_are_shared_acknowledged_and_delivered_again_when_released(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client, other = await running.connect(), await running.connect()
        await client.create_topic(TOPIC, partitions=1)
        await earliest(client)
        for value in (b"a", b"b", b"c"):
            await client.produce(TOPIC, wire.batch([value]))
        tid = await topic_id(client, TOPIC)
        first = await join(client, "m1")
        assert first["assignment"]["topic_partitions"] == [{"topic_id": tid, "partitions": [0]}]
        await join(other, "m2")

        got = acquired(await share_fetch(client, "m1", 0, {tid: [0]}, tid=tid))
        assert got == {0: [(0, 2, 1)]}
        # m2 finds nothing to acquire: its fetch waits, then comes back empty
        nothing = await share_fetch(other, "m2", 0, {tid: [0]}, tid=tid, wait_ms=200)
        assert acquired(nothing) == {}

        acks = [(0, 0, ACCEPT), (1, 1, RELEASE), (2, 2, REJECT)]
        settled = await client.request(SHARE_ACKNOWLEDGE, 1, acknowledge_body(tid, 1, acks))
        assert settled["responses"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        again = acquired(await share_fetch(other, "m2", 1, {tid: [0]}, tid=tid))
        assert again == {0: [(1, 1, 2)]}  # the released one, delivered a second time

        # an acknowledgement of a record m1 no longer holds changes nothing
        body = acknowledge_body(tid, 2, [(1, 1, ACCEPT)])
        refused = await client.request(SHARE_ACKNOWLEDGE, 1, body)
        assert refused["responses"][0]["partitions"][0]["error_code"] == (
            ErrorCode.INVALID_RECORD_STATE
        )
        stale = await client.request(SHARE_ACKNOWLEDGE, 1, body)  # epoch 2 again
        assert stale["error_code"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH

        described = await client.request(
            SHARE_GROUP_DESCRIBE, 1, {"group_ids": [GROUP], "include_authorized_operations": False}
        )
        (group,) = described["groups"]
        assert group["group_state"] == "Stable"
        assert sorted(m["member_id"] for m in group["members"]) == ["m1", "m2"]


async def test_a_closed_connection_releases_what_its_member_held(tmp_path: Path, wire: Any) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=1)
        await earliest(client)
        await client.produce(TOPIC, wire.batch([b"a", b"b"]))
        tid = await topic_id(client, TOPIC)
        await join(client, "m1")
        leaving = await running.connect()
        assert acquired(await share_fetch(leaving, "m1", 0, {tid: [0]}, tid=tid)) == {
            0: [(0, 1, 1)]
        }
        await leaving.aclose()
        await join(client, "m2")
        got = acquired(await share_fetch(client, "m2", 0, {tid: [0]}, tid=tid))
        assert got == {0: [(0, 1, 2)]}


async def test_what_a_group_settled_and_where_it_started_outlive_a_restart(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=1)
        await client.produce(TOPIC, wire.batch([b"old"]))
        tid = await topic_id(client, TOPIC)
        await join(client, "m1")
        # latest, the default: the group starts after what was there when it first read
        assert acquired(await share_fetch(client, "m1", 0, {tid: [0]}, tid=tid, wait_ms=0)) == {}
        await client.produce(TOPIC, wire.batch([b"new", b"newer"]))
        got = acquired(await share_fetch(client, "m1", 1, {tid: [0]}, tid=tid))
        assert got == {0: [(1, 2, 1)]}
        answer = await share_fetch(client, "m1", 2, acks={0: [(1, 1, ACCEPT)]}, tid=tid, wait_ms=0)
        assert answer["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await join(client, "m1")
        # offset 1 was accepted; 2 was held when the broker stopped: delivered again
        got = acquired(await share_fetch(client, "m1", 0, {tid: [0]}, tid=tid))
        assert got == {0: [(2, 2, 2)]}


async def test_share_groups_are_listed_by_type_and_deleted_with_their_state(
    tmp_path: Path, wire: Any
) -> None:
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=1)
        await client.produce(TOPIC, wire.batch([b"a"]))
        tid = await topic_id(client, TOPIC)
        await join(client, "m1")
        await share_fetch(client, "m1", 0, {tid: [0]}, tid=tid, wait_ms=0)
        listed = await client.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
        assert [(g["group_id"], g["group_type"], g["group_state"]) for g in listed["groups"]] == [
            (GROUP, "share", "Stable")
        ]
        classic = await client.request(
            LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["classic"]}
        )
        assert classic["groups"] == []
        busy = await client.request(DELETE_GROUPS, 1, {"groups_names": [GROUP]})
        assert busy["results"][0]["error_code"] == ErrorCode.NON_EMPTY_GROUP
        left = await client.request(
            SHARE_GROUP_HEARTBEAT,
            1,
            {"group_id": GROUP, "member_id": "m1", "member_epoch": -1},
        )
        assert left["member_epoch"] == -1
        deleted = await client.request(DELETE_GROUPS, 1, {"groups_names": [GROUP]})
        assert deleted["results"][0]["error_code"] == ErrorCode.NONE
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        listed = await client.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
        assert listed["groups"] == []  # its state went with it: not loaded again


async def test_a_topic_made_again_under_its_name_is_read_afresh(tmp_path: Path, wire: Any) -> None:
    """Regression: the leader kept the deleted topic's share state (delivery counts,
    the settled prefix) for the new topic of the same name."""
    async with wire.open_broker(tmp_path) as running:
        client = await running.connect()
        await client.create_topic(TOPIC, partitions=1)
        await earliest(client)
        await client.produce(TOPIC, wire.batch([b"a", b"b"]))
        old = await topic_id(client, TOPIC)
        await join(client, "m1")
        assert acquired(await share_fetch(client, "m1", 0, {old: [0]}, tid=old)) == {0: [(0, 1, 1)]}
        deleted = await client.request(
            DELETE_TOPICS, 3, {"topic_names": [TOPIC], "timeout_ms": 10_000}
        )
        assert deleted["responses"][0]["error_code"] == ErrorCode.NONE
        await client.create_topic(TOPIC, partitions=1)
        await client.produce(TOPIC, wire.batch([b"x"]))
        new = await topic_id(client, TOPIC)
        assert new != old
        got = acquired(await share_fetch(client, "m1", 0, {new: [0]}, tid=new))
        assert got == {0: [(0, 0, 1)]}
