"""InitProducerId (key 22), v0-1.

Gives an idempotent producer (null ``transactional_id``) a new producer id
with epoch 0; ids are never reused, even across restarts. In a cluster the
ids come from blocks the controller hands each broker through the metadata
log, so no two brokers give out the same id. Transactions are
not offered: a transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
which clients report as fatal instead of retrying forever.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import (
    AclOperation,
    AclResourceType,
    authorize_any,
    authorize_cluster,
)
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import INIT_PRODUCER_ID
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError

API = INIT_PRODUCER_ID
VERSIONS = Versions.parse("0-1")


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    if request["transactional_id"] is not None:
        return {
            "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    may_write = authorize_cluster(context, AclOperation.IDEMPOTENT_WRITE) or authorize_any(
        context, AclOperation.WRITE, AclResourceType.TOPIC
    )
    if not may_write:
        return {
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    try:
        producer_id = await context.broker.membership.allocate_producer_id()
    except TopicError as exc:
        return {"error_code": exc.code, "producer_id": -1, "producer_epoch": -1}
    return {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}
