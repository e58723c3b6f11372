"""Transaction markers: how a transaction's end reaches every partition it wrote to.

:func:`write_marker` is what a partition's leader does (WriteTxnMarkers, or the
coordinator for its own partitions): append the commit or abort marker as the
producer's control batch, wait until the partition's ISR holds it, and, on a
``__consumer_offsets`` partition, have the group coordinator commit or drop the
offsets the transaction committed there.

:func:`write_markers` is the coordinator's side: it sends each partition's
marker to that partition's leader, this broker's own directly and the others'
grouped by leader in one WriteTxnMarkers each, and retries what failed
(``RETRY_BACKOFF_S`` growing to ``RETRY_BACKOFF_MAX_S``) until every partition
has its marker, or is gone (a deleted topic needs none), or this broker no
longer coordinates the transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import trio

from eventplatform.log.cluster.peer import PeerError
from eventplatform.log.groups.records import OFFSETS_TOPIC
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import WRITE_TXN_MARKERS
from eventplatform.log.storage import KafkaStorageError
from eventplatform.log.transactions.core import Markers

if TYPE_CHECKING:
    from eventplatform.log.broker.broker import Broker

log = logging.getLogger("eventplatform.transactions")

MARKER_TIMEOUT_S = 30.0
"""How long one marker waits for its partition's ISR, and one WriteTxnMarkers for its answer."""
RETRY_BACKOFF_S = 0.05
RETRY_BACKOFF_MAX_S = 2.0
WRITE_TXN_MARKERS_VERSION = 1
_GONE = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID})


async def write_marker(
    broker: Broker,
    topic: str,
    index: int,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
) -> ErrorCode:
    """Write one marker on a partition this broker leads; see the module."""
    partition = broker.topics.partition(topic, index)
    if partition is None:
        await trio.lowlevel.checkpoint()
        return broker.topics.absence_error(topic, index)
    error = partition.check_leader()
    if error is not ErrorCode.NONE:
        await trio.lowlevel.checkpoint()
        return error
    try:
        result = partition.write_marker(producer_id, producer_epoch, commit, coordinator_epoch)
    except KafkaStorageError:
        await trio.lowlevel.checkpoint()
        return ErrorCode.KAFKA_STORAGE_ERROR
    if result.error is not ErrorCode.NONE:
        await trio.lowlevel.checkpoint()
        return result.error
    epoch = partition.replication_epoch(result.last_offset)
    if epoch is not None:
        deadline = trio.current_time() + MARKER_TIMEOUT_S
        error = await partition.wait_replicated(result.last_offset, epoch, deadline)
        if error is not ErrorCode.NONE:
            return error
    else:
        await trio.lowlevel.checkpoint()
    if topic == OFFSETS_TOPIC and broker.groups is not None:
        broker.groups.complete_transaction(index, producer_id, commit)
    return ErrorCode.NONE


async def write_markers(broker: Broker, markers: Markers, coordinator_epoch: int) -> bool:
    """Every partition of ``markers`` gets its marker; False when this broker stopped
    coordinating the transaction first."""
    coordinator = broker.transactions
    assert coordinator is not None
    remaining = set(markers.partitions)
    backoff = RETRY_BACKOFF_S
    while remaining:
        if coordinator.status(markers.transactional_id) is not ErrorCode.NONE:
            return False
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic, index in sorted(remaining):
            if broker.topics.get(topic) is None:
                remaining.discard((topic, index))  # deleted: nothing to mark
                continue
            leader = broker.leader_of(topic, index)
            by_leader.setdefault(leader, []).append((topic, index))
        done: set[tuple[str, int]] = set()
        for leader, partitions in by_leader.items():
            if leader == broker.node_id:
                for topic, index in partitions:
                    error = await write_marker(
                        broker,
                        topic,
                        index,
                        markers.producer_id,
                        markers.producer_epoch,
                        markers.commit,
                        coordinator_epoch,
                    )
                    if error is ErrorCode.NONE or error in _GONE:
                        done.add((topic, index))
            elif leader >= 0:
                done |= await _send(broker, leader, markers, partitions, coordinator_epoch)
        remaining -= done
        if remaining:
            log.debug(
                "transaction %s: %d markers to retry", markers.transactional_id, len(remaining)
            )
            await trio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
    return True


async def _send(
    broker: Broker,
    leader: int,
    markers: Markers,
    partitions: Iterable[tuple[str, int]],
    coordinator_epoch: int,
) -> set[tuple[str, int]]:
    """One WriteTxnMarkers to ``leader``: the partitions it marked (or no longer has)."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    body = {
        "markers": [
            {
                "producer_id": markers.producer_id,
                "producer_epoch": markers.producer_epoch,
                "transaction_result": markers.commit,
                "topics": [
                    {"name": name, "partition_indexes": indexes}
                    for name, indexes in by_topic.items()
                ],
                "coordinator_epoch": coordinator_epoch,
            }
        ]
    }
    try:
        answer = await broker.peers.request(
            leader, WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body, timeout_s=MARKER_TIMEOUT_S
        )
    except PeerError as exc:
        log.info("transaction markers to broker %d: %s", leader, exc)
        return set()
    done = set()
    for marker in answer["markers"]:
        for topic in marker["topics"]:
            for entry in topic["partitions"]:
                error = ErrorCode(entry["error_code"])
                if error is ErrorCode.NONE or error in _GONE:
                    done.add((topic["name"], entry["partition_index"]))
    return done
