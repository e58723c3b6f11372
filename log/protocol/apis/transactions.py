"""Transactions (KIP-98): the coordinator's APIs, the markers it has partition leaders
write, transactional offset commits, and the admin views of producers and transactions.

Declarative tables, one ``Api`` each; see ``eventplatform.log.protocol.schema``.
"""

from __future__ import annotations

from eventplatform.log.protocol.schema import (
    BOOL,
    INT16,
    INT32,
    INT64,
    STRING,
    Api,
    Array,
    F,
)

_TXN_TOPICS = [F("name", STRING), F("partitions", Array(INT32))]
_TXN_TOPIC_RESULTS = [
    F("name", STRING),
    F(
        "results_by_partition",
        [F("partition_index", INT32), F("partition_error_code", INT16)],
    ),
]

ADD_PARTITIONS_TO_TXN = Api(
    24,
    "AddPartitionsToTxn",
    "0-5",
    flexible="3+",
    request=(
        F(
            "transactions",
            [
                F("transactional_id", STRING),
                F("producer_id", INT64),
                F("producer_epoch", INT16),
                F("verify_only", BOOL),
                F("topics", _TXN_TOPICS),
            ],
            "4+",
        ),
        F("v3_and_below_transactional_id", STRING, "0-3"),
        F("v3_and_below_producer_id", INT64, "0-3"),
        F("v3_and_below_producer_epoch", INT16, "0-3"),
        F("v3_and_below_topics", _TXN_TOPICS, "0-3"),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16, "4+"),
        F(
            "results_by_transaction",
            [F("transactional_id", STRING), F("topic_results", _TXN_TOPIC_RESULTS)],
            "4+",
        ),
        F("results_by_topic_v3_and_below", _TXN_TOPIC_RESULTS, "0-3"),
    ),
)

ADD_OFFSETS_TO_TXN = Api(
    25,
    "AddOffsetsToTxn",
    "0-4",
    flexible="3+",
    request=(
        F("transactional_id", STRING),
        F("producer_id", INT64),
        F("producer_epoch", INT16),
        F("group_id", STRING),
    ),
    response=(F("throttle_time_ms", INT32), F("error_code", INT16)),
)

END_TXN = Api(
    26,
    "EndTxn",
    "0-5",
    flexible="3+",
    request=(
        F("transactional_id", STRING),
        F("producer_id", INT64),
        F("producer_epoch", INT16),
        F("committed", BOOL),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("producer_id", INT64, "5+", default=-1),
        F("producer_epoch", INT16, "5+", default=-1),
    ),
)

WRITE_TXN_MARKERS = Api(
    27,
    "WriteTxnMarkers",
    "0-1",
    flexible="1+",
    request=(
        F(
            "markers",
            [
                F("producer_id", INT64),
                F("producer_epoch", INT16),
                F("transaction_result", BOOL),
                F("topics", [F("name", STRING), F("partition_indexes", Array(INT32))]),
                F("coordinator_epoch", INT32),
            ],
        ),
    ),
    response=(
        F(
            "markers",
            [
                F("producer_id", INT64),
                F(
                    "topics",
                    [
                        F("name", STRING),
                        F("partitions", [F("partition_index", INT32), F("error_code", INT16)]),
                    ],
                ),
            ],
        ),
    ),
)

TXN_OFFSET_COMMIT = Api(
    28,
    "TxnOffsetCommit",
    "0-4",
    flexible="3+",
    request=(
        F("transactional_id", STRING),
        F("group_id", STRING),
        F("producer_id", INT64),
        F("producer_epoch", INT16),
        F("generation_id", INT32, "3+", default=-1),
        F("member_id", STRING, "3+"),
        F("group_instance_id", STRING, "3+", nullable="3+", default=None),
        F(
            "topics",
            [
                F("name", STRING),
                F(
                    "partitions",
                    [
                        F("partition_index", INT32),
                        F("committed_offset", INT64),
                        F("committed_leader_epoch", INT32, "2+", default=-1),
                        F("committed_metadata", STRING, nullable="0+"),
                    ],
                ),
            ],
        ),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "topics",
            [
                F("name", STRING),
                F("partitions", [F("partition_index", INT32), F("error_code", INT16)]),
            ],
        ),
    ),
)

DESCRIBE_PRODUCERS = Api(
    61,
    "DescribeProducers",
    "0",
    flexible="0+",
    request=(F("topics", [F("name", STRING), F("partition_indexes", Array(INT32))]),),
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
                        F("error_code", INT16),
                        F("error_message", STRING, nullable="0+", default=None),
                        F(
                            "active_producers",
                            [
                                F("producer_id", INT64),
                                F("producer_epoch", INT32),
                                F("last_sequence", INT32, default=-1),
                                F("last_timestamp", INT64, default=-1),
                                F("coordinator_epoch", INT32),
                                F("current_txn_start_offset", INT64, default=-1),
                            ],
                        ),
                    ],
                ),
            ],
        ),
    ),
)

DESCRIBE_TRANSACTIONS = Api(
    65,
    "DescribeTransactions",
    "0",
    flexible="0+",
    request=(F("transactional_ids", Array(STRING)),),
    response=(
        F("throttle_time_ms", INT32),
        F(
            "transaction_states",
            [
                F("error_code", INT16),
                F("transactional_id", STRING),
                F("transaction_state", STRING),
                F("transaction_timeout_ms", INT32),
                F("transaction_start_time_ms", INT64),
                F("producer_id", INT64),
                F("producer_epoch", INT16),
                F("topics", [F("topic", STRING), F("partitions", Array(INT32))]),
            ],
        ),
    ),
)

LIST_TRANSACTIONS = Api(
    66,
    "ListTransactions",
    "0-1",
    flexible="0+",
    request=(
        F("state_filters", Array(STRING)),
        F("producer_id_filters", Array(INT64)),
        F("duration_filter", INT64, "1+", default=-1),
    ),
    response=(
        F("throttle_time_ms", INT32),
        F("error_code", INT16),
        F("unknown_state_filters", Array(STRING)),
        F(
            "transaction_states",
            [
                F("transactional_id", STRING),
                F("producer_id", INT64),
                F("transaction_state", STRING),
            ],
        ),
    ),
)
