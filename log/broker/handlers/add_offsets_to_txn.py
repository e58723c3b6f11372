"""AddOffsetsToTxn (key 25), v0-3: a transactional producer is about to commit a
consumer group's offsets inside its transaction (``send_offsets_to_transaction``).

The coordinator adds the group's ``__consumer_offsets`` partition to the
transaction, so the transaction's marker reaches it. Needs WRITE on the
transactional id and READ on the group. A stale epoch is PRODUCER_FENCED
(INVALID_PRODUCER_EPOCH before v2).
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.handlers.init_producer_id import fenced_as
from eventplatform.log.groups.records import OFFSETS_TOPIC, partition_for
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import ADD_OFFSETS_TO_TXN
from eventplatform.log.protocol.schema import Versions

API = ADD_OFFSETS_TO_TXN
VERSIONS = Versions.parse("0-3")
PRODUCER_FENCED_VERSION = 2


async def handle(context: RequestContext, request: Body) -> Body:
    transactional_id, group_id = request["transactional_id"], request["group_id"]
    coordinator = context.broker.transactions
    if not authorize(
        context, AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, transactional_id
    ):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not authorize(context, AclOperation.READ, AclResourceType.GROUP, group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    elif coordinator is None:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        offsets = context.broker.topics.get(OFFSETS_TOPIC)
        if offsets is None or not group_id:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE if group_id else ErrorCode.INVALID_GROUP_ID
        else:
            partition = (OFFSETS_TOPIC, partition_for(group_id, len(offsets.partitions)))
            error = await coordinator.add_partitions(
                transactional_id,
                request["producer_id"],
                request["producer_epoch"],
                [partition],
            )
    await trio.lowlevel.checkpoint()
    return {
        "throttle_time_ms": 0,
        "error_code": fenced_as(error, context.header.api_version, PRODUCER_FENCED_VERSION),
    }
