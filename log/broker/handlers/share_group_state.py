"""ReadShareGroupState (key 84) and WriteShareGroupState (key 85), v0: what a
share-partition leader asks of the share coordinator (KIP-932).

Between brokers only: not listed in ApiVersions, and the caller needs
CLUSTER_ACTION on the cluster. The group's coordinator
(:mod:`~eventplatform.log.groups.share_coordinator`) answers; another broker
answers NOT_COORDINATOR. A read of a state never written answers state epoch
-1; a write of a state epoch older than the kept one is FENCED_STATE_EPOCH.
One partition per request is what leaders send; every one listed is answered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from eventplatform.log.broker.authorizer import AclOperation, authorize_cluster
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.records import ShareStateKey
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.schema import Versions

VERSIONS = Versions.parse("0")
ADVERTISED = False

Answer = Callable[[RequestContext, ShareStateKey, Body], Awaitable[Body]]


async def answer_each(context: RequestContext, request: Body, answer: Answer) -> Body:
    allowed = authorize_cluster(context, AclOperation.CLUSTER_ACTION)
    groups = context.broker.groups
    results = []
    for topic in request["topics"]:
        partitions = []
        for entry in topic["partitions"]:
            key = ShareStateKey(request["group_id"], bytes(topic["topic_id"]), entry["partition"])
            if not allowed:
                body: Body = {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
            elif groups is None:
                body = {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
            else:
                body = await answer(context, key, entry)
            partitions.append({"partition": key.partition, "state_epoch": -1, **body})
        results.append({"topic_id": topic["topic_id"], "partitions": partitions})
    await trio.lowlevel.checkpoint()
    return {"results": results}
