"""The authorization matrix's cases for administration: topics, configs, ACLs, SCRAM
credentials, quotas and the cluster's description.
"""

from __future__ import annotations

from authorization_cases import (
    DOOMED,
    TOPIC,
    Case,
    Op,
    acl_bindings,
    cluster_grant,
    partition_count,
    per_entry,
    quotas,
    top,
    topic_configs,
    topic_grant,
    topic_names,
    users,
)

from eventplatform.log.broker.handlers import (
    alter_client_quotas,
    alter_configs,
    alter_user_scram_credentials,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_log_dirs,
    describe_topic_partitions,
    describe_user_scram_credentials,
    incremental_alter_configs,
)
from eventplatform.log.protocol import (
    ErrorCode,
)

ADMIN_CASES = [
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
]
