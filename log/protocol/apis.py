"""Declarative tables of every Kafka API the codec knows, one ``Api`` each.

Each table lists the request and response fields with their types and the
versions they exist in (see ``schema``). Field names are the snake_case
forms of Kafka's own, so a decoded request reads like the protocol
documentation. The tables cover every version Kafka defines for these APIs;
which versions the broker accepts is the broker's decision, not the
table's.
"""

from __future__ import annotations

from eventplatform.log.protocol.schema import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UINT16,
    UUID,
    Api,
    Array,
    F,
    Struct,
)

PRODUCE = Api(
    0,
    "Produce",
    "0-11",
    flexible="9+",
    request=(
        F("transactional_id", STRING, "3+", nullable="3+", default=None),
        F("acks", INT16),
        F("timeout_ms", INT32),
        F(
            "topic_data",
            [
                F("name", STRING),
                F(
                    "partition_data",
                    [
                        F("index", INT32),
                        F("records", RECORDS, nullable="0+"),
                    ],
                ),
            ],
        ),
    ),
    response=(
        F(
            "responses",
            [
                F("name", STRING),
                F(
                    "partition_responses",
                    [
                        F("index", INT32),
                        F("error_code", INT16),
                        F("base_offset", INT64),
                        F("log_append_time_ms", INT64, "2+", default=-1),
                        F("log_start_offset", INT64, "5+", default=-1),
                        F(
                            "record_errors",
                            [
                                F("batch_index", INT32),
                                F("batch_index_error_message", STRING, nullable="8+", default=None),
                            ],
                            "8+",
                        ),
                        F("error_message", STRING, "8+", nullable="8+", default=None),
                        F(
                            "current_leader",
                            Struct(
                                F("leader_id", INT32, default=-1),
                                F("leader_epoch", INT32, default=-1),
                            ),
                            "10+",
                            tag=0,
                        ),
                    ],
                ),
            ],
        ),
        F("throttle_time_ms", INT32, "1+"),
        F(
            "node_endpoints",
            [
                F("node_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, nullable="10+", default=None),
            ],
            "10+",
            tag=0,
        ),
    ),
)


FETCH = Api(
    1,
    "Fetch",
    "0-17",
    flexible="12+",
    request=(
        F("cluster_id", STRING, "12+", nullable="12+", tag=0, default=None),
        F("replica_id", INT32, "0-14", default=-1),
        F(
            "replica_state",
            Struct(
                F("replica_id", INT32, default=-1),
                F("replica_epoch", INT64, default=-1),
            ),
            "15+",
            tag=1,
        ),
        F("max_wait_ms", INT32),
        F("min_bytes", INT32),
        F("max_bytes", INT32, "3+", default=2147483647),
        F("isolation_level", INT8, "4+"),
        F("session_id", INT32, "7+"),
        F("session_epoch", INT32, "7+", default=-1),
        F(
            "topics",
            [
                F("topic", STRING, "0-12"),
                F("topic_id", UUID, "13+"),
                F(
                    "partitions",
                    [
                        F("partition", INT32),
                        F("current_leader_epoch", INT32, "9+", default=-1),
                        F("fetch_offset", INT64),
                        F("last_fetched_epoch", INT32, "12+", default=-1),
                        F("log_start_offset", INT64, "5+", default=-1),
                        F("partition_max_bytes", INT32),
                        F("replica_directory_id", UUID, "17+", tag=0),
                    ],
                ),
            ],
        ),
        F(
            "forgotten_topics_data",
            [
                F("topic", STRING, "7-12"),
                F("topic_id", UUID, "13+"),
                F("partitions", Array(INT32)),
            ],
            "7+",
        ),
        F("rack_id", STRING, "11+", default=""),
    ),
    response=(
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16, "7+"),
        F("session_id", INT32, "7+"),
        F(
            "responses",
            [
                F("topic", STRING, "0-12"),
                F("topic_id", UUID, "13+"),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("high_watermark", INT64),
                        F("last_stable_offset", INT64, "4+", default=-1),
                        F("log_start_offset", INT64, "5+", default=-1),
                        F(
                            "diverging_epoch",
                            Struct(
                                F("epoch", INT32, default=-1),
                                F("end_offset", INT64, default=-1),
                            ),
                            "12+",
                            tag=0,
                        ),
                        F(
                            "current_leader",
                            Struct(
                                F("leader_id", INT32, default=-1),
                                F("leader_epoch", INT32, default=-1),
                            ),
                            "12+",
                            tag=1,
                        ),
                        F(
                            "snapshot_id",
                            Struct(
                                F("end_offset", INT64, default=-1),
                                F("epoch", INT32, default=-1),
                            ),
                            "12+",
                            tag=2,
                        ),
                        F(
                            "aborted_transactions",
                            [
                                F("producer_id", INT64),
                                F("first_offset", INT64),
                            ],
                            "4+",
                            nullable="4+",
                        ),
                        F("preferred_read_replica", INT32, "11+", default=-1),
                        F("records", RECORDS, nullable="0+"),
                    ],
                ),
            ],
        ),
        F(
            "node_endpoints",
            [
                F("node_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, nullable="16+", default=None),
            ],
            "16+",
            tag=0,
        ),
    ),
)


LIST_OFFSETS = Api(
    2,
    "ListOffsets",
    "0-10",
    flexible="6+",
    request=(
        F("replica_id", INT32),
        F("isolation_level", INT8, "2+"),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("current_leader_epoch", INT32, "4+", default=-1),
                        F("timestamp", INT64),
                        F("max_num_offsets", INT32, "0", default=1),
                    ],
                ),
            ],
        ),
        F("timeout_ms", INT32, "10+"),
    ),
    response=(
        F("throttle_time_ms", INT32, "2+"),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("old_style_offsets", Array(INT64), "0"),
                        F("timestamp", INT64, "1+", default=-1),
                        F("offset", INT64, "1+", default=-1),
                        F("leader_epoch", INT32, "4+", default=-1),
                    ],
                ),
            ],
        ),
    ),
)


METADATA = Api(
    3,
    "Metadata",
    "0-12",
    flexible="9+",
    request=(
        F(
            "topics",
            [
                F("topic_id", UUID, "10+"),
                F("name", STRING, nullable="10+"),
            ],
            nullable="1+",
        ),
        F("allow_auto_topic_creation", BOOL, "4+", default=True),
        F("include_cluster_authorized_operations", BOOL, "8-10"),
        F("include_topic_authorized_operations", BOOL, "8+"),
    ),
    response=(
        F("throttle_time_ms", INT32, "3+"),
        F(
            "brokers",
            [
                F("node_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("rack", STRING, "1+", nullable="1+", default=None),
            ],
        ),
        F("cluster_id", STRING, "2+", nullable="2+", default=None),
        F("controller_id", INT32, "1+", default=-1),
        F(
            "topics",
            [
                F("error_code", INT16),
                F("name", STRING, nullable="12+"),
                F("topic_id", UUID, "10+"),
                F("is_internal", BOOL, "1+"),
                F(
                    "partitions",
                    [
                        F("error_code", INT16),
                        F("partition_index", INT32),
                        F("leader_id", INT32),
                        F("leader_epoch", INT32, "7+", default=-1),
                        F("replica_nodes", Array(INT32)),
                        F("isr_nodes", Array(INT32)),
                        F("offline_replicas", Array(INT32), "5+"),
                    ],
                ),
                F("topic_authorized_operations", INT32, "8+", default=-2147483648),
            ],
        ),
        F("cluster_authorized_operations", INT32, "8-10", default=-2147483648),
    ),
)


OFFSET_COMMIT = Api(
    8,
    "OffsetCommit",
    "0-9",
    flexible="8+",
    request=(
        F("group_id", STRING),
        F("generation_id_or_member_epoch", INT32, "1+", default=-1),
        F("member_id", STRING, "1+"),
        F("group_instance_id", STRING, "7+", nullable="7+", default=None),
        F("retention_time_ms", INT64, "2-4", default=-1),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("committed_offset", INT64),
                        F("committed_leader_epoch", INT32, "6+", default=-1),
                        F("commit_timestamp", INT64, "1", default=-1),
                        F("committed_metadata", STRING, nullable="0+"),
                    ],
                ),
            ],
        ),
    ),
    response=(
        F("throttle_time_ms", INT32, "3+"),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                    ],
                ),
            ],
        ),
    ),
)


OFFSET_FETCH = Api(
    9,
    "OffsetFetch",
    "0-9",
    flexible="6+",
    request=(
        F("group_id", STRING, "0-7"),
        F(
            "topics",
            [
                F("name", STRING),
                F("partition_indexes", Array(INT32)),
            ],
            "0-7",
            nullable="2-7",
        ),
        F(
            "groups",
            [
                F("group_id", STRING),
                F("member_id", STRING, "9+", nullable="9+", default=None),
                F("member_epoch", INT32, "9+", default=-1),
                F(
                    "topics",
                    [
                        F("name", STRING),
                        F("partition_indexes", Array(INT32)),
                    ],
                    nullable="8+",
                ),
            ],
            "8+",
        ),
        F("require_stable", BOOL, "7+"),
    ),
    response=(
        F("throttle_time_ms", INT32, "3+"),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("committed_offset", INT64),
                        F("committed_leader_epoch", INT32, "5-7", default=-1),
                        F("metadata", STRING, nullable="0-7"),
                        F("error_code", INT16),
                    ],
                ),
            ],
            "0-7",
        ),
        F("error_code", INT16, "2-7"),
        F(
            "groups",
            [
                F("group_id", STRING),
                F(
                    "topics",
                    [
                        F("name", STRING),
                        F(
                            "partitions",
                            [
                                F("partition_index", INT32),
                                F("committed_offset", INT64),
                                F("committed_leader_epoch", INT32, default=-1),
                                F("metadata", STRING, nullable="8+"),
                                F("error_code", INT16),
                            ],
                        ),
                    ],
                ),
                F("error_code", INT16),
            ],
            "8+",
        ),
    ),
)


FIND_COORDINATOR = Api(
    10,
    "FindCoordinator",
    "0-6",
    flexible="3+",
    request=(
        F("key", STRING, "0-3"),
        F("key_type", INT8, "1+"),
        F("coordinator_keys", Array(STRING), "4+"),
    ),
    response=(
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16, "0-3"),
        F("error_message", STRING, "1-3", nullable="1-3"),
        F("node_id", INT32, "0-3"),
        F("host", STRING, "0-3"),
        F("port", INT32, "0-3"),
        F(
            "coordinators",
            [
                F("key", STRING),
                F("node_id", INT32),
                F("host", STRING),
                F("port", INT32),
                F("error_code", INT16),
                F("error_message", STRING, nullable="4+"),
            ],
            "4+",
        ),
    ),
)


JOIN_GROUP = Api(
    11,
    "JoinGroup",
    "0-9",
    flexible="6+",
    request=(
        F("group_id", STRING),
        F("session_timeout_ms", INT32),
        F("rebalance_timeout_ms", INT32, "1+", default=-1),
        F("member_id", STRING),
        F("group_instance_id", STRING, "5+", nullable="5+", default=None),
        F("protocol_type", STRING),
        F(
            "protocols",
            [
                F("name", STRING),
                F("metadata", BYTES),
            ],
        ),
        F("reason", STRING, "8+", nullable="8+", default=None),
    ),
    response=(
        F("throttle_time_ms", INT32, "2+"),
        F("error_code", INT16),
        F("generation_id", INT32, default=-1),
        F("protocol_type", STRING, "7+", nullable="7+", default=None),
        F("protocol_name", STRING, nullable="7+"),
        F("leader", STRING),
        F("skip_assignment", BOOL, "9+"),
        F("member_id", STRING),
        F(
            "members",
            [
                F("member_id", STRING),
                F("group_instance_id", STRING, "5+", nullable="5+", default=None),
                F("metadata", BYTES),
            ],
        ),
    ),
)


HEARTBEAT = Api(
    12,
    "Heartbeat",
    "0-4",
    flexible="4+",
    request=(
        F("group_id", STRING),
        F("generation_id", INT32),
        F("member_id", STRING),
        F("group_instance_id", STRING, "3+", nullable="3+", default=None),
    ),
    response=(
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16),
    ),
)


LEAVE_GROUP = Api(
    13,
    "LeaveGroup",
    "0-5",
    flexible="4+",
    request=(
        F("group_id", STRING),
        F("member_id", STRING, "0-2"),
        F(
            "members",
            [
                F("member_id", STRING),
                F("group_instance_id", STRING, nullable="3+", default=None),
                F("reason", STRING, "5+", nullable="5+", default=None),
            ],
            "3+",
        ),
    ),
    response=(
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16),
        F(
            "members",
            [
                F("member_id", STRING),
                F("group_instance_id", STRING, nullable="3+"),
                F("error_code", INT16),
            ],
            "3+",
        ),
    ),
)


SYNC_GROUP = Api(
    14,
    "SyncGroup",
    "0-5",
    flexible="4+",
    request=(
        F("group_id", STRING),
        F("generation_id", INT32),
        F("member_id", STRING),
        F("group_instance_id", STRING, "3+", nullable="3+", default=None),
        F("protocol_type", STRING, "5+", nullable="5+", default=None),
        F("protocol_name", STRING, "5+", nullable="5+", default=None),
        F(
            "assignments",
            [
                F("member_id", STRING),
                F("assignment", BYTES),
            ],
        ),
    ),
    response=(
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16),
        F("protocol_type", STRING, "5+", nullable="5+", default=None),
        F("protocol_name", STRING, "5+", nullable="5+", default=None),
        F("assignment", BYTES),
    ),
)


DESCRIBE_GROUPS = Api(
    15,
    "DescribeGroups",
    "0-5",
    flexible="5+",
    request=(
        F("groups", Array(STRING)),
        F("include_authorized_operations", BOOL, "3+"),
    ),
    response=(
        F("throttle_time_ms", INT32, "1+"),
        F(
            "groups",
            [
                F("error_code", INT16),
                F("group_id", STRING),
                F("group_state", STRING),
                F("protocol_type", STRING),
                F("protocol_data", STRING),
                F(
                    "members",
                    [
                        F("member_id", STRING),
                        F("group_instance_id", STRING, "4+", nullable="4+", default=None),
                        F("client_id", STRING),
                        F("client_host", STRING),
                        F("member_metadata", BYTES),
                        F("member_assignment", BYTES),
                    ],
                ),
                F("authorized_operations", INT32, "3+", default=-2147483648),
            ],
        ),
    ),
)


LIST_GROUPS = Api(
    16,
    "ListGroups",
    "0-5",
    flexible="3+",
    request=(
        F("states_filter", Array(STRING), "4+"),
        F("types_filter", Array(STRING), "5+"),
    ),
    response=(
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16),
        F(
            "groups",
            [
                F("group_id", STRING),
                F("protocol_type", STRING),
                F("group_state", STRING, "4+"),
                F("group_type", STRING, "5+"),
            ],
        ),
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


DELETE_RECORDS = Api(
    21,
    "DeleteRecords",
    "0-2",
    flexible="2+",
    request=(
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("offset", INT64),
                    ],
                ),
            ],
        ),
        F("timeout_ms", INT32),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("low_watermark", INT64),
                        F("error_code", INT16),
                    ],
                ),
            ],
        ),
    ),
)


INIT_PRODUCER_ID = Api(
    22,
    "InitProducerId",
    "0-5",
    flexible="2+",
    request=(
        F("transactional_id", STRING, nullable="0+"),
        F("transaction_timeout_ms", INT32),
        F("producer_id", INT64, "3+", default=-1),
        F("producer_epoch", INT16, "3+", default=-1),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("producer_id", INT64, default=-1),
        F("producer_epoch", INT16),
    ),
)


OFFSET_FOR_LEADER_EPOCH = Api(
    23,
    "OffsetForLeaderEpoch",
    "0-4",
    flexible="4+",
    request=(
        F("replica_id", INT32, "3+", default=-2),
        F(
            "topics",
            [
                F("topic", STRING),
                F(
                    "partitions",
                    [
                        F("partition", INT32),
                        F("current_leader_epoch", INT32, "2+", default=-1),
                        F("leader_epoch", INT32),
                    ],
                ),
            ],
        ),
    ),
    response=(
        F("throttle_time_ms", INT32, "2+"),
        F(
            "topics",
            [
                F("topic", STRING),
                F(
                    "partitions",
                    [
                        F("error_code", INT16),
                        F("partition", INT32),
                        F("leader_epoch", INT32, "1+", default=-1),
                        F("end_offset", INT64, default=-1),
                    ],
                ),
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


DELETE_GROUPS = Api(
    42,
    "DeleteGroups",
    "0-2",
    flexible="2+",
    request=(F("groups_names", Array(STRING)),),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "results",
            [
                F("group_id", STRING),
                F("error_code", INT16),
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


OFFSET_DELETE = Api(
    47,
    "OffsetDelete",
    "0",
    flexible=None,
    request=(
        F("group_id", STRING),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                    ],
                ),
            ],
        ),
    ),
    response=(
        F("error_code", INT16),
        F("throttle_time_ms", INT32),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                    ],
                ),
            ],
        ),
    ),
)


VOTE = Api(
    52,
    "Vote",
    "0-1",
    flexible="0+",
    request=(
        F("cluster_id", STRING, nullable="0+", default=None),
        F("voter_id", INT32, "1+", default=-1),
        F(
            "topics",
            [
                F("topic_name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("candidate_epoch", INT32),
                        F("candidate_id", INT32),
                        F("candidate_directory_id", UUID, "1+"),
                        F("voter_directory_id", UUID, "1+"),
                        F("last_offset_epoch", INT32),
                        F("last_offset", INT64),
                    ],
                ),
            ],
        ),
    ),
    response=(
        F("error_code", INT16),
        F(
            "topics",
            [
                F("topic_name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("leader_id", INT32),
                        F("leader_epoch", INT32),
                        F("vote_granted", BOOL),
                    ],
                ),
            ],
        ),
        F(
            "node_endpoints",
            [
                F("node_id", INT32),
                F("host", STRING),
                F("port", UINT16),
            ],
            "1+",
            tag=0,
        ),
    ),
)


BEGIN_QUORUM_EPOCH = Api(
    53,
    "BeginQuorumEpoch",
    "0-1",
    flexible="1+",
    request=(
        F("cluster_id", STRING, nullable="0+", default=None),
        F("voter_id", INT32, "1+", default=-1),
        F(
            "topics",
            [
                F("topic_name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("voter_directory_id", UUID, "1+"),
                        F("leader_id", INT32),
                        F("leader_epoch", INT32),
                    ],
                ),
            ],
        ),
        F(
            "leader_endpoints",
            [
                F("name", STRING),
                F("host", STRING),
                F("port", UINT16),
            ],
            "1+",
        ),
    ),
    response=(
        F("error_code", INT16),
        F(
            "topics",
            [
                F("topic_name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("leader_id", INT32),
                        F("leader_epoch", INT32),
                    ],
                ),
            ],
        ),
        F(
            "node_endpoints",
            [
                F("node_id", INT32),
                F("host", STRING),
                F("port", UINT16),
            ],
            "1+",
            tag=0,
        ),
    ),
)


END_QUORUM_EPOCH = Api(
    54,
    "EndQuorumEpoch",
    "0-1",
    flexible="1+",
    request=(
        F("cluster_id", STRING, nullable="0+", default=None),
        F(
            "topics",
            [
                F("topic_name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("leader_id", INT32),
                        F("leader_epoch", INT32),
                        F("preferred_successors", Array(INT32), "0"),
                        F(
                            "preferred_candidates",
                            [
                                F("candidate_id", INT32),
                                F("candidate_directory_id", UUID),
                            ],
                            "1+",
                        ),
                    ],
                ),
            ],
        ),
        F(
            "leader_endpoints",
            [
                F("name", STRING),
                F("host", STRING),
                F("port", UINT16),
            ],
            "1+",
        ),
    ),
    response=(
        F("error_code", INT16),
        F(
            "topics",
            [
                F("topic_name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("leader_id", INT32),
                        F("leader_epoch", INT32),
                    ],
                ),
            ],
        ),
        F(
            "node_endpoints",
            [
                F("node_id", INT32),
                F("host", STRING),
                F("port", UINT16),
            ],
            "1+",
            tag=0,
        ),
    ),
)


DESCRIBE_QUORUM = Api(
    55,
    "DescribeQuorum",
    "0-2",
    flexible="0+",
    request=(
        F(
            "topics",
            [
                F("topic_name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                    ],
                ),
            ],
        ),
    ),
    response=(
        F("error_code", INT16),
        F("error_message", STRING, "2+", nullable="2+"),
        F(
            "topics",
            [
                F("topic_name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("error_message", STRING, "2+", nullable="2+"),
                        F("leader_id", INT32),
                        F("leader_epoch", INT32),
                        F("high_watermark", INT64),
                        F(
                            "current_voters",
                            [
                                F("replica_id", INT32),
                                F("replica_directory_id", UUID, "2+"),
                                F("log_end_offset", INT64),
                                F("last_fetch_timestamp", INT64, "1+", default=-1),
                                F("last_caught_up_timestamp", INT64, "1+", default=-1),
                            ],
                        ),
                        F(
                            "observers",
                            [
                                F("replica_id", INT32),
                                F("replica_directory_id", UUID, "2+"),
                                F("log_end_offset", INT64),
                                F("last_fetch_timestamp", INT64, "1+", default=-1),
                                F("last_caught_up_timestamp", INT64, "1+", default=-1),
                            ],
                        ),
                    ],
                ),
            ],
        ),
        F(
            "nodes",
            [
                F("node_id", INT32),
                F(
                    "listeners",
                    [
                        F("name", STRING),
                        F("host", STRING),
                        F("port", UINT16),
                    ],
                ),
            ],
            "2+",
        ),
    ),
)


FETCH_SNAPSHOT = Api(
    59,
    "FetchSnapshot",
    "0-1",
    flexible="0+",
    request=(
        F("cluster_id", STRING, nullable="0+", tag=0, default=None),
        F("replica_id", INT32, default=-1),
        F("max_bytes", INT32, default=2147483647),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition", INT32),
                        F("current_leader_epoch", INT32),
                        F(
                            "snapshot_id",
                            Struct(
                                F("end_offset", INT64),
                                F("epoch", INT32),
                            ),
                        ),
                        F("position", INT64),
                        F("replica_directory_id", UUID, "1+", tag=0),
                    ],
                ),
            ],
        ),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("index", INT32),
                        F("error_code", INT16),
                        F(
                            "snapshot_id",
                            Struct(
                                F("end_offset", INT64),
                                F("epoch", INT32),
                            ),
                        ),
                        F(
                            "current_leader",
                            Struct(
                                F("leader_id", INT32),
                                F("leader_epoch", INT32),
                            ),
                            tag=0,
                        ),
                        F("size", INT64),
                        F("position", INT64),
                        F("unaligned_records", RECORDS),
                    ],
                ),
            ],
        ),
        F(
            "node_endpoints",
            [
                F("node_id", INT32),
                F("host", STRING),
                F("port", UINT16),
            ],
            "1+",
            tag=0,
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
        VOTE,
        BEGIN_QUORUM_EPOCH,
        END_QUORUM_EPOCH,
        DESCRIBE_QUORUM,
        FETCH_SNAPSHOT,
        DESCRIBE_CLUSTER,
    )
}
"""Every table by API key."""
