"""ListTransactions (key 66), v0-1: the transactional ids this broker coordinates,
with their producer ids and states, filtered by state names (Kafka's: Empty,
Ongoing, ...; unknown names are returned in ``unknown_state_filters``), producer
ids and, from v1, by running longer than ``duration_filter`` milliseconds.

Only ids the caller may DESCRIBE are listed.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import LIST_TRANSACTIONS
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.transactions.records import TransactionStatus

API = LIST_TRANSACTIONS
VERSIONS = Versions.parse("0-1")


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    coordinator = context.broker.transactions
    labels = {status.label: status for status in TransactionStatus}
    wanted = [name for name in request["state_filters"] if name in labels]
    unknown = [name for name in request["state_filters"] if name not in labels]
    producers = set(request["producer_id_filters"])
    duration = request["duration_filter"]
    now_ms = context.broker.clock_ms()
    listed = []
    if coordinator is not None:
        for tid, found in sorted(coordinator.core.transactions.items()):
            record = found.record
            if coordinator.status(tid) is not ErrorCode.NONE:
                continue
            if wanted and record.status.label not in wanted:
                continue
            if producers and record.producer_id not in producers:
                continue
            if duration >= 0 and (record.start_ms < 0 or now_ms - record.start_ms < duration):
                continue
            if not authorize(context, AclOperation.DESCRIBE, AclResourceType.TRANSACTIONAL_ID, tid):
                continue
            listed.append(
                {
                    "transactional_id": tid,
                    "producer_id": record.producer_id,
                    "transaction_state": record.status.label,
                }
            )
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE
        if coordinator is not None
        else ErrorCode.COORDINATOR_NOT_AVAILABLE,
        "unknown_state_filters": unknown,
        "transaction_states": listed,
    }
