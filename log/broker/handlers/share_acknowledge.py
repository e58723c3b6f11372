"""ShareAcknowledge (key 79), v1: a share group's member settles the records it holds.

The request carries the member's share session epoch like a ShareFetch (see
:mod:`.share_fetch`; -1 closes the session and releases what the member still
holds) and acknowledgement batches per partition: ACCEPT, RELEASE, REJECT or
GAP, one type for a whole batch or one per offset. Each partition's batches
are applied all or none (INVALID_RECORD_STATE for an offset the member does
not hold) and kept by the share coordinator before the answer leaves.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.handlers.share_fetch import (
    apply_acknowledgements,
    leader_of,
    named_partitions,
    node_endpoints,
    open_session,
)
from eventplatform.log.groups.share_sessions import CLOSE_EPOCH, OPEN_EPOCH
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import SHARE_ACKNOWLEDGE
from eventplatform.log.protocol.schema import Versions

API = SHARE_ACKNOWLEDGE
VERSIONS = Versions.parse("1")


async def handle(context: RequestContext, request: Body) -> Body:
    top: Body = {"throttle_time_ms": 0, "responses": [], "node_endpoints": []}
    if request["share_session_epoch"] == OPEN_EPOCH:
        await trio.lowlevel.checkpoint()
        return {
            **top,
            "error_code": ErrorCode.INVALID_SHARE_SESSION_EPOCH,
            "error_message": "a share session is opened by ShareFetch",
        }
    opened = open_session(context, request)
    if opened.session is None:
        await trio.lowlevel.checkpoint()
        return {**top, "error_code": opened.error, "error_message": opened.message}
    session = opened.session
    named = named_partitions(context, request["topics"])
    results = await apply_acknowledgements(context, session.group_id, session.member_id, named)
    if request["share_session_epoch"] == CLOSE_EPOCH:
        context.broker.shares.release(session.group_id, session.member_id, session.partitions)
    responses: dict[bytes, list[Body]] = {}
    ids = {(entry.topic, entry.index): entry.topic_id for entry in named}
    failed = []
    for key, error in results.items():
        partition = context.broker.topics.partition(*key)
        if error is ErrorCode.NOT_LEADER_OR_FOLLOWER:
            failed.append(partition)
        responses.setdefault(ids[key], []).append(
            {
                "partition_index": key[1],
                "error_code": error,
                "error_message": None,
                "current_leader": leader_of(context, partition),
            }
        )
    return {
        **top,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "responses": [{"topic_id": t, "partitions": parts} for t, parts in responses.items()],
        "node_endpoints": node_endpoints(context, failed),
    }
