"""FindCoordinator (key 10), v0-2.

The coordinator of a group (key type 0) is the leader of the group's
``__consumer_offsets`` partition, that of a transactional id (key type 1) the
leader of the id's ``__transaction_state`` partition (a broker on its own leads
them all; each topic is created at the first FindCoordinator that needs it).
v0 has no key type and means a group.
Any other key type is INVALID_REQUEST. Until the group coordinator has
started (or after it stopped) the answer is COORDINATOR_NOT_AVAILABLE with
no node, and clients retry; while it loads ``__consumer_offsets`` the broker
is named, and group requests answer COORDINATOR_LOAD_IN_PROGRESS until the
load ends. v1+ carries an error message.
"""

from __future__ import annotations

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize
from eventplatform.log.broker.broker import Broker
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.groups.records import OFFSETS_TOPIC, partition_for
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import FIND_COORDINATOR
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.topics import TopicError
from eventplatform.log.transactions.records import TRANSACTION_STATE_TOPIC

API = FIND_COORDINATOR
VERSIONS = Versions.parse("0-2")
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
_TRANSACTIONAL_ID = AclResourceType.TRANSACTIONAL_ID


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    broker = context.broker
    key_type = request["key_type"]
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return _no_coordinator(ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}")
    resource = AclResourceType.GROUP if key_type == GROUP_KEY_TYPE else _TRANSACTIONAL_ID
    if not authorize(context, AclOperation.DESCRIBE, resource, request["key"]):
        refusal = (
            ErrorCode.GROUP_AUTHORIZATION_FAILED
            if key_type == GROUP_KEY_TYPE
            else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
        return _no_coordinator(refusal, "DESCRIBE on the key is needed")
    if key_type == TRANSACTION_KEY_TYPE:
        if broker.transactions is None:
            return _no_coordinator(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is not running"
            )
        return await _leader_of_key(
            broker, TRANSACTION_STATE_TOPIC, request["key"], context.session.listener
        )
    coordinator = broker.groups
    if coordinator is None or not coordinator.is_available:
        return _no_coordinator(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running"
        )
    return await _leader_of_key(broker, OFFSETS_TOPIC, request["key"], context.session.listener)


def _named(node_id: int, host: str, port: int) -> Body:
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "node_id": node_id,
        "host": host,
        "port": port,
    }


def _no_coordinator(error: ErrorCode, message: str) -> Body:
    return {"error_code": error, "error_message": message, "node_id": -1, "host": "", "port": -1}


async def _leader_of_key(broker: Broker, topic_name: str, key: str, listener: str) -> Body:
    """The leader of ``key``'s partition of ``topic_name``; the first FindCoordinator
    that needs the topic creates it (on a cluster, through the controller)."""
    try:
        topic = await broker.ensure_coordinator_topic(topic_name)
    except TopicError as exc:
        return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc))
    layout = broker.membership.layout(topic)
    if not layout:
        return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "creating the topic")
    leader = layout[partition_for(key, len(layout))].leader
    if leader == broker.node_id:
        return _named(leader, *broker.advertised_address(listener))
    for node in broker.membership.live_brokers():
        address = node.address(listener)
        if node.node_id == leader and address is not None:
            return _named(node.node_id, *address)
    return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the partition has no leader")
