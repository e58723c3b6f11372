"""EntityRead (this log's own API, key 32000), v0: one entity's batches.

The partition's leader answers with the batches, below the high watermark, that hold
records with the request's key at ``from_offset`` or after, through the partition's
entity index (see :mod:`eventplatform.log.protocol.apis.entities`). A topic that keeps
no entity versions is INVALID_REQUEST, saying so; a ``from_offset`` past the high
watermark is OFFSET_OUT_OF_RANGE; one below the log start reads from the log start, and
the answer's ``log_start_offset`` tells the reader that history is gone. Replicas that do
not lead answer NOT_LEADER_OR_FOLLOWER, and ``current_leader_epoch`` is checked as
ListOffsets checks it.

The API is not advertised by ApiVersions (``ADVERTISED``): clients of Kafka have no
use for it.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.extensions import ENTITY_VERSIONS_CONFIG
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import ENTITY_READ
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.storage import KafkaStorageError

API = ENTITY_READ
VERSIONS = Versions.parse("0")
ADVERTISED = False


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    topic, index = request["topic"], request["partition"]
    if not authorize(context, AclOperation.READ, AclResourceType.TOPIC, topic):
        return _error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "READ on the topic is needed")
    registry = context.broker.topics
    partition = registry.partition(topic, index)
    if partition is None:
        return _error(registry.absence_error(topic, index))
    error = partition.check_leader(request["current_leader_epoch"])
    if error is not ErrorCode.NONE:
        return _error(error)
    if not partition.log.config.eventplatform_entity_versions_enable:
        message = f"topic {topic} keeps no entity versions ({ENTITY_VERSIONS_CONFIG} is false)"
        return _error(ErrorCode.INVALID_REQUEST, message)
    if request["max_bytes"] < 0:
        return _error(ErrorCode.INVALID_REQUEST, f"max_bytes {request['max_bytes']} < 0")
    high_watermark = partition.high_watermark
    if request["from_offset"] > high_watermark:
        message = f"from_offset {request['from_offset']} is past the high watermark"
        return _error(ErrorCode.OFFSET_OUT_OF_RANGE, f"{message} {high_watermark}")
    try:
        batches, next_offset = partition.entity_batches(
            request["key"], request["from_offset"], request["max_bytes"]
        )
        records = b"".join(batches)
    except (KafkaStorageError, OSError) as exc:
        return _error(ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
    return {
        "error_code": ErrorCode.NONE,
        "high_watermark": high_watermark,
        "log_start_offset": partition.log_start_offset,
        "next_offset": next_offset,
        "records": records,
    }


def _error(error: ErrorCode, message: str | None = None) -> Body:
    return {"error_code": error, "error_message": message}
