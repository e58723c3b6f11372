"""DescribeTransactions (key 65), v0: the state of transactional ids this broker
coordinates: producer id and epoch, timeout, start time, state (Kafka's names:
Empty, Ongoing, PrepareCommit, ...) and the partitions of an ongoing transaction.

Needs DESCRIBE on each transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
an id this broker does not coordinate is NOT_COORDINATOR (or
COORDINATOR_LOAD_IN_PROGRESS), one it does not know TRANSACTIONAL_ID_NOT_FOUND.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import DESCRIBE_TRANSACTIONS
from eventplatform.log.protocol.schema import Versions

API = DESCRIBE_TRANSACTIONS
VERSIONS = Versions.parse("0")


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    coordinator = context.broker.transactions
    states = []
    for tid in request["transactional_ids"]:
        entry: Body = {"transactional_id": tid, "transaction_state": "", "producer_id": -1}
        if not authorize(context, AclOperation.DESCRIBE, AclResourceType.TRANSACTIONAL_ID, tid):
            states.append({**entry, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
            continue
        error = (
            ErrorCode.COORDINATOR_NOT_AVAILABLE if coordinator is None else coordinator.status(tid)
        )
        found = None if coordinator is None else coordinator.core.transactions.get(tid)
        if error is ErrorCode.NONE and found is None:
            error = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        if error is not ErrorCode.NONE or found is None:
            states.append({**entry, "error_code": error})
            continue
        record = found.record
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(record.partitions):
            by_topic.setdefault(topic, []).append(index)
        states.append(
            {
                **entry,
                "error_code": ErrorCode.NONE,
                "transaction_state": record.status.label,
                "transaction_timeout_ms": record.timeout_ms,
                "transaction_start_time_ms": record.start_ms,
                "producer_id": record.producer_id,
                "producer_epoch": record.producer_epoch,
                "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()],
            }
        )
    return {"throttle_time_ms": 0, "transaction_states": states}
