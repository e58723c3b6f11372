"""EndTxn (key 26), v0-3: a transactional producer commits or aborts its transaction.

The coordinator writes PrepareCommit (or PrepareAbort) and answers once that is
kept; the markers are written to every partition of the transaction after the
answer, and until they are, the producer's next InitProducerId, AddPartitionsToTxn
or EndTxn is CONCURRENT_TRANSACTIONS (clients retry). A retried EndTxn of a
transaction already ended the same way is NONE, the other way INVALID_TXN_STATE.
Needs WRITE on the transactional id. A stale epoch is PRODUCER_FENCED
(INVALID_PRODUCER_EPOCH before v2).
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.handlers.init_producer_id import fenced_as
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import END_TXN
from eventplatform.log.protocol.schema import Versions

API = END_TXN
VERSIONS = Versions.parse("0-3")
PRODUCER_FENCED_VERSION = 2


async def handle(context: RequestContext, request: Body) -> Body:
    transactional_id = request["transactional_id"]
    coordinator = context.broker.transactions
    if not authorize(
        context, AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, transactional_id
    ):
        await trio.lowlevel.checkpoint()
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif coordinator is None:
        await trio.lowlevel.checkpoint()
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    else:
        error = await coordinator.end_transaction(
            transactional_id,
            request["producer_id"],
            request["producer_epoch"],
            request["committed"],
        )
    return {
        "throttle_time_ms": 0,
        "error_code": fenced_as(error, context.header.api_version, PRODUCER_FENCED_VERSION),
    }
