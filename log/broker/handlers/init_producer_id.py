"""InitProducerId (key 22), v0-4.

Gives an idempotent producer (null ``transactional_id``) a new producer id
with epoch 0; ids are never reused, even across restarts. In a cluster the
ids come from blocks the controller hands each broker through the metadata
log, so no two brokers give out the same id.

A transactional producer's request goes to its transactional id's coordinator
(:mod:`~eventplatform.log.transactions.coordinator`): it gets the id's producer
id with the epoch raised, which fences every earlier producer of that id, and
an ongoing transaction of the id is aborted first (CONCURRENT_TRANSACTIONS
until it is). From v3 a producer recovering from an error names its producer
id and epoch (KIP-360); a stale pair is PRODUCER_FENCED, told as
INVALID_PRODUCER_EPOCH before v4. Needs WRITE on the transactional id, or for
an idempotent producer IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import (
    AclOperation,
    AclResourceType,
    authorize,
    authorize_any,
    authorize_cluster,
)
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import INIT_PRODUCER_ID
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError

API = INIT_PRODUCER_ID
VERSIONS = Versions.parse("0-4")
PRODUCER_FENCED_VERSION = 4


async def handle(context: RequestContext, request: Body) -> Body:
    transactional_id = request["transactional_id"]
    if transactional_id is not None:
        return await _transactional(context, request, transactional_id)
    await trio.lowlevel.checkpoint()
    may_write = authorize_cluster(context, AclOperation.IDEMPOTENT_WRITE) or authorize_any(
        context, AclOperation.WRITE, AclResourceType.TOPIC
    )
    if not may_write:
        return _refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        producer_id = await context.broker.membership.allocate_producer_id()
    except TopicError as exc:
        return _refused(exc.code)
    return {"error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}


async def _transactional(context: RequestContext, request: Body, transactional_id: str) -> Body:
    if not authorize(
        context, AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, transactional_id
    ):
        await trio.lowlevel.checkpoint()
        return _refused(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    coordinator = context.broker.transactions
    if coordinator is None:
        await trio.lowlevel.checkpoint()
        return _refused(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    expected = None
    if request["producer_id"] >= 0:
        expected = (request["producer_id"], request["producer_epoch"])
    error, producer_id, epoch = await coordinator.init_producer_id(
        transactional_id, request["transaction_timeout_ms"], expected
    )
    return {
        "error_code": fenced_as(error, context.header.api_version, PRODUCER_FENCED_VERSION),
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }


def fenced_as(error: ErrorCode, version: int, first_fenced_version: int) -> ErrorCode:
    """PRODUCER_FENCED as a client of ``version`` knows it: INVALID_PRODUCER_EPOCH before
    the API's first version that defines it, as Kafka answers."""
    if error is ErrorCode.PRODUCER_FENCED and version < first_fenced_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def _refused(error: ErrorCode) -> Body:
    return {"error_code": error, "producer_id": -1, "producer_epoch": -1}
