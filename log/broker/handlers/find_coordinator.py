"""FindCoordinator (key 10), v0-2.

This single broker is the coordinator of every group (key type 0) and of
every transactional id (key type 1); v0 has no key type and means a group.
Any other key type is INVALID_REQUEST. Until the group coordinator has
started (or after it stopped) the answer is COORDINATOR_NOT_AVAILABLE with
no node, and clients retry; while it loads ``__consumer_offsets`` the broker
is named, and group requests answer COORDINATOR_LOAD_IN_PROGRESS until the
load ends. v1+ carries an error message.
"""

from __future__ import annotations

import trio

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


async def handle(context: RequestContext, request: Body) -> Body:
    await trio.lowlevel.checkpoint()
    broker = context.broker
    key_type = request["key_type"]
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return _no_coordinator(ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}")
    coordinator = broker.groups
    if key_type == GROUP_KEY_TYPE and (coordinator is None or not coordinator.is_available):
        return _no_coordinator(
            ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running"
        )
    if key_type == GROUP_KEY_TYPE and broker.member is not None:
        return await _leader_of_group_partition(broker, request["key"])
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "node_id": broker.node_id,
        "host": broker.advertised_host,
        "port": broker.port,
    }


def _no_coordinator(error: ErrorCode, message: str) -> Body:
    return {"error_code": error, "error_message": message, "node_id": -1, "host": "", "port": -1}


async def _leader_of_group_partition(broker: Broker, group_id: str) -> Body:
    """In a cluster, the coordinator is the leader of the group's ``__consumer_offsets``
    partition; the first FindCoordinator creates that topic through the controller."""
    assert broker.member is not None
    topic = broker.topics.get(OFFSETS_TOPIC)
    if topic is None:
        image = broker.member.replicas.image
        factor = min(broker.config.offsets_topic_replication_factor, len(image.live_brokers()))
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
    image = broker.member.replicas.image
    state = image.topics.get(OFFSETS_TOPIC)
    if state is None:
        return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "creating the topic")
    leader = state.partitions[partition_for(group_id, len(state.partitions))].leader
    node = image.brokers.get(leader)
    if node is None or node.fenced:
        return _no_coordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the partition has no leader")
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "node_id": node.broker,
        "host": node.host,
        "port": node.port,
    }
