"""The authorization matrix's vocabulary: a case is one request of one API, the ACL
bindings it needs, where its error codes are in the answer, and a view of the broker state
the request could change (tests/log/broker/test_authorization_matrix.py runs them; the
cases themselves are in authorization_data_cases and authorization_admin_cases)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from eventplatform.log.broker.broker import Broker
from eventplatform.log.protocol import (
    ErrorCode,
)
from eventplatform.log.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermission,
    AclResourceType,
    PatternType,
)
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
