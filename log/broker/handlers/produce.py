"""Produce (key 0), v0-9 (v9 is the first flexible version).

v0-2 carry the old message formats and are answered with UNSUPPORTED_VERSION
per partition (the range is still advertised from 0: librdkafka disables
compression when a broker's minimum is above 0). v3+ carries one RecordBatch
v2 per partition. The batch is validated by header and CRC only, stamped
with its offsets and appended as received, compression included.

Transactional batches (attribute bit 4) are taken from a request naming its
``transactional_id``, which the caller may WRITE; otherwise every partition is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers. The partition keeps
the transaction open from its first batch until the coordinator's marker
(see :mod:`~eventplatform.log.replica.producer_state`); partitions are not
verified against the coordinator (no KIP-890).

Errors per partition: UNKNOWN_TOPIC_OR_PARTITION, CORRUPT_MESSAGE (CRC,
magic, framing), MESSAGE_TOO_LARGE (``max.message.bytes``), INVALID_RECORD
(control batches, which only a partition's leader writes; a producer id without
a sequence; more than one batch; keyless records on a compacted topic),
TOPIC_AUTHORIZATION_FAILED (no WRITE on the topic), INVALID_TOPIC_EXCEPTION
(internal topics such as
``__consumer_offsets``), UNSUPPORTED_COMPRESSION_TYPE, OUT_OF_ORDER_SEQUENCE_NUMBER and
INVALID_PRODUCER_EPOCH (idempotence), INVALID_TXN_STATE (a non-transactional
batch from a producer whose transaction is open); a batch behind one this replica refused
with a retriable answer gets that answer rather than OUT_OF_ORDER (see
:mod:`producer_state`). A retried batch already in the log is answered with
its original offset. A batch refused for some of its records
(keyless records on a compacted topic: the only check that looks inside a
batch, and only on compacted topics) names them from v8 in ``record_errors``
(index in the batch, reason), as Kafka does (KIP-467); clients then fail
those records with the partition's error and the others of the batch as
refused with them. acks=0 gets no response at all; acks=1
is answered after the leader's append. acks=-1 is refused with
NOT_ENOUGH_REPLICAS while the ISR is smaller than ``min.insync.replicas``,
and is answered once the whole ISR has the batch (the high watermark passed
it, however the leader epoch moved meanwhile), or once a new leader's high
watermark passed it when leadership moved and the batch survived; with
NOT_LEADER_OR_FOLLOWER ("not persisted") only once the batch is gone from
this replica's log, and with REQUEST_TIMED_OUT ("possibly persisted") when
``timeout_ms`` passes with its fate unknown (see
:meth:`Partition.wait_replicated`); a standalone broker is the whole ISR.
That wait is a :class:`Deferred` response: the batches are appended before
the next request on the connection is read, and the connection goes on
reading while the replicas catch up. Only the leader
appends (NOT_LEADER_OR_FOLLOWER). Unknown topics are created when
auto-creation is on.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import (
    AclOperation,
    AclResourceType,
    authorize,
    auto_create,
)
from eventplatform.log.broker.context import Body, Deferred, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import PRODUCE
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.partition import ACKS_ALL, Partition, ProduceResult
from eventplatform.log.security.quotas import PRODUCER_BYTE_RATE
from eventplatform.log.storage import BatchHeader, StorageError
from eventplatform.log.storage.record_batch import TRANSACTIONAL_BIT, parse_header

API = PRODUCE
VERSIONS = Versions.parse("0-9")
_ATTRIBUTES_LOW = 22
"""Where a batch's attributes (int16 at byte 21) keep their low byte."""
FIRST_RECORD_BATCH_VERSION = 3
ACKS = (0, 1, -1)


async def handle(context: RequestContext, request: Body) -> Body | Deferred | None:
    acks = request["acks"]
    if context.version < FIRST_RECORD_BATCH_VERSION:
        error = ProduceResult(ErrorCode.UNSUPPORTED_VERSION, message="produce v3+ is required")
        responses = _answer_all(request, error)
    elif acks not in ACKS:
        error = ProduceResult(ErrorCode.INVALID_REQUIRED_ACKS, message=f"acks={acks}")
        responses = _answer_all(request, error)
    elif _has_transactional_batches(request) and not _may_write_transactions(context, request):
        message = f"WRITE on the transactional id {request['transactional_id']!r}"
        error = ProduceResult(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, message=message)
        responses = _answer_all(request, error)
    else:
        responses, waits = await _append_all(context, request)
        throttle_ms = context.broker.throttle(
            context.session, context.header.client_id, PRODUCER_BYTE_RATE, _request_bytes(request)
        )
        if waits:
            deadline = trio.current_time() + max(request["timeout_ms"], 0) / 1000

            async def replicated() -> Body:
                await _wait_replicated(waits, deadline)
                return {"responses": responses, "throttle_time_ms": throttle_ms}

            return Deferred(replicated)
        await trio.lowlevel.checkpoint()
        return None if acks == 0 else {"responses": responses, "throttle_time_ms": throttle_ms}
    await trio.lowlevel.checkpoint()
    if acks == 0:
        return None
    return {"responses": responses}


def _has_transactional_batches(request: Body) -> bool:
    """Whether any partition's batch has the transactional attribute (whatever else is
    wrong with it: the partition answers that)."""
    for topic in request["topic_data"]:
        for entry in topic["partition_data"]:
            records = entry["records"]
            # the attributes' low byte, read in place: no header is parsed twice here
            if (
                records
                and len(records) > _ATTRIBUTES_LOW
                and records[_ATTRIBUTES_LOW] & TRANSACTIONAL_BIT
            ):
                return True
    return False


def _may_write_transactions(context: RequestContext, request: Body) -> bool:
    transactional_id = request["transactional_id"]
    return transactional_id is not None and authorize(
        context, AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, transactional_id
    )


def _header(records: bytes | None) -> BatchHeader | None:
    """The header of a partition's first batch, or None when it does not parse."""
    if not records:
        return None
    try:
        return parse_header(records)
    except StorageError:
        return None


def _unsequenced(records: bytes) -> ProduceResult | None:
    """INVALID_RECORD for a client's batch with a producer id and no sequence, as Kafka's
    validator answers: only coordinators append those."""
    header = _header(records)
    if header is None or header.is_control or header.producer_id < 0 or header.base_sequence >= 0:
        return None  # a control batch is refused as one, by the partition
    message = f"a batch of producer {header.producer_id} has sequence {header.base_sequence}"
    return ProduceResult(ErrorCode.INVALID_RECORD, message=message)


def _request_bytes(request: Body) -> int:
    """The record bytes a produce carries: what ``producer_byte_rate`` counts."""
    return sum(
        len(entry["records"] or b"")
        for topic in request["topic_data"]
        for entry in topic["partition_data"]
    )


Wait = tuple[Body, Partition, int, int]


async def _append_all(context: RequestContext, request: Body) -> tuple[list[Body], list[Wait]]:
    """Append every partition's batch; the responses, and the acks=all appends still to
    replicate (each response entry with its partition, last offset and the leader epoch
    it was written in: a retry's original may be from an earlier one)."""
    broker = context.broker
    acks = request["acks"]
    responses = []
    waits: list[Wait] = []
    for topic_data in request["topic_data"]:
        name = topic_data["name"]
        if not authorize(context, AclOperation.WRITE, AclResourceType.TOPIC, name):
            refused = ProduceResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED, message="WRITE")
            responses.append(
                {
                    "name": name,
                    "partition_responses": [
                        _partition_response(entry["index"], refused)
                        for entry in topic_data["partition_data"]
                    ],
                }
            )
            continue
        topic = broker.topics.get(name) or await auto_create(context, name)
        partitions = []
        for partition_data in topic_data["partition_data"]:
            index = partition_data["index"]
            records = partition_data["records"]
            if topic is None or not 0 <= index < len(topic.partitions):
                result = ProduceResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif topic.internal:
                message = f"clients may not write to the internal topic {name}"
                result = ProduceResult(ErrorCode.INVALID_TOPIC_EXCEPTION, message=message)
            elif not records:
                result = ProduceResult(ErrorCode.CORRUPT_MESSAGE, message="no record data")
            elif (partition := topic.partitions[index]) is None:
                result = ProduceResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            elif (unsequenced := _unsequenced(records)) is not None:
                result = unsequenced
            else:
                result = partition.append(records, acks=acks)
                epoch = None
                if acks == ACKS_ALL and result.error == ErrorCode.NONE:
                    epoch = partition.replication_epoch(result.last_offset)
                if epoch is not None:
                    entry = _partition_response(index, result)
                    partitions.append(entry)
                    waits.append((entry, partition, result.last_offset, epoch))
                    continue
            partitions.append(_partition_response(index, result))
        responses.append({"name": name, "partition_responses": partitions})
    return responses, waits


async def _wait_replicated(waits: list[Wait], deadline: float) -> None:
    """Wait for the ISR to have each acks=all append, all against one deadline; a partition
    whose append did not replicate in time answers with the error instead."""
    for entry, partition, last_offset, epoch in waits:
        error = await partition.wait_replicated(last_offset, epoch, deadline)
        if error != ErrorCode.NONE:
            entry["error_code"] = error
            entry["base_offset"] = -1
            entry["error_message"] = error.name


def _answer_all(request: Body, error: ProduceResult) -> list[Body]:
    """The same error for every partition of the request."""
    return [
        {
            "name": topic_data["name"],
            "partition_responses": [
                _partition_response(partition["index"], error)
                for partition in topic_data["partition_data"]
            ],
        }
        for topic_data in request["topic_data"]
    ]


def _partition_response(index: int, result: ProduceResult) -> Body:
    """One partition's answer; the records a validation named become ``record_errors``
    (v8+), here and nowhere else, so every per-record refusal reads the same."""
    return {
        "index": index,
        "error_code": result.error,
        "base_offset": result.base_offset,
        "log_append_time_ms": result.log_append_time_ms,
        "log_start_offset": result.log_start_offset,
        "record_errors": [
            {"batch_index": error.batch_index, "batch_index_error_message": error.message}
            for error in result.record_errors
        ],
        "error_message": result.message if result.error else None,
    }
