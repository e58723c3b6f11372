"""The group APIs on the wire: every advertised version, encoded and decoded by the codec.

Requests are encoded as a client would send them, decoded by the broker's
codec, handled, and the answers encoded and decoded again, so a field a
version lacks or a wrong type fails here before any client sees it.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

from eventplatform.log.broker.broker import Broker
from eventplatform.log.broker.context import RequestContext
from eventplatform.log.broker.dispatcher import HANDLER_MODULES, build_handlers
from eventplatform.log.broker.handlers import (
    delete_groups,
    delete_topics,
    describe_groups,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    produce,
    sync_group,
    txn_offset_commit,
)
from eventplatform.log.config import BrokerConfig
from eventplatform.log.groups.coordinator import GroupCoordinator
from eventplatform.log.protocol import (
    ErrorCode,
    decode_request_body,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    flatten,
)
from eventplatform.log.security.listeners import SecurityProtocol
from eventplatform.log.security.session import Session
from eventplatform.log.storage import Record
from eventplatform.log.storage.record_batch import encode_batch
from eventplatform.log.transactions.coordinator import TransactionCoordinator

GROUP_MODULES = [
    find_coordinator,
    join_group,
    sync_group,
    heartbeat,
    leave_group,
    offset_commit,
    offset_fetch,
    describe_groups,
    list_groups,
    delete_groups,
    offset_delete,
]
ADVERTISED = {
    8: (2, 7),
    9: (1, 7),
    10: (0, 2),
    11: (0, 5),
    12: (0, 3),
    13: (0, 3),
    14: (0, 3),
    15: (0, 4),
    16: (0, 5),
    42: (0, 1),
    47: (0, 0),
}
_correlation = itertools.count(1)


@pytest.fixture
async def broker(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Broker]:
    config = BrokerConfig(
        data_dir=tmp_path / "data",
        group_initial_rebalance_delay_ms=0,
        offsets_topic_num_partitions=3,
        transaction_state_log_num_partitions=3,
    )
    opened = Broker.open(config)
    opened.topics.create("events", 2, {})
    opened.groups = GroupCoordinator(opened.config, opened.topics, opened.clock_ms)
    opened.groups.offsets_topic.ensure_created()  # what a broker on its own does at start
    await nursery.start(opened.groups.run)
    await opened.groups.wait_loaded()
    opened.transactions = TransactionCoordinator(opened.config, opened.topics, opened.clock_ms)
    await nursery.start(opened.transactions.run)
    yield opened
    opened.groups.close()
    opened.close()


PLAINTEXT_SESSION = Session.open("PLAINTEXT", SecurityProtocol.PLAINTEXT, None)


async def call(broker: Broker, module: ModuleType, version: int, body: dict[str, Any]) -> Any:
    """Send ``body`` as ``module``'s request at ``version``; the decoded answer."""
    api = module.API
    correlation_id = next(_correlation)
    frame = encode_request(api, version, body, correlation_id=correlation_id, client_id="tester")
    header, position = decode_request_header(frame[4:])
    request = decode_request_body(api, version, frame[4:], position)
    context = RequestContext(broker, header, "127.0.0.1", 1, PLAINTEXT_SESSION)
    with trio.fail_after(60):
        answer = await module.handle(context, request)
    encoded = flatten(encode_response(api, version, correlation_id, answer))
    answered_id, decoded = decode_response(api, version, encoded)
    assert answered_id == correlation_id
    return decoded


def test_the_dispatcher_serves_the_group_apis_at_the_advertised_versions() -> None:
    handlers = build_handlers(HANDLER_MODULES)
    for key, (low, high) in ADVERTISED.items():
        assert (handlers[key].versions.low, handlers[key].versions.high) == (low, high)


async def test_find_coordinator_names_this_broker_for_groups_and_transactions(
    broker: Broker,
) -> None:
    for version in range(3):
        answer = await call(broker, find_coordinator, version, {"key": "group", "key_type": 0})
        assert answer["error_code"] == ErrorCode.NONE
        assert (answer["node_id"], answer["host"], answer["port"]) == (
            broker.node_id,
            broker.advertised_host,
            broker.port,
        )
    transactions = await call(broker, find_coordinator, 1, {"key": "tx", "key_type": 1})
    assert transactions["error_code"] == ErrorCode.NONE
    unknown = await call(broker, find_coordinator, 2, {"key": "x", "key_type": 7})
    assert unknown["error_code"] == ErrorCode.INVALID_REQUEST and unknown["node_id"] == -1


@pytest.mark.parametrize("join_version", range(6))
async def test_a_member_joins_syncs_commits_and_leaves_at_every_version(
    broker: Broker, join_version: int
) -> None:
    group = f"group-v{join_version}"
    small = min(join_version, 3)
    join_body = {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 20_000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"subscription"}],
    }
    joined = await call(broker, join_group, join_version, join_body)
    if join_version >= 4:
        assert joined["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        join_body["member_id"] = joined["member_id"]
        joined = await call(broker, join_group, join_version, join_body)
    assert joined["error_code"] == ErrorCode.NONE
    member_id = joined["member_id"]
    assert member_id.startswith("tester-")
    assert joined["leader"] == member_id and joined["protocol_name"] == "range"
    assert joined["members"][0]["metadata"] == b"subscription"
    generation = joined["generation_id"]

    identity = {"group_id": group, "generation_id": generation, "member_id": member_id}
    assignment = [{"member_id": member_id, "assignment": b"partitions"}]
    synced = await call(broker, sync_group, small, {**identity, "assignments": assignment})
    assert (synced["error_code"], synced["assignment"]) == (ErrorCode.NONE, b"partitions")
    beat = await call(broker, heartbeat, small, identity)
    assert beat["error_code"] == ErrorCode.NONE

    commit_version = 2 + join_version
    commit = {
        "group_id": group,
        "generation_id_or_member_epoch": generation,
        "member_id": member_id,
        "topics": [
            {
                "name": "events",
                "partitions": [
                    {"partition_index": 1, "committed_offset": 17, "committed_metadata": "m"},
                    {"partition_index": 9, "committed_offset": 1, "committed_metadata": None},
                ],
            }
        ],
    }
    committed = await call(broker, offset_commit, commit_version, commit)
    errors = [p["error_code"] for p in committed["topics"][0]["partitions"]]
    assert errors == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]

    fetch_version = 1 + min(join_version, 4)
    fetched = await call(
        broker,
        offset_fetch,
        fetch_version,
        {"group_id": group, "topics": [{"name": "events", "partition_indexes": [0, 1]}]},
    )
    partitions = fetched["topics"][0]["partitions"]
    assert [(p["partition_index"], p["committed_offset"], p["metadata"]) for p in partitions] == [
        (0, -1, ""),
        (1, 17, "m"),
    ]

    described = await call(
        broker, describe_groups, min(join_version, 4), {"groups": [group, "nobody"]}
    )
    stable, missing = described["groups"]
    assert (stable["group_state"], stable["protocol_data"]) == ("Stable", "range")
    assert stable["members"][0]["member_assignment"] == b"partitions"
    assert stable["members"][0]["client_host"] == "/127.0.0.1"
    assert (missing["error_code"], missing["group_state"]) == (ErrorCode.NONE, "Dead")
    listed = await call(broker, list_groups, min(join_version, 2), {})
    assert {"group_id": group, "protocol_type": "consumer"} in [
        {key: entry[key] for key in ("group_id", "protocol_type")} for entry in listed["groups"]
    ]

    if small >= 3:
        leave = {"group_id": group, "members": [{"member_id": member_id}]}
    else:
        leave = {"group_id": group, "member_id": member_id}
    left = await call(broker, leave_group, small, leave)
    assert left["error_code"] == ErrorCode.NONE
    deleted = await call(
        broker, delete_groups, min(join_version, 1), {"groups_names": [group, "nobody"]}
    )
    assert [(r["group_id"], r["error_code"]) for r in deleted["results"]] == [
        (group, ErrorCode.NONE),
        ("nobody", ErrorCode.GROUP_ID_NOT_FOUND),
    ]


async def test_leave_group_errors_are_top_level_before_v3_and_per_member_from_v3(
    broker: Broker,
) -> None:
    old = await call(broker, leave_group, 1, {"group_id": "g", "member_id": "stranger"})
    assert old["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    batch = await call(
        broker,
        leave_group,
        3,
        {"group_id": "g", "members": [{"member_id": "stranger"}, {"member_id": "other"}]},
    )
    assert batch["error_code"] == ErrorCode.NONE
    assert [m["error_code"] for m in batch["members"]] == [ErrorCode.UNKNOWN_MEMBER_ID] * 2


async def test_offset_fetch_with_null_topics_returns_every_committed_offset(
    broker: Broker,
) -> None:
    commit = {
        "group_id": "simple",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                "name": "events",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 3, "committed_metadata": ""},
                    {"partition_index": 1, "committed_offset": 4, "committed_metadata": ""},
                ],
            }
        ],
    }
    await call(broker, offset_commit, 2, commit)
    fetched = await call(broker, offset_fetch, 2, {"group_id": "simple", "topics": None})
    assert fetched["error_code"] == ErrorCode.NONE
    assert [
        (p["partition_index"], p["committed_offset"]) for p in fetched["topics"][0]["partitions"]
    ] == [(0, 3), (1, 4)]


async def test_deleting_a_topic_removes_its_committed_offsets(broker: Broker) -> None:
    commit = {
        "group_id": "simple",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": [
            {
                "name": "events",
                "partitions": [
                    {"partition_index": 0, "committed_offset": 3, "committed_metadata": ""}
                ],
            }
        ],
    }
    await call(broker, offset_commit, 2, commit)
    deleted = await call(broker, delete_topics, 3, {"topic_names": ["events"], "timeout_ms": 1000})
    assert deleted["responses"][0]["error_code"] == ErrorCode.NONE
    fetched = await call(broker, offset_fetch, 2, {"group_id": "simple", "topics": None})
    assert fetched["topics"] == []


async def test_clients_may_not_write_to_the_offsets_topic(broker: Broker) -> None:
    record = Record(0, 1_700_000_000_000, b"key", b"value", ())
    body = {
        "acks": 1,
        "timeout_ms": 1000,
        "topic_data": [
            {
                "name": "__consumer_offsets",
                "partition_data": [{"index": 0, "records": encode_batch([record], base_offset=0)}],
            }
        ],
    }
    answer = await call(broker, produce, 8, body)
    partition = answer["responses"][0]["partition_responses"][0]
    assert partition["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert broker.topics.partition("__consumer_offsets", 0).log.log_end_offset == 0


@pytest.mark.parametrize("module", GROUP_MODULES, ids=lambda module: module.__name__.split(".")[-1])
async def test_every_group_api_answers_coordinator_not_available_without_a_coordinator(
    tmp_path: Path, module: ModuleType
) -> None:
    broker = Broker.open(BrokerConfig(data_dir=tmp_path / "data"))
    broker.topics.create("events", 1, {})
    try:
        version = module.VERSIONS.high
        bodies: dict[ModuleType, dict[str, Any]] = {
            find_coordinator: {"key": "g", "key_type": 0},
            join_group: {"group_id": "g", "session_timeout_ms": 10_000, "protocols": []},
            sync_group: {"group_id": "g", "member_id": "m"},
            heartbeat: {"group_id": "g", "member_id": "m"},
            leave_group: {"group_id": "g", "members": [{"member_id": "m"}]},
            offset_commit: {
                "group_id": "g",
                "member_id": "",
                "topics": [
                    {
                        "name": "events",
                        "partitions": [{"partition_index": 0, "committed_metadata": ""}],
                    }
                ],
            },
            offset_fetch: {"group_id": "g", "topics": None},
            describe_groups: {"groups": ["g"]},
            list_groups: {},
            delete_groups: {"groups_names": ["g"]},
            offset_delete: {
                "group_id": "g",
                "topics": [{"name": "events", "partitions": [{"partition_index": 0}]}],
            },
        }
        answer = await call(broker, module, version, bodies[module])
        errors = _error_codes(answer)
        assert errors and set(errors) == {ErrorCode.COORDINATOR_NOT_AVAILABLE}
    finally:
        broker.close()


def _error_codes(value: Any) -> list[int]:
    if isinstance(value, dict):
        found = [value["error_code"]] if value.get("error_code") else []
        for item in value.values():
            if isinstance(item, list):
                for entry in item:
                    found.extend(_error_codes(entry))
        return found
    return []


# ---------------------------------------------------------------- OffsetDelete, ListGroups v4/v5


def _subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topic names, null user data."""
    parts = [struct.pack(">hi", 0, len(topics))]
    parts += [struct.pack(">h", len(topic)) + topic.encode() for topic in topics]
    return b"".join(parts) + struct.pack(">i", -1)


async def _stable_member(broker: Broker, group: str, protocol_type: str, metadata: bytes) -> Any:
    """One member joined and synced: the group is Stable; its identity for commits."""
    body = {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 20_000,
        "member_id": "",
        "protocol_type": protocol_type,
        "protocols": [{"name": "range", "metadata": metadata}],
    }
    joined = await call(broker, join_group, 3, body)
    assert joined["error_code"] == ErrorCode.NONE
    identity = {
        "group_id": group,
        "generation_id": joined["generation_id"],
        "member_id": joined["member_id"],
    }
    assignment = [{"member_id": joined["member_id"], "assignment": b""}]
    synced = await call(broker, sync_group, 3, {**identity, "assignments": assignment})
    assert synced["error_code"] == ErrorCode.NONE
    return identity


async def _commit(
    broker: Broker, group: str, offsets: dict[tuple[str, int], int], **who: Any
) -> None:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), offset in offsets.items():
        topics.setdefault(topic, []).append(
            {"partition_index": index, "committed_offset": offset, "committed_metadata": ""}
        )
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": who.get("generation_id", -1),
        "member_id": who.get("member_id", ""),
        "topics": [{"name": name, "partitions": entries} for name, entries in topics.items()],
    }
    committed = await call(broker, offset_commit, 7, body)
    codes = [p["error_code"] for t in committed["topics"] for p in t["partitions"]]
    assert set(codes) == {ErrorCode.NONE}


async def _committed(broker: Broker, group: str, topic: str, indexes: list[int]) -> list[int]:
    body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": indexes}]}
    fetched = await call(broker, offset_fetch, 5, body)
    return [p["committed_offset"] for p in fetched["topics"][0]["partitions"]]


def _delete_body(group: str, partitions: dict[str, list[int]]) -> dict[str, Any]:
    return {
        "group_id": group,
        "topics": [
            {"name": name, "partitions": [{"partition_index": index} for index in indexes]}
            for name, indexes in partitions.items()
        ],
    }


def _answers(answer: Any) -> dict[tuple[str, int], int]:
    return {
        (topic["name"], p["partition_index"]): p["error_code"]
        for topic in answer["topics"]
        for p in topic["partitions"]
    }


async def test_offset_delete_removes_an_empty_groups_offsets_and_names_unknown_partitions(
    broker: Broker,
) -> None:
    await _commit(broker, "empty", {("events", 0): 5, ("events", 1): 7})
    body = _delete_body("empty", {"events": [0, 9], "nowhere": [0]})
    answer = await call(broker, offset_delete, 0, body)
    assert answer["error_code"] == ErrorCode.NONE
    assert _answers(answer) == {
        ("events", 0): ErrorCode.NONE,
        ("events", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nowhere", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert await _committed(broker, "empty", "events", [0, 1]) == [-1, 7]
    missing = await call(broker, offset_delete, 0, _delete_body("nobody", {"events": [0]}))
    assert (missing["error_code"], missing["topics"]) == (ErrorCode.GROUP_ID_NOT_FOUND, [])


async def test_offset_delete_keeps_the_offsets_of_topics_a_member_subscribes_to(
    broker: Broker,
) -> None:
    broker.topics.create("other", 1, {})
    identity = await _stable_member(broker, "active", "consumer", _subscription("events"))
    await _commit(broker, "active", {("events", 0): 3, ("other", 0): 4}, **identity)
    answer = await call(
        broker, offset_delete, 0, _delete_body("active", {"events": [0], "other": [0]})
    )
    assert answer["error_code"] == ErrorCode.NONE
    assert _answers(answer) == {
        ("events", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        ("other", 0): ErrorCode.NONE,
    }
    assert await _committed(broker, "active", "events", [0]) == [3]
    assert await _committed(broker, "active", "other", [0]) == [-1]


async def test_offset_delete_refuses_an_active_group_whose_subscriptions_are_unknown(
    broker: Broker,
) -> None:
    identity = await _stable_member(broker, "connect", "connect", b"opaque")
    await _commit(broker, "connect", {("events", 0): 3}, **identity)
    answer = await call(broker, offset_delete, 0, _delete_body("connect", {"events": [0]}))
    assert answer["error_code"] == ErrorCode.NON_EMPTY_GROUP
    assert await _committed(broker, "connect", "events", [0]) == [3]


async def test_list_groups_filters_by_state_from_v4_and_by_type_from_v5(broker: Broker) -> None:
    await _stable_member(broker, "busy", "consumer", _subscription("events"))
    await _commit(broker, "idle", {("events", 0): 1})

    def listed(answer: Any) -> set[tuple[str, str, str]]:
        return {(g["group_id"], g["group_state"], g["group_type"]) for g in answer["groups"]}

    every = await call(broker, list_groups, 5, {})
    assert listed(every) == {("busy", "Stable", "classic"), ("idle", "Empty", "classic")}
    stable = await call(broker, list_groups, 4, {"states_filter": ["stable"]})
    assert [g["group_id"] for g in stable["groups"]] == ["busy"]
    classic = await call(
        broker, list_groups, 5, {"types_filter": ["Classic"], "states_filter": ["Empty"]}
    )
    assert [g["group_id"] for g in classic["groups"]] == ["idle"]
    consumer = await call(broker, list_groups, 5, {"types_filter": ["consumer"]})
    assert consumer["groups"] == []


async def test_offsets_of_an_unfinished_transaction_are_unstable_until_its_marker(
    broker: Broker,
) -> None:
    group = "copier"
    commit = {
        "transactional_id": "tx",
        "group_id": group,
        "producer_id": 41,
        "producer_epoch": 0,
        "topics": [
            {"name": "events", "partitions": [{"partition_index": 0, "committed_offset": 9}]}
        ],
    }
    answer = await call(broker, txn_offset_commit, 3, commit)
    assert answer["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE

    def fetch(stable: bool) -> dict[str, Any]:
        body = {
            "group_id": group,
            "topics": [{"name": "events", "partition_indexes": [0]}],
            "require_stable": stable,
        }
        return call(broker, offset_fetch, 7, body)

    (entry,) = (await fetch(True))["topics"][0]["partitions"]
    assert entry["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
    (entry,) = (await fetch(False))["topics"][0]["partitions"]
    assert (entry["error_code"], entry["committed_offset"]) == (ErrorCode.NONE, -1)
    assert broker.groups is not None
    index = broker.groups.ownership.index_of(group)
    assert index is not None
    broker.groups.complete_transaction(index, 41, commit=True)  # the marker's arrival
    (entry,) = (await fetch(True))["topics"][0]["partitions"]
    assert (entry["error_code"], entry["committed_offset"]) == (ErrorCode.NONE, 9)
