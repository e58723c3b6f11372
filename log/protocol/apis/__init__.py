"""Declarative tables of every Kafka API the codec knows, one ``Api`` each.

Each table lists the request and response fields with their types and the
versions they exist in (see ``schema``). Field names are the snake_case
forms of Kafka's own, so a decoded request reads like the protocol
documentation. The tables cover every version Kafka defines for these APIs;
which versions the broker accepts is the broker's decision, not the
table's.
"""

from __future__ import annotations

from eventplatform.log.protocol.apis.admin import (
    ALTER_CLIENT_QUOTAS,
    ALTER_CONFIGS,
    ALTER_USER_SCRAM_CREDENTIALS,
    API_VERSIONS,
    CREATE_ACLS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_ACLS,
    DELETE_TOPICS,
    DESCRIBE_ACLS,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_TOPIC_PARTITIONS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    INCREMENTAL_ALTER_CONFIGS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from eventplatform.log.protocol.apis.data import (
    DELETE_RECORDS,
    FETCH,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
)
from eventplatform.log.protocol.apis.entities import ENTITY_READ, ERASE_RECORDS
from eventplatform.log.protocol.apis.groups import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from eventplatform.log.protocol.schema import Api

APIS: dict[int, Api] = {
    api.key: api
    for api in (
        PRODUCE,
        FETCH,
        LIST_OFFSETS,
        METADATA,
        OFFSET_COMMIT,
        OFFSET_FETCH,
        FIND_COORDINATOR,
        JOIN_GROUP,
        HEARTBEAT,
        LEAVE_GROUP,
        SYNC_GROUP,
        DESCRIBE_GROUPS,
        LIST_GROUPS,
        SASL_HANDSHAKE,
        API_VERSIONS,
        CREATE_TOPICS,
        DELETE_TOPICS,
        DELETE_RECORDS,
        INIT_PRODUCER_ID,
        OFFSET_FOR_LEADER_EPOCH,
        DESCRIBE_ACLS,
        CREATE_ACLS,
        DELETE_ACLS,
        DESCRIBE_CONFIGS,
        ALTER_CONFIGS,
        SASL_AUTHENTICATE,
        CREATE_PARTITIONS,
        DELETE_GROUPS,
        INCREMENTAL_ALTER_CONFIGS,
        OFFSET_DELETE,
        DESCRIBE_CLIENT_QUOTAS,
        ALTER_CLIENT_QUOTAS,
        DESCRIBE_USER_SCRAM_CREDENTIALS,
        ALTER_USER_SCRAM_CREDENTIALS,
        DESCRIBE_CLUSTER,
        DESCRIBE_TOPIC_PARTITIONS,
        DESCRIBE_LOG_DIRS,
        ENTITY_READ,
        ERASE_RECORDS,
    )
}
"""Every table by API key."""

__all__ = [
    "ALTER_CLIENT_QUOTAS",
    "ALTER_CONFIGS",
    "ALTER_USER_SCRAM_CREDENTIALS",
    "APIS",
    "API_VERSIONS",
    "CREATE_ACLS",
    "CREATE_PARTITIONS",
    "CREATE_TOPICS",
    "DELETE_ACLS",
    "DELETE_GROUPS",
    "DELETE_RECORDS",
    "DELETE_TOPICS",
    "DESCRIBE_ACLS",
    "DESCRIBE_CLIENT_QUOTAS",
    "DESCRIBE_CLUSTER",
    "DESCRIBE_CONFIGS",
    "DESCRIBE_GROUPS",
    "DESCRIBE_LOG_DIRS",
    "DESCRIBE_TOPIC_PARTITIONS",
    "DESCRIBE_USER_SCRAM_CREDENTIALS",
    "ENTITY_READ",
    "ERASE_RECORDS",
    "FETCH",
    "FIND_COORDINATOR",
    "HEARTBEAT",
    "INCREMENTAL_ALTER_CONFIGS",
    "INIT_PRODUCER_ID",
    "JOIN_GROUP",
    "LEAVE_GROUP",
    "LIST_GROUPS",
    "LIST_OFFSETS",
    "METADATA",
    "OFFSET_COMMIT",
    "OFFSET_DELETE",
    "OFFSET_FETCH",
    "OFFSET_FOR_LEADER_EPOCH",
    "PRODUCE",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
    "SYNC_GROUP",
]
