"""Record data: produce, fetch, offsets and producer ids.

Declarative tables, one ``Api`` each; see ``eventplatform.log.protocol.schema``.
"""

from __future__ import annotations

from eventplatform.log.protocol.schema import (
    BOOL,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
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


# librdkafka writes the null (all topics) list of Metadata v9+ in four bytes, not one, so
# three bytes follow its last field; Kafka ignores them, and so does this decoder.
METADATA = Api(
    3,
    "Metadata",
    "0-12",
    flexible="9+",
    request_tail_ignored="9+",
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
