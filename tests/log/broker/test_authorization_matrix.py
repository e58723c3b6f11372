"""Every API the broker serves, asked by a principal without the ACL it needs and then
with it: the refusal carries Kafka's authorization code and changes nothing; the grant
lets the same request through.

Each case is the request, the ACL bindings it needs, where its error codes are in the
answer, and a view of the broker state the request could change. The requests run
through the real handlers of a real broker (its files, its group coordinator, its
ACL store and authorizer), as a connection of ``User:mallory`` would run them.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

from eventplatform.log.broker.broker import Broker
from eventplatform.log.broker.context import RequestContext
from eventplatform.log.broker.dispatcher import HANDLER_MODULES
from eventplatform.log.broker.erasing import run_erasures
from eventplatform.log.broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_user_scram_credentials,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    end_txn,
    entity_read,
    erase_records,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    read_share_group_state,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    sync_group,
    txn_offset_commit,
    write_share_group_state,
    write_txn_markers,
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
from eventplatform.log.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermission,
    AclResourceType,
    PatternType,
)
from eventplatform.log.security.listeners import SecurityProtocol
from eventplatform.log.security.session import Session
from eventplatform.log.storage import Record
from eventplatform.log.storage.record_batch import encode_batch

PRINCIPAL = "User:mallory"
TOPIC = "events"
DOOMED = "doomed"
GROUP = "billing"
SHARE_GROUP = "shared"
TRANSACTIONAL_ID = "tx"
AUTHORIZATION_ERRORS = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
NOT_AUTHORIZATION_APIS = {"ApiVersions", "SaslHandshake", "SaslAuthenticate"}
"""What every connection may send before it is anyone: they act on no resource."""
_correlation = itertools.count(1)

Op = AclOperation
Kind = AclResourceType


def grant(kind: AclResourceType, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        kind, name, PatternType.LITERAL, PRINCIPAL, "*", operation, AclPermission.ALLOW
    )


def topic_grant(operation: AclOperation, name: str = TOPIC) -> AclBinding:
    return grant(Kind.TOPIC, name, operation)


def group_grant(operation: AclOperation) -> AclBinding:
    return grant(Kind.GROUP, GROUP, operation)


def cluster_grant(operation: AclOperation) -> AclBinding:
    return grant(Kind.CLUSTER, CLUSTER_NAME, operation)


def top(answer: dict[str, Any]) -> list[int]:
    return [answer["error_code"]]


def per_partition(topics_key: str, partitions_key: str) -> Callable[[dict[str, Any]], list[int]]:
    def errors(answer: dict[str, Any]) -> list[int]:
        return [p["error_code"] for t in answer[topics_key] for p in t[partitions_key]]

    return errors


def per_entry(key: str) -> Callable[[dict[str, Any]], list[int]]:
    def errors(answer: dict[str, Any]) -> list[int]:
        return [entry["error_code"] for entry in answer[key]]

    return errors


@dataclass
class Case:
    module: ModuleType
    version: int
    body: dict[str, Any] | Callable[[Broker], dict[str, Any]]
    grants: list[AclBinding]
    errors: Callable[[dict[str, Any]], list[int]]
    refusal: ErrorCode
    state: Callable[[Broker], Any] = field(default=lambda broker: None)
    """What the request would change; the refusal leaves it as it was."""

    @property
    def name(self) -> str:
        return str(self.module.API.name)


def log_end(broker: Broker) -> int:
    partition = broker.topics.partition(TOPIC, 0)
    assert partition is not None
    return partition.log.log_end_offset


def log_start(broker: Broker) -> int:
    partition = broker.topics.partition(TOPIC, 0)
    assert partition is not None
    return partition.log.log_start_offset


def first_value(broker: Broker) -> bytes | None:
    partition = broker.topics.partition(TOPIC, 0)
    assert partition is not None
    return next(partition.log.iter_records()).value


def topic_names(broker: Broker) -> list[str]:
    return sorted(broker.topics.topics)


def topic_configs(broker: Broker) -> dict[str, str]:
    topic = broker.topics.get(TOPIC)
    assert topic is not None
    return dict(topic.configs)


def partition_count(broker: Broker) -> int:
    topic = broker.topics.get(TOPIC)
    assert topic is not None
    return len(topic.partitions)


def acl_bindings(broker: Broker) -> list[AclBinding]:
    return [b for b in broker.acls.bindings() if b.principal != PRINCIPAL]


def users(broker: Broker) -> list[str]:
    return broker.credentials.users()


def quotas(broker: Broker) -> Any:
    return broker.quotas.entries()


def share_states(broker: Broker) -> Any:
    assert broker.groups is not None
    return dict(broker.groups.shares.states)


def share_fetch_body(broker: Broker) -> dict[str, Any]:
    topic = broker.topics.get(TOPIC)
    assert topic is not None
    return {
        "group_id": SHARE_GROUP,
        "member_id": "m",
        "share_session_epoch": 0,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_records": 10,
        "batch_size": 10,
        "topics": [{"topic_id": topic.topic_id, "partitions": [{"partition_index": 0}]}],
    }


def share_state_body(broker: Broker) -> dict[str, Any]:
    topic = broker.topics.get(TOPIC)
    assert topic is not None
    entry = {"partition": 0, "state_epoch": 1, "leader_epoch": 0, "start_offset": 0}
    return {
        "group_id": SHARE_GROUP,
        "topics": [{"topic_id": topic.topic_id, "partitions": [{**entry, "state_batches": []}]}],
    }


def batch() -> bytes:
    return encode_batch([Record(0, 1_700_000_000_000, b"k", b"v")], base_offset=0)


CASES = [
    Case(
        produce,
        8,
        {
            "acks": 1,
            "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch()}]}],
        },
        [topic_grant(Op.WRITE)],
        per_partition("responses", "partition_responses"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        log_end,
    ),
    Case(
        fetch,
        11,
        {
            "replica_id": -1,
            "max_bytes": 1 << 20,
            "topics": [
                {"topic": TOPIC, "partitions": [{"partition": 0, "partition_max_bytes": 1 << 20}]}
            ],
        },
        [topic_grant(Op.READ)],
        per_partition("responses", "partitions"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        list_offsets,
        5,
        {
            "replica_id": -1,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
        [topic_grant(Op.DESCRIBE)],
        per_partition("topics", "partitions"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        metadata,
        9,
        {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False},
        [topic_grant(Op.DESCRIBE)],
        per_entry("topics"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        metadata,
        9,
        {"topics": [{"name": "born"}], "allow_auto_topic_creation": True},
        [topic_grant(Op.DESCRIBE, "born"), topic_grant(Op.CREATE, "born")],
        per_entry("topics"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        topic_names,
    ),
    Case(
        offset_commit,
        8,
        {
            "group_id": GROUP,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 0}]}
            ],
        },
        [group_grant(Op.READ), topic_grant(Op.READ)],
        per_partition("topics", "partitions"),
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        offset_fetch,
        5,
        {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        [group_grant(Op.DESCRIBE), topic_grant(Op.DESCRIBE)],
        top,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        find_coordinator,
        2,
        {"key": GROUP, "key_type": 0},
        [group_grant(Op.DESCRIBE)],
        top,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        join_group,
        5,
        {
            "group_id": GROUP,
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
        [group_grant(Op.READ)],
        top,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        heartbeat,
        3,
        {"group_id": GROUP, "generation_id": 1, "member_id": "m"},
        [group_grant(Op.READ)],
        top,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        leave_group,
        3,
        {"group_id": GROUP, "members": [{"member_id": "m"}]},
        [group_grant(Op.READ)],
        top,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        sync_group,
        3,
        {"group_id": GROUP, "generation_id": 1, "member_id": "m", "assignments": []},
        [group_grant(Op.READ)],
        top,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        describe_groups,
        4,
        {"groups": [GROUP]},
        [group_grant(Op.DESCRIBE)],
        per_entry("groups"),
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        create_topics,
        4,
        {
            "topics": [{"name": "fresh", "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 5000,
        },
        [topic_grant(Op.CREATE, "fresh")],
        per_entry("topics"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        topic_names,
    ),
    Case(
        delete_topics,
        3,
        {"topic_names": [DOOMED], "timeout_ms": 5000},
        [topic_grant(Op.DELETE, DOOMED)],
        per_entry("responses"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        topic_names,
    ),
    Case(
        delete_records,
        1,
        {
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 1}]}],
            "timeout_ms": 5000,
        },
        [topic_grant(Op.DELETE)],
        per_partition("topics", "partitions"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        log_start,
    ),
    Case(
        init_producer_id,
        1,
        {"transactional_id": None, "transaction_timeout_ms": 60_000},
        [topic_grant(Op.WRITE)],
        top,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        offset_for_leader_epoch,
        3,
        {
            "replica_id": -1,
            "topics": [
                {
                    "topic": TOPIC,
                    "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}],
                }
            ],
        },
        [topic_grant(Op.DESCRIBE)],
        per_partition("topics", "partitions"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        describe_acls,
        1,
        {
            "resource_type_filter": 1,
            "resource_name_filter": None,
            "pattern_type_filter": 1,
            "principal_filter": None,
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        },
        [cluster_grant(Op.DESCRIBE)],
        top,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        create_acls,
        1,
        {
            "creations": [
                {
                    "resource_type": 2,
                    "resource_name": "anything",
                    "resource_pattern_type": 3,
                    "principal": "User:friend",
                    "host": "*",
                    "operation": 2,
                    "permission_type": 3,
                }
            ]
        },
        [cluster_grant(Op.ALTER)],
        per_entry("results"),
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        acl_bindings,
    ),
    Case(
        delete_acls,
        1,
        {
            "filters": [
                {
                    "resource_type_filter": 2,
                    "resource_name_filter": "kept",
                    "pattern_type_filter": 3,
                    "principal_filter": None,
                    "host_filter": None,
                    "operation": 1,
                    "permission_type": 1,
                }
            ]
        },
        [cluster_grant(Op.ALTER)],
        per_entry("filter_results"),
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        acl_bindings,
    ),
    Case(
        describe_configs,
        2,
        {"resources": [{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None}]},
        [topic_grant(Op.DESCRIBE_CONFIGS)],
        per_entry("results"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        describe_configs,
        2,
        {"resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None}]},
        [cluster_grant(Op.DESCRIBE_CONFIGS)],
        per_entry("results"),
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        alter_configs,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": TOPIC,
                    "configs": [{"name": "retention.ms", "value": "1000"}],
                }
            ]
        },
        [topic_grant(Op.ALTER_CONFIGS)],
        per_entry("responses"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        topic_configs,
    ),
    Case(
        incremental_alter_configs,
        0,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": TOPIC,
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}],
                }
            ]
        },
        [topic_grant(Op.ALTER_CONFIGS)],
        per_entry("responses"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        topic_configs,
    ),
    Case(
        create_partitions,
        1,
        {"topics": [{"name": TOPIC, "count": 3, "assignments": None}], "timeout_ms": 5000},
        [topic_grant(Op.ALTER)],
        per_entry("results"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        partition_count,
    ),
    Case(
        delete_groups,
        1,
        {"groups_names": [GROUP]},
        [group_grant(Op.DELETE)],
        per_entry("results"),
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        offset_delete,
        0,
        {"group_id": GROUP, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
        [group_grant(Op.DELETE), topic_grant(Op.READ)],
        top,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        describe_cluster,
        0,
        {"include_cluster_authorized_operations": False},
        [cluster_grant(Op.DESCRIBE)],
        top,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        describe_topic_partitions,
        0,
        {"topics": [{"name": TOPIC}], "response_partition_limit": 100, "cursor": None},
        [topic_grant(Op.DESCRIBE)],
        per_entry("topics"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        describe_log_dirs,
        3,  # the first version with a top-level error; before it a refusal lists no dirs
        {"topics": None},
        [cluster_grant(Op.DESCRIBE)],
        top,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        describe_user_scram_credentials,
        0,
        {"users": None},
        [cluster_grant(Op.DESCRIBE)],
        top,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        alter_user_scram_credentials,
        0,
        {
            "deletions": [],
            "upsertions": [
                {
                    "name": "friend",
                    "mechanism": 1,
                    "iterations": 4096,
                    "salt": b"salt",
                    "salted_password": b"x" * 32,
                }
            ],
        },
        [cluster_grant(Op.ALTER)],
        per_entry("results"),
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        users,
    ),
    Case(
        describe_client_quotas,
        1,
        {"components": [], "strict": False},
        [cluster_grant(Op.DESCRIBE_CONFIGS)],
        top,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        alter_client_quotas,
        1,
        {
            "entries": [
                {
                    "entity": [{"entity_type": "user", "entity_name": "mallory"}],
                    "ops": [{"key": "producer_byte_rate", "value": 1e9, "remove": False}],
                }
            ]
        },
        [cluster_grant(Op.ALTER_CONFIGS)],
        per_entry("entries"),
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        quotas,
    ),
    Case(
        entity_read,
        0,
        {"topic": TOPIC, "partition": 0, "key": b"k", "max_bytes": 1 << 20},
        [topic_grant(Op.READ)],
        top,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        erase_records,
        0,
        {"topic": TOPIC, "partition": 0, "offsets": [0], "timeout_ms": 10_000},
        [topic_grant(Op.DELETE)],
        top,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        first_value,
    ),
    Case(
        share_group_heartbeat,
        1,
        {
            "group_id": SHARE_GROUP,
            "member_id": "m",
            "member_epoch": 0,
            "subscribed_topic_names": [TOPIC],
        },
        [grant(Kind.GROUP, SHARE_GROUP, Op.READ)],
        top,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        share_group_describe,
        1,
        {"group_ids": [SHARE_GROUP]},
        [grant(Kind.GROUP, SHARE_GROUP, Op.DESCRIBE)],
        per_entry("groups"),
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        share_fetch,
        1,
        share_fetch_body,
        [grant(Kind.GROUP, SHARE_GROUP, Op.READ), topic_grant(Op.READ)],
        top,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        share_states,
    ),
    Case(
        share_acknowledge,
        1,
        {"group_id": SHARE_GROUP, "member_id": "m", "share_session_epoch": 1, "topics": []},
        [grant(Kind.GROUP, SHARE_GROUP, Op.READ)],
        top,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        read_share_group_state,
        0,
        share_state_body,
        [cluster_grant(Op.CLUSTER_ACTION)],
        per_partition("results", "partitions"),
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        write_share_group_state,
        0,
        share_state_body,
        [cluster_grant(Op.CLUSTER_ACTION)],
        per_partition("results", "partitions"),
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        share_states,
    ),
    Case(
        init_producer_id,
        4,
        {"transactional_id": TRANSACTIONAL_ID, "transaction_timeout_ms": 60_000},
        [grant(Kind.TRANSACTIONAL_ID, TRANSACTIONAL_ID, Op.WRITE)],
        top,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ),
    Case(
        add_partitions_to_txn,
        3,
        {
            "v3_and_below_transactional_id": TRANSACTIONAL_ID,
            "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}],
        },
        [grant(Kind.TRANSACTIONAL_ID, TRANSACTIONAL_ID, Op.WRITE), topic_grant(Op.WRITE)],
        lambda answer: [
            p["partition_error_code"]
            for t in answer["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]
        ],
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ),
    Case(
        add_offsets_to_txn,
        3,
        {
            "transactional_id": TRANSACTIONAL_ID,
            "producer_id": 1,
            "producer_epoch": 0,
            "group_id": GROUP,
        },
        [grant(Kind.TRANSACTIONAL_ID, TRANSACTIONAL_ID, Op.WRITE), group_grant(Op.READ)],
        top,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ),
    Case(
        end_txn,
        3,
        {
            "transactional_id": TRANSACTIONAL_ID,
            "producer_id": 1,
            "producer_epoch": 0,
            "committed": True,
        },
        [grant(Kind.TRANSACTIONAL_ID, TRANSACTIONAL_ID, Op.WRITE)],
        top,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ),
    Case(
        txn_offset_commit,
        3,
        {
            "transactional_id": TRANSACTIONAL_ID,
            "group_id": GROUP,
            "producer_id": 1,
            "producer_epoch": 0,
            "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 0}]}
            ],
        },
        [
            grant(Kind.TRANSACTIONAL_ID, TRANSACTIONAL_ID, Op.WRITE),
            group_grant(Op.READ),
            topic_grant(Op.READ),
        ],
        per_partition("topics", "partitions"),
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ),
    Case(
        describe_producers,
        0,
        {"topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        [topic_grant(Op.READ)],
        per_partition("topics", "partitions"),
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        describe_transactions,
        0,
        {"transactional_ids": [TRANSACTIONAL_ID]},
        [grant(Kind.TRANSACTIONAL_ID, TRANSACTIONAL_ID, Op.DESCRIBE)],
        per_entry("transaction_states"),
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ),
    Case(
        write_txn_markers,
        1,
        {
            "markers": [
                {
                    "producer_id": 1,
                    "producer_epoch": 0,
                    "transaction_result": True,
                    "topics": [{"name": "absent", "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        },
        [cluster_grant(Op.CLUSTER_ACTION)],
        lambda answer: [
            p["error_code"] for m in answer["markers"] for t in m["topics"] for p in t["partitions"]
        ],
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ),
]


@pytest.fixture
async def broker(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Broker]:
    config = BrokerConfig(
        data_dir=tmp_path / "data",
        group_initial_rebalance_delay_ms=0,
        offsets_topic_num_partitions=3,
        authorizer_class_name="StandardAuthorizer",
        super_users=frozenset({"User:admin"}),
    )
    opened = Broker.open(config)
    opened.topics.create(TOPIC, 2, {})
    opened.topics.create(DOOMED, 1, {})
    opened.groups = GroupCoordinator(opened.config, opened.topics, opened.clock_ms)
    opened.groups.offsets_topic.ensure_created()
    await nursery.start(opened.groups.run)
    await opened.groups.wait_loaded()
    nursery.start_soon(run_erasures, opened)
    yield opened
    opened.groups.close()
    opened.close()


async def call(broker: Broker, case: Case, principal: str = PRINCIPAL) -> dict[str, Any]:
    api = case.module.API
    correlation_id = next(_correlation)
    body = case.body(broker) if callable(case.body) else case.body
    frame = encode_request(api, case.version, body, correlation_id=correlation_id)
    header, position = decode_request_header(frame[4:])
    request = decode_request_body(api, case.version, frame[4:], position)
    session = Session("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, None, principal)
    context = RequestContext(broker, header, "127.0.0.1", 1, session)
    with trio.fail_after(30):
        answer = await case.module.handle(context, request)
    if not isinstance(answer, dict):
        answer = await answer.body()
    encoded = flatten(encode_response(api, case.version, correlation_id, answer))
    return dict(decode_response(api, case.version, encoded)[1])


async def prepare(broker: Broker) -> None:
    """A group with a committed offset, a record to delete up to, a binding to keep."""
    admin = "User:admin"
    await call(broker, CASES[0], admin)  # a record in events-0
    await call(broker, next(c for c in CASES if c.module is offset_commit), admin)
    broker.acls.change(
        [
            AclBinding(
                Kind.TOPIC,
                "kept",
                PatternType.LITERAL,
                "User:friend",
                "*",
                Op.READ,
                AclPermission.ALLOW,
            )
        ],
        [],
    )


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.name}-v{case.version}")
async def test_a_request_without_its_acl_is_refused_and_changes_nothing_then_granted_it_passes(
    broker: Broker, case: Case
) -> None:
    await prepare(broker)
    before = case.state(broker)
    refused = await call(broker, case)
    assert set(case.errors(refused)) == {case.refusal}, refused
    assert case.state(broker) == before

    broker.acls.change(case.grants, [])
    granted = await call(broker, case)
    codes = case.errors(granted)
    assert codes and not AUTHORIZATION_ERRORS & set(codes), granted


def test_every_api_the_broker_serves_is_in_the_matrix() -> None:
    served = {module.API.name for module in HANDLER_MODULES} - NOT_AUTHORIZATION_APIS
    filtered = {"ListGroups", "ListTransactions"}  # list only what one may describe
    assert served - filtered == {case.name for case in CASES}


async def test_list_groups_shows_only_the_groups_a_principal_may_describe(broker: Broker) -> None:
    await prepare(broker)
    case = Case(list_groups, 4, {"states_filter": []}, [], top, ErrorCode.NONE)
    assert (await call(broker, case))["groups"] == []
    broker.acls.change([group_grant(Op.DESCRIBE)], [])
    assert [g["group_id"] for g in (await call(broker, case))["groups"]] == [GROUP]


async def test_metadata_for_every_topic_lists_only_what_a_principal_may_describe(
    broker: Broker,
) -> None:
    case = Case(metadata, 9, {"topics": None}, [], per_entry("topics"), ErrorCode.NONE)
    assert (await call(broker, case))["topics"] == []
    broker.acls.change([topic_grant(Op.READ)], [])
    assert [t["name"] for t in (await call(broker, case))["topics"]] == [TOPIC]
