"""WriteTxnMarkers (key 27), v0-1: a transaction coordinator has a partition's leader
write a transaction's commit or abort marker (:mod:`~eventplatform.log.broker.transaction_markers`).

Between brokers only: not listed in ApiVersions, and the caller needs
CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED for every partition).
Each partition is answered once the marker is written and its ISR holds it; one
this broker does not lead is NOT_LEADER_OR_FOLLOWER, one that does not exist
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, authorize_cluster
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.transaction_markers import write_marker
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import WRITE_TXN_MARKERS
from eventplatform.log.protocol.schema import Versions

API = WRITE_TXN_MARKERS
VERSIONS = Versions.parse("0-1")
ADVERTISED = False


async def handle(context: RequestContext, request: Body) -> Body:
    allowed = authorize_cluster(context, AclOperation.CLUSTER_ACTION)
    answers = []
    for marker in request["markers"]:
        topics = []
        for topic in marker["topics"]:
            partitions = []
            for index in topic["partition_indexes"]:
                if not allowed:
                    error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                else:
                    error = await write_marker(
                        context.broker,
                        topic["name"],
                        index,
                        marker["producer_id"],
                        marker["producer_epoch"],
                        marker["transaction_result"],
                        marker["coordinator_epoch"],
                    )
                partitions.append({"partition_index": index, "error_code": error})
            topics.append({"name": topic["name"], "partitions": partitions})
        answers.append({"producer_id": marker["producer_id"], "topics": topics})
    await trio.lowlevel.checkpoint()
    return {"markers": answers}
