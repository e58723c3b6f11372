"""Share groups (KIP-932): membership, record acquisition and acknowledgement, and the
share-partition state that brokers keep for each other.

Declarative tables, one ``Api`` each; see ``eventplatform.log.protocol.schema``.
Version 0 was Kafka's early-access layout; version 1 is the one clients speak
(ShareFetch v1 drops ``partition_max_bytes`` and adds ``max_records``,
``batch_size`` and the response's ``acquisition_lock_timeout_ms``).
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

_LEADER = Struct(F("leader_id", INT32), F("leader_epoch", INT32))
_NODE_ENDPOINTS = F(
    "node_endpoints",
    [
        F("node_id", INT32),
        F("host", STRING),
        F("port", INT32),
        F("rack", STRING, nullable="0+", default=None),
    ],
)
_ACKNOWLEDGEMENT_BATCHES = F(
    "acknowledgement_batches",
    [
        F("first_offset", INT64),
        F("last_offset", INT64),
        F("acknowledge_types", Array(INT8)),
    ],
)
_TOPIC_PARTITIONS = [F("topic_id", UUID), F("partitions", Array(INT32))]

SHARE_GROUP_HEARTBEAT = Api(
    76,
    "ShareGroupHeartbeat",
    "0-1",
    flexible="0+",
    request=(
        F("group_id", STRING),
        F("member_id", STRING),
        F("member_epoch", INT32),
        F("rack_id", STRING, nullable="0+", default=None),
        F("subscribed_topic_names", Array(STRING), nullable="0+", default=None),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("member_id", STRING, nullable="0+", default=None),
        F("member_epoch", INT32),
        F("heartbeat_interval_ms", INT32),
        F(
            "assignment",
            Struct(F("topic_partitions", _TOPIC_PARTITIONS)),
            nullable="0+",
            default=None,
        ),
    ),
)

SHARE_GROUP_DESCRIBE = Api(
    77,
    "ShareGroupDescribe",
    "0-1",
    flexible="0+",
    request=(
        F("group_ids", Array(STRING)),
        F("include_authorized_operations", BOOL),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "groups",
            [
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+", default=None),
                F("group_id", STRING),
                F("group_state", STRING),
                F("group_epoch", INT32),
                F("assignment_epoch", INT32),
                F("assignor_name", STRING),
                F(
                    "members",
                    [
                        F("member_id", STRING),
                        F("rack_id", STRING, nullable="0+", default=None),
                        F("member_epoch", INT32),
                        F("client_id", STRING),
                        F("client_host", STRING),
                        F("subscribed_topic_names", Array(STRING)),
                        F(
                            "assignment",
                            Struct(
                                F(
                                    "topic_partitions",
                                    [
                                        F("topic_id", UUID),
                                        F("topic_name", STRING),
                                        F("partitions", Array(INT32)),
                                    ],
                                )
                            ),
                        ),
                    ],
                ),
                F("authorized_operations", INT32, default=-(2**31)),
            ],
        ),
    ),
)

SHARE_FETCH = Api(
    78,
    "ShareFetch",
    "0-1",
    flexible="0+",
    request=(
        F("group_id", STRING, nullable="0+", default=None),
        F("member_id", STRING, nullable="0+"),
        F("share_session_epoch", INT32),
        F("max_wait_ms", INT32),
        F("min_bytes", INT32),
        F("max_bytes", INT32, default=0x7FFFFFFF),
        F("max_records", INT32, "1+"),
        F("batch_size", INT32, "1+"),
        F(
            "topics",
            [
                F("topic_id", UUID),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("partition_max_bytes", INT32, "0"),
                        _ACKNOWLEDGEMENT_BATCHES,
                    ],
                ),
            ],
        ),
        F("forgotten_topics_data", _TOPIC_PARTITIONS),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("acquisition_lock_timeout_ms", INT32, "1+"),
        F(
            "responses",
            [
                F("topic_id", UUID),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+", default=None),
                        F("acknowledge_error_code", INT16),
                        F("acknowledge_error_message", STRING, nullable="0+", default=None),
                        F("current_leader", _LEADER),
                        F("records", RECORDS, nullable="0+"),
                        F(
                            "acquired_records",
                            [
                                F("first_offset", INT64),
                                F("last_offset", INT64),
                                F("delivery_count", INT16),
                            ],
                        ),
                    ],
                ),
            ],
        ),
        _NODE_ENDPOINTS,
    ),
)

SHARE_ACKNOWLEDGE = Api(
    79,
    "ShareAcknowledge",
    "0-1",
    flexible="0+",
    request=(
        F("group_id", STRING, nullable="0+", default=None),
        F("member_id", STRING, nullable="0+"),
        F("share_session_epoch", INT32),
        F(
            "topics",
            [
                F("topic_id", UUID),
                F("partitions", [F("partition_index", INT32), _ACKNOWLEDGEMENT_BATCHES]),
            ],
        ),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F(
            "responses",
            [
                F("topic_id", UUID),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+", default=None),
                        F("current_leader", _LEADER),
                    ],
                ),
            ],
        ),
        _NODE_ENDPOINTS,
    ),
)

_STATE_BATCHES = F(
    "state_batches",
    [
        F("first_offset", INT64),
        F("last_offset", INT64),
        F("delivery_state", INT8),
        F("delivery_count", INT16),
    ],
)

READ_SHARE_GROUP_STATE = Api(
    84,
    "ReadShareGroupState",
    "0",
    flexible="0+",
    request=(
        F("group_id", STRING),
        F(
            "topics",
            [
                F("topic_id", UUID),
                F("partitions", [F("partition", INT32), F("leader_epoch", INT32)]),
            ],
        ),
    ),
    response=(
        F(
            "results",
            [
                F("topic_id", UUID),
                F(
                    "partitions",
                    [
                        F("partition", INT32),
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+", default=None),
                        F("state_epoch", INT32),
                        F("start_offset", INT64),
                        _STATE_BATCHES,
                    ],
                ),
            ],
        ),
    ),
)

WRITE_SHARE_GROUP_STATE = Api(
    85,
    "WriteShareGroupState",
    "0",
    flexible="0+",
    request=(
        F("group_id", STRING),
        F(
            "topics",
            [
                F("topic_id", UUID),
                F(
                    "partitions",
                    [
                        F("partition", INT32),
                        F("state_epoch", INT32),
                        F("leader_epoch", INT32),
                        F("start_offset", INT64),
                        _STATE_BATCHES,
                    ],
                ),
            ],
        ),
    ),
    response=(
        F(
            "results",
            [
                F("topic_id", UUID),
                F(
                    "partitions",
                    [
                        F("partition", INT32),
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+", default=None),
                    ],
                ),
            ],
        ),
    ),
)
