"""FindCoordinator (key 10), v0-2.

The coordinator of a group (key type 0) is the leader of the group's
``__consumer_offsets`` partition (a broker on its own leads them all; a
cluster creates the topic at the first FindCoordinator); this broker answers
for every transactional id (key type 1). v0 has no key type and means a group.
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
        return _named(broker.node_id, *broker.advertised_address(context.session.listener))
    coordinator = broker.groups
    if coordinator is None or not coordinator.is_available:
        return _no_coordinator(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running"
        )
    return await _leader_of_group_partition(broker, request["key"], context.session.listener)


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


async def _leader_of_group_partition(broker: Broker, group_id: str, listener: str) -> Body:
    """The coordinator is the leader of the group's ``__consumer_offsets`` partition; the
    first FindCoordinator of a cluster creates that topic through the controller."""
    topic = broker.topics.get(OFFSETS_TOPIC)
    if topic is None:
        live = len(broker.membership.live_brokers())
        factor = min(broker.config.offsets_topic_replication_factor, live)
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(broker.config.offsets_topic_segment_bytes),
        }
        try:
            await broker.create_topic(
                OFFSETS_TOPIC, broker.config.offsets_topic_num_partitions, max(factor, 1), configs
            )
        except TopicError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc))
        topic = broker.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "creating the topic")
    layout = broker.membership.layout(topic)
    if not layout:
        return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "creating the topic")
    leader = layout[partition_for(group_id, len(layout))].leader
    if leader == broker.node_id:
        return _named(leader, *broker.advertised_address(listener))
    for node in broker.membership.live_brokers():
        address = node.address(listener)
        if node.node_id == leader and address is not None:
            return _named(node.node_id, *address)
    return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the partition has no leader")
