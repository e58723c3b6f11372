"""EraseRecords (this log's own API, key 32001), v0: erase records on every replica.

The partition's leader takes the request. It needs DELETE on the topic, as
DeleteRecords does. The offsets must lie below the high watermark (acknowledged
records; OFFSET_OUT_OF_RANGE otherwise); offsets below the log start are gone already
and count nothing. The erasure is committed through the membership (the cluster's
metadata, or the broker itself on its own), and the answer waits, at most
``timeout_ms`` (REQUEST_TIMED_OUT after it: committed, still to be done here), until
this replica has erased them; every other replica erases them as it applies the
metadata, and serves no read past them until it has. Control records are left alone.
``erased`` counts the offsets the log held. Not advertised by ApiVersions.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import ERASE_RECORDS
from eventplatform.log.protocol.apis.entities import ERASE_OFFSETS_MAX
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError

API = ERASE_RECORDS
VERSIONS = Versions.parse("0")
ADVERTISED = False
TIMEOUT_MS_DEFAULT = 30_000
"""The wait when the request asks for none (``timeout_ms`` 0 or less)."""
TIMEOUT_MS_MAX = 300_000
"""The longest a request may wait for the erasure to be done here."""


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    topic, index, offsets = request["topic"], request["partition"], request["offsets"]
    if not authorize(context, AclOperation.DELETE, AclResourceType.TOPIC, topic):
        return _error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "DELETE on the topic is needed")
    registry = context.broker.topics
    partition = registry.partition(topic, index)
    if partition is None:
        return _error(registry.absence_error(topic, index))
    error = partition.check_leader(request["current_leader_epoch"])
    if error is not ErrorCode.NONE:
        return _error(error)
    if len(offsets) > ERASE_OFFSETS_MAX:
        message = f"{len(offsets)} offsets; one request erases at most {ERASE_OFFSETS_MAX}"
        return _error(ErrorCode.INVALID_REQUEST, message)
    wanted = sorted(set(offsets))
    if not wanted:
        return {"error_code": ErrorCode.NONE, "erased": 0}
    high_watermark = partition.high_watermark
    if wanted[0] < 0 or wanted[-1] >= high_watermark:
        message = f"offsets must lie in [0, {high_watermark}) (the high watermark)"
        return _error(ErrorCode.OFFSET_OUT_OF_RANGE, message)
    held = [offset for offset in wanted if offset >= partition.log_start_offset]
    timeout_ms = request["timeout_ms"] if request["timeout_ms"] > 0 else TIMEOUT_MS_DEFAULT
    with trio.move_on_after(min(timeout_ms, TIMEOUT_MS_MAX) / 1000) as waited:
        try:
            await context.broker.membership.erase(topic, index, wanted)
        except TopicError as exc:
            return _error(exc.code, str(exc))
        await partition.erasures.wait_done(held)
    if waited.cancelled_caught:
        message = "the erasure is committed but not yet done on the leader"
        return _error(ErrorCode.REQUEST_TIMED_OUT, message)
    return {"error_code": ErrorCode.NONE, "erased": len(held)}


def _error(error: ErrorCode, message: str | None = None) -> Body:
    return {"error_code": error, "error_message": message}
