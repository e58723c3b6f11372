"""Cluster administration: versions, topics, configs, ACLs and authentication.

Declarative tables, one ``Api`` each; see ``eventplatform.log.protocol.schema``.
"""

from __future__ import annotations

from eventplatform.log.protocol.schema import (
    BOOL,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    UUID,
    Api,
    Array,
    F,
    Struct,
)

API_VERSIONS = Api(
    18,
    "ApiVersions",
    "0-4",
    flexible="3+",
    request=(
        F("client_software_name", STRING, "3+"),
        F("client_software_version", STRING, "3+"),
    ),
    response=(
        F("error_code", INT16),
        F(
            "api_keys",
            [
                F("api_key", INT16),
                F("min_version", INT16),
                F("max_version", INT16),
            ],
        ),
        F("throttle_time_ms", INT32, "1+"),
        F(
            "supported_features",
            [
                F("name", STRING),
                F("min_version", INT16),
                F("max_version", INT16),
            ],
            "3+",
            tag=0,
        ),
        F("finalized_features_epoch", INT64, "3+", tag=1, default=-1),
        F(
            "finalized_features",
            [
                F("name", STRING),
                F("max_version_level", INT16),
                F("min_version_level", INT16),
            ],
            "3+",
            tag=2,
        ),
        F("zk_migration_ready", BOOL, "3+", tag=3),
    ),
)


SASL_HANDSHAKE = Api(
    17,
    "SaslHandshake",
    "0-1",
    flexible=None,
    request=(F("mechanism", STRING),),
    response=(
        F("error_code", INT16),
        F("mechanisms", Array(STRING)),
    ),
)


SASL_AUTHENTICATE = Api(
    36,
    "SaslAuthenticate",
    "0-2",
    flexible="2+",
    request=(F("auth_bytes", BYTES),),
    response=(
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F("auth_bytes", BYTES),
        F("session_lifetime_ms", INT64, "1+"),
    ),
)


CREATE_TOPICS = Api(
    19,
    "CreateTopics",
    "0-7",
    flexible="5+",
    request=(
        F(
            "topics",
            [
                F("name", STRING),
                F("num_partitions", INT32),
                F("replication_factor", INT16),
                F(
                    "assignments",
                    [
                        F("partition_index", INT32),
                        F("broker_ids", Array(INT32)),
                    ],
                ),
                F(
                    "configs",
                    [
                        F("name", STRING),
                        F("value", STRING, nullable="0+"),
                    ],
                ),
            ],
        ),
        F("timeout_ms", INT32, default=60000),
        F("validate_only", BOOL, "1+"),
    ),
    response=(
        F("throttle_time_ms", INT32, "2+"),
        F(
            "topics",
            [
                F("name", STRING),
                F("topic_id", UUID, "7+"),
                F("error_code", INT16),
                F("error_message", STRING, "1+", nullable="0+"),
                F("topic_config_error_code", INT16, "5+", tag=0),
                F("num_partitions", INT32, "5+", default=-1),
                F("replication_factor", INT16, "5+", default=-1),
                F(
                    "configs",
                    [
                        F("name", STRING),
                        F("value", STRING, nullable="5+"),
                        F("read_only", BOOL),
                        F("config_source", INT8, default=-1),
                        F("is_sensitive", BOOL),
                    ],
                    "5+",
                    nullable="5+",
                ),
            ],
        ),
    ),
)


DELETE_TOPICS = Api(
    20,
    "DeleteTopics",
    "0-6",
    flexible="4+",
    request=(
        F(
            "topics",
            [
                F("name", STRING, nullable="6+", default=None),
                F("topic_id", UUID),
            ],
            "6+",
        ),
        F("topic_names", Array(STRING), "0-5"),
        F("timeout_ms", INT32),
    ),
    response=(
        F("throttle_time_ms", INT32, "1+"),
        F(
            "responses",
            [
                F("name", STRING, nullable="6+"),
                F("topic_id", UUID, "6+"),
                F("error_code", INT16),
                F("error_message", STRING, "5+", nullable="5+", default=None),
            ],
        ),
    ),
)


CREATE_PARTITIONS = Api(
    37,
    "CreatePartitions",
    "0-3",
    flexible="2+",
    request=(
        F(
            "topics",
            [
                F("name", STRING),
                F("count", INT32),
                F(
                    "assignments",
                    [
                        F("broker_ids", Array(INT32)),
                    ],
                    nullable="0+",
                ),
            ],
        ),
        F("timeout_ms", INT32),
        F("validate_only", BOOL),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "results",
            [
                F("name", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
            ],
        ),
    ),
)


DESCRIBE_CONFIGS = Api(
    32,
    "DescribeConfigs",
    "0-4",
    flexible="4+",
    request=(
        F(
            "resources",
            [
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("configuration_keys", Array(STRING), nullable="0+"),
            ],
        ),
        F("include_synonyms", BOOL, "1+"),
        F("include_documentation", BOOL, "3+"),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "results",
            [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F("resource_type", INT8),
                F("resource_name", STRING),
                F(
                    "configs",
                    [
                        F("name", STRING),
                        F("value", STRING, nullable="0+"),
                        F("read_only", BOOL),
                        F("is_default", BOOL, "0"),
                        F("config_source", INT8, "1+", default=-1),
                        F("is_sensitive", BOOL),
                        F(
                            "synonyms",
                            [
                                F("name", STRING),
                                F("value", STRING, nullable="0+"),
                                F("source", INT8),
                            ],
                            "1+",
                        ),
                        F("config_type", INT8, "3+"),
                        F("documentation", STRING, "3+", nullable="0+"),
                    ],
                ),
            ],
        ),
    ),
)


ALTER_CONFIGS = Api(
    33,
    "AlterConfigs",
    "0-2",
    flexible="2+",
    request=(
        F(
            "resources",
            [
                F("resource_type", INT8),
                F("resource_name", STRING),
                F(
                    "configs",
                    [
                        F("name", STRING),
                        F("value", STRING, nullable="0+"),
                    ],
                ),
            ],
        ),
        F("validate_only", BOOL),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "responses",
            [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F("resource_type", INT8),
                F("resource_name", STRING),
            ],
        ),
    ),
)


INCREMENTAL_ALTER_CONFIGS = Api(
    44,
    "IncrementalAlterConfigs",
    "0-1",
    flexible="1+",
    request=(
        F(
            "resources",
            [
                F("resource_type", INT8),
                F("resource_name", STRING),
                F(
                    "configs",
                    [
                        F("name", STRING),
                        F("config_operation", INT8),
                        F("value", STRING, nullable="0+"),
                    ],
                ),
            ],
        ),
        F("validate_only", BOOL),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "responses",
            [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F("resource_type", INT8),
                F("resource_name", STRING),
            ],
        ),
    ),
)


DESCRIBE_ACLS = Api(
    29,
    "DescribeAcls",
    "0-3",
    flexible="2+",
    request=(
        F("resource_type_filter", INT8),
        F("resource_name_filter", STRING, nullable="0+"),
        F("pattern_type_filter", INT8, "1+", default=3),
        F("principal_filter", STRING, nullable="0+"),
        F("host_filter", STRING, nullable="0+"),
        F("operation", INT8),
        F("permission_type", INT8),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F(
            "resources",
            [
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("pattern_type", INT8, "1+", default=3),
                F(
                    "acls",
                    [
                        F("principal", STRING),
                        F("host", STRING),
                        F("operation", INT8),
                        F("permission_type", INT8),
                    ],
                ),
            ],
        ),
    ),
)


CREATE_ACLS = Api(
    30,
    "CreateAcls",
    "0-3",
    flexible="2+",
    request=(
        F(
            "creations",
            [
                F("resource_type", INT8),
                F("resource_name", STRING),
                F("resource_pattern_type", INT8, "1+", default=3),
                F("principal", STRING),
                F("host", STRING),
                F("operation", INT8),
                F("permission_type", INT8),
            ],
        ),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "results",
            [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
            ],
        ),
    ),
)


DELETE_ACLS = Api(
    31,
    "DeleteAcls",
    "0-3",
    flexible="2+",
    request=(
        F(
            "filters",
            [
                F("resource_type_filter", INT8),
                F("resource_name_filter", STRING, nullable="0+"),
                F("pattern_type_filter", INT8, "1+", default=3),
                F("principal_filter", STRING, nullable="0+"),
                F("host_filter", STRING, nullable="0+"),
                F("operation", INT8),
                F("permission_type", INT8),
            ],
        ),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "filter_results",
            [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F(
                    "matching_acls",
                    [
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+"),
                        F("resource_type", INT8),
                        F("resource_name", STRING),
                        F("pattern_type", INT8, "1+", default=3),
                        F("principal", STRING),
                        F("host", STRING),
                        F("operation", INT8),
                        F("permission_type", INT8),
                    ],
                ),
            ],
        ),
    ),
)


_QUOTA_ENTITY = [F("entity_type", STRING), F("entity_name", STRING, nullable="0+")]

DESCRIBE_CLIENT_QUOTAS = Api(
    48,
    "DescribeClientQuotas",
    "0-1",
    flexible="1+",
    request=(
        F(
            "components",
            [F("entity_type", STRING), F("match_type", INT8), F("match", STRING, nullable="0+")],
        ),
        F("strict", BOOL),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F(
            "entries",
            [
                F("entity", list(_QUOTA_ENTITY)),
                F("values", [F("key", STRING), F("value", FLOAT64)]),
            ],
            nullable="0+",
        ),
    ),
)


ALTER_CLIENT_QUOTAS = Api(
    49,
    "AlterClientQuotas",
    "0-1",
    flexible="1+",
    request=(
        F(
            "entries",
            [
                F("entity", list(_QUOTA_ENTITY)),
                F("ops", [F("key", STRING), F("value", FLOAT64), F("remove", BOOL)]),
            ],
        ),
        F("validate_only", BOOL),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "entries",
            [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F("entity", list(_QUOTA_ENTITY)),
            ],
        ),
    ),
)


DESCRIBE_USER_SCRAM_CREDENTIALS = Api(
    50,
    "DescribeUserScramCredentials",
    "0",
    flexible="0+",
    request=(F("users", [F("name", STRING)], nullable="0+"),),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F(
            "results",
            [
                F("user", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F("credential_infos", [F("mechanism", INT8), F("iterations", INT32)]),
            ],
        ),
    ),
)


ALTER_USER_SCRAM_CREDENTIALS = Api(
    51,
    "AlterUserScramCredentials",
    "0",
    flexible="0+",
    # librdkafka writes the request's empty tagged-field section twice.
    request_tail_ignored="0",
    request=(
        F("deletions", [F("name", STRING), F("mechanism", INT8)]),
        F(
            "upsertions",
            [
                F("name", STRING),
                F("mechanism", INT8),
                F("iterations", INT32),
                F("salt", BYTES),
                F("salted_password", BYTES),
            ],
        ),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "results",
            [
                F("user", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
            ],
        ),
    ),
)


DESCRIBE_CLUSTER = Api(
    60,
    "DescribeCluster",
    "0-1",
    flexible="0+",
    request=(
        F("include_cluster_authorized_operations", BOOL),
        F("endpoint_type", INT8, "1+", default=1),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("endpoint_type", INT8, "1+", default=1),
        F("cluster_id", STRING),
        F("controller_id", INT32, default=-1),
        F(
            "brokers",
            [
                F("broker_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, nullable="0+", default=None),
            ],
        ),
        F("cluster_authorized_operations", INT32, default=-2147483648),
    ),
)


DESCRIBE_TOPIC_PARTITIONS = Api(
    75,
    "DescribeTopicPartitions",
    "0",
    flexible="0+",
    request=(
        F("topics", [F("name", STRING)]),
        F("response_partition_limit", INT32, default=2000),
        F(
            "cursor",
            Struct(
                F("topic_name", STRING),
                F("partition_index", INT32),
            ),
            nullable="0+",
            default=None,
        ),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "topics",
            [
                F("error_code", INT16),
                F("name", STRING, nullable="0+"),
                F("topic_id", UUID),
                F("is_internal", BOOL),
                F(
                    "partitions",
                    [
                        F("error_code", INT16),
                        F("partition_index", INT32),
                        F("leader_id", INT32),
                        F("leader_epoch", INT32, default=-1),
                        F("replica_nodes", Array(INT32)),
                        F("isr_nodes", Array(INT32)),
                        F("eligible_leader_replicas", Array(INT32), nullable="0+", default=None),
                        F("last_known_elr", Array(INT32), nullable="0+", default=None),
                        F("offline_replicas", Array(INT32)),
                    ],
                ),
                F("topic_authorized_operations", INT32, default=-2147483648),
            ],
        ),
        F(
            "next_cursor",
            Struct(
                F("topic_name", STRING),
                F("partition_index", INT32),
            ),
            nullable="0+",
            default=None,
        ),
    ),
)


DESCRIBE_LOG_DIRS = Api(
    35,
    "DescribeLogDirs",
    "1-4",
    flexible="2+",
    request=(
        F(
            "topics",
            [
                F("topic", STRING),
                F("partitions", Array(INT32)),
            ],
            nullable="1+",
        ),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16, "3+"),
        F(
            "results",
            [
                F("error_code", INT16),
                F("log_dir", STRING),
                F(
                    "topics",
                    [
                        F("name", STRING),
                        F(
                            "partitions",
                            [
                                F("partition_index", INT32),
                                F("partition_size", INT64),
                                F("offset_lag", INT64),
                                F("is_future_key", BOOL),
                            ],
                        ),
                    ],
                ),
                F("total_bytes", INT64, "4+", default=-1),
                F("usable_bytes", INT64, "4+", default=-1),
            ],
        ),
    ),
)
