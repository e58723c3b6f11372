"""The controller quorum (KRaft): votes, leader epochs and snapshots.

Declarative tables, one ``Api`` each; see ``eventplatform.log.protocol.schema``.
"""

from __future__ import annotations

from eventplatform.log.protocol.schema import (
    BOOL,
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
