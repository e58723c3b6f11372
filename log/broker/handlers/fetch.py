"""Fetch (key 1), v4-11 for clients; v15 between brokers.

Reads whole batches below the high watermark from every requested partition,
bounded by ``partition_max_bytes`` and the response-wide ``max_bytes``; the
first batch found is returned whole even when larger, so a consumer always
makes progress (KIP-74). When fewer than ``min_bytes`` are ready the request
waits, up to ``max_wait_ms``, for an append to any of its partitions: a
``trio.Event`` registered with each partition, no polling.

Every answer carries the partition's ``last_stable_offset`` (the high watermark,
or the first offset of the earliest transaction whose marker is not in yet). A
read_committed consumer (``isolation_level`` 1) reads below it only, and gets
the ``aborted_transactions`` (producer id, first offset) of the aborted
transactions that overlap the records returned: their marker at or after the
fetch offset, their first offset before the end of the data (Kafka's
``collectAbortedTransactions``), read from the segments' transaction indexes;
it drops those producers' records from each first offset to the abort marker.
read_uncommitted consumers read below the high watermark and get null there,
and a follower reads to the log end. Incremental fetch sessions are not
offered: ``session_id`` is always 0, which clients take as "send full
requests". From v9 ``current_leader_epoch`` is checked (FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH). Record data leaves as file regions that the connection
sends with ``os.sendfile``.

A consumer reads from a partition's leader, or from v11 from any replica in
its replica set (KIP-392): a follower serves what is below its own high
watermark, and OFFSET_OUT_OF_RANGE past its log end, which sends the client
back to the leader. With ``replica.selector.class`` set, the leader answers
a consumer that names its rack (``rack_id``) with a ``preferred_read_replica``
in that rack and no records, at once (see
:mod:`~eventplatform.log.replica.selector`). Any other replica answers
NOT_LEADER_OR_FOLLOWER. A fetch with a
replica id comes from a follower: it reads up to the log end, not the high
watermark, and its fetch offset tells the leader how far that follower has
come (which moves the high watermark and the ISR). So on a cluster it is
believed only when it proves who sent it: v15, not advertised to clients
(:data:`INTER_BROKER_VERSIONS`), carries ``ReplicaState`` {replica id,
broker epoch} and names topics by id, and the epoch must be the broker's
current registration in the metadata. A replica fetch without it (v4-11)
or with another epoch gets STALE_BROKER_EPOCH, one from a broker that is
not a replica of the partition NOT_LEADER_OR_FOLLOWER, and one from past
the leader's log end OFFSET_OUT_OF_RANGE; none of them moves anything. A
consumer fetch at v15 gets UNSUPPORTED_VERSION.

A consumer needs READ on each topic and a follower CLUSTER_ACTION on the cluster;
a partition the caller may not read is TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import trio

from eventplatform.log.broker.authorizer import (
    AclOperation,
    AclResourceType,
    authorize,
    authorize_cluster,
)
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.regions import OwnedRegion
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import FETCH
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.partition import Partition
from eventplatform.log.replica.selector import (
    NO_PREFERENCE,
    ReplicaView,
    select_rack_aware,
)
from eventplatform.log.security.quotas import CONSUMER_BYTE_RATE
from eventplatform.log.storage import KafkaStorageError, OffsetOutOfRangeError, SegmentSlice

API = FETCH
VERSIONS = Versions.parse("4-11")
INTER_BROKER_VERSIONS = Versions.parse("15")
REPLICA_STATE_VERSION = 15
TOPIC_ID_VERSION = 13
FOLLOWER_READ_VERSION = 11
"""From v11 a consumer names its rack and may read from a follower (KIP-392)."""
READ_COMMITTED = 1
MAX_WAIT_MS_MAX = 60_000
NO_EPOCH = -1


@dataclass(slots=True)
class _Read:
    """One partition's outcome in one pass over the request."""

    topic: str
    index: int
    partition: Partition | None
    error: ErrorCode
    data: SegmentSlice | None = None
    preferred: int = NO_PREFERENCE
    aborted: list[Body] | None = None
    """For a read_committed read with data: the aborted transactions it overlaps."""


async def handle(context: RequestContext, request: Body) -> Body:
    version = context.header.api_version
    replica, replica_epoch = _replica(request)
    if version >= REPLICA_STATE_VERSION and replica < 0:
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "session_id": 0, "responses": []}
    if version >= TOPIC_ID_VERSION:
        _name_topics(context, request)
    refused = _unauthorized(context, request, replica=replica >= 0)
    if replica >= 0 and not refused:
        refused = _note_replica_fetch(context, request, replica, replica_epoch)
    max_wait_s = min(max(request["max_wait_ms"], 0), MAX_WAIT_MS_MAX) / 1000
    deadline = trio.current_time() + max_wait_s
    # The checkpoint comes first: between the last read and ``_response`` nothing may
    # yield, or a DeleteTopics could close the segment descriptors the reads point at.
    await trio.lowlevel.checkpoint()
    read_committed = replica < 0 and request["isolation_level"] == READ_COMMITTED
    while True:
        reads = _read_all(context, request, refused, committed=read_committed)
        ready = sum(read.data.length for read in reads if read.data is not None)
        # an error, or a read sent to another replica, is answered at once
        settled = any(
            read.error != ErrorCode.NONE or read.preferred != NO_PREFERENCE for read in reads
        )
        if ready >= request["min_bytes"] or settled or trio.current_time() >= deadline:
            break
        await _wait_for_append(reads, deadline)
    return _response(context, reads, read_committed=read_committed, consumer=replica < 0)


def _replica(request: Body) -> tuple[int, int]:
    """The fetching replica's id and broker epoch; (-1, -1) for a consumer. Before v15 a
    follower sends its id alone, and no epoch."""
    state = request["replica_state"]
    if state["replica_id"] >= 0:
        return state["replica_id"], state["replica_epoch"]
    return request["replica_id"], NO_EPOCH


def _name_topics(context: RequestContext, request: Body) -> None:
    """From v13 topics are named by id: fill in each one's name ("" when unknown)."""
    names = {topic.topic_id: name for name, topic in context.broker.topics.topics.items()}
    for topic_entry in request["topics"]:
        topic_entry["topic"] = names.get(topic_entry["topic_id"], "")


def _unauthorized(
    context: RequestContext, request: Body, *, replica: bool
) -> dict[tuple[str, int], ErrorCode]:
    """The partitions the caller may not read: a consumer needs READ on each topic, a
    follower CLUSTER_ACTION on the cluster (else none of its partitions are read, and
    its fetch offsets move nothing). Checked before existence, so a topic one may not
    read is not told apart from one that does not exist."""
    if replica:
        allowed = authorize_cluster(context, AclOperation.CLUSTER_ACTION)
    refused: dict[tuple[str, int], ErrorCode] = {}
    for topic_entry in request["topics"]:
        name = topic_entry["topic"]
        if not replica:
            allowed = authorize(context, AclOperation.READ, AclResourceType.TOPIC, name)
        if not allowed:
            for entry in topic_entry["partitions"]:
                refused[name, entry["partition"]] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return refused


def _note_replica_fetch(
    context: RequestContext, request: Body, replica: int, replica_epoch: int
) -> dict[tuple[str, int], ErrorCode]:
    """Tell each partition a follower fetched; the partitions that refused to believe it."""
    now_ms = context.broker.clock_ms()
    registered = context.broker.membership.registered_broker(replica)
    current = registered is not None and registered.epoch == replica_epoch
    refused: dict[tuple[str, int], ErrorCode] = {}
    for topic_entry in request["topics"]:
        for entry in topic_entry["partitions"]:
            key = (topic_entry["topic"], entry["partition"])
            partition = context.broker.topics.partition(*key)
            if partition is None:
                continue  # the read answers that
            if partition.check_leader(entry["current_leader_epoch"]) != ErrorCode.NONE:
                continue  # the read answers that
            error = partition.on_follower_fetch(replica, current, entry["fetch_offset"], now_ms)
            if error != ErrorCode.NONE:
                refused[key] = error
    return refused


def _read_all(
    context: RequestContext,
    request: Body,
    refused: dict[tuple[str, int], ErrorCode],
    *,
    committed: bool,
) -> list[_Read]:
    topics = context.broker.topics
    budget = request["max_bytes"]
    replica = _replica(request)[0] >= 0
    version = context.header.api_version
    by_id = version >= TOPIC_ID_VERSION
    from_follower = not replica and version >= FOLLOWER_READ_VERSION
    rack = request["rack_id"] if from_follower else ""
    reads = []
    for topic_entry in request["topics"]:
        name = topic_entry["topic"]
        for entry in topic_entry["partitions"]:
            partition = topics.partition(name, entry["partition"])
            if (name, entry["partition"]) in refused:
                read = _Read(name, entry["partition"], partition, refused[name, entry["partition"]])
            elif partition is None:
                error = topics.absence_error(name, entry["partition"])
                if by_id and not name:
                    error = ErrorCode.UNKNOWN_TOPIC_ID
                read = _Read(name, entry["partition"], None, error)
            else:
                preferred = _preferred_replica(context, partition, rack, entry["fetch_offset"])
                if preferred != NO_PREFERENCE:
                    read = _Read(name, entry["partition"], partition, ErrorCode.NONE)
                    read.preferred = preferred
                    reads.append(read)
                    continue
                read = _read_partition(
                    partition,
                    entry,
                    budget,
                    replica=replica,
                    from_follower=from_follower,
                    committed=committed,
                )
                if read.data is not None:
                    if read.data.length > budget and budget < request["max_bytes"]:
                        # Only the first partition with data may exceed max_bytes (KIP-74).
                        read.data = None
                    else:
                        budget -= read.data.length
            reads.append(read)
    return reads


def _preferred_replica(
    context: RequestContext, partition: Partition, rack: str, fetch_offset: int
) -> int:
    """The follower the leader sends a consumer in ``rack`` to, or NO_PREFERENCE."""
    broker = context.broker
    replicas = partition.replicas
    if not rack or not broker.config.replica_selector_class:
        return NO_PREFERENCE
    if replicas is None or partition.check_leader() != ErrorCode.NONE:
        return NO_PREFERENCE  # no followers (a broker on its own), or not the leader
    now_ms = broker.clock_ms()
    leader = ReplicaView(partition.node_id, broker.config.broker_rack, partition.log.log_end_offset)
    followers = [
        ReplicaView(replica, known.rack, state.log_end_offset, now_ms - state.last_caught_up_ms)
        for replica, state in replicas.followers.items()
        if replica in replicas.isr
        and state.log_end_offset >= fetch_offset
        and (known := broker.membership.registered_broker(replica)) is not None
        and not known.fenced
    ]
    return select_rack_aware(rack, leader, followers)


def _read_partition(
    partition: Partition,
    entry: Body,
    budget: int,
    *,
    replica: bool,
    from_follower: bool,
    committed: bool,
) -> _Read:
    """One partition's read: below the high watermark, the last stable offset when
    ``committed`` (with the aborted transactions the data overlaps), or the log end for
    a follower."""
    read = _Read(partition.topic, partition.index, partition, ErrorCode.NONE)
    if from_follower:
        read.error = partition.check_replica(entry["current_leader_epoch"])
    else:
        read.error = partition.check_leader(entry["current_leader_epoch"])
    if read.error != ErrorCode.NONE:
        return read
    if budget <= 0:
        return read
    limit = max(min(entry["partition_max_bytes"], budget), 1)
    try:
        offset = entry["fetch_offset"]
        if replica:
            read.data = partition.read_for_replica(offset, limit)
        else:
            read.data = partition.read(offset, limit, committed=committed)
        if committed and read.data is not None:
            read.aborted = [
                {"producer_id": producer_id, "first_offset": first_offset}
                for producer_id, first_offset in partition.aborted_transactions(
                    offset, read.data.end_offset
                )
            ]
    except OffsetOutOfRangeError:
        read.error = ErrorCode.OFFSET_OUT_OF_RANGE
    except KafkaStorageError:
        read.error = ErrorCode.KAFKA_STORAGE_ERROR
    return read


async def _wait_for_append(reads: list[_Read], deadline: float) -> None:
    event = trio.Event()
    partitions = [read.partition for read in reads if read.partition is not None]
    for partition in partitions:
        partition.add_waiter(event)
    try:
        with trio.move_on_at(deadline):
            await event.wait()
    finally:
        for partition in partitions:
            partition.remove_waiter(event)


def _response(
    context: RequestContext, reads: list[_Read], *, read_committed: bool, consumer: bool
) -> Body:
    """Build the body; record data becomes regions with their own descriptors. A
    consumer's bytes count against its ``consumer_byte_rate`` quota."""
    topics: dict[str, list[Body]] = {}
    for read in reads:
        partition = read.partition
        entry: Body = {"partition_index": read.index, "error_code": read.error, "records": b""}
        if partition is not None:
            entry["high_watermark"] = partition.high_watermark
            entry["last_stable_offset"] = partition.last_stable_offset
            entry["log_start_offset"] = partition.log_start_offset
        else:
            entry["high_watermark"] = entry["last_stable_offset"] = entry["log_start_offset"] = -1
        entry["aborted_transactions"] = None
        if read_committed:
            entry["aborted_transactions"] = read.aborted or []
        entry["preferred_read_replica"] = read.preferred
        if read.data is not None and read.error == ErrorCode.NONE:
            data = read.data
            entry["records"] = OwnedRegion(os.dup(data.descriptor), data.position, data.length)
        topics.setdefault(read.topic, []).append(entry)
    fetched = sum(read.data.length for read in reads if read.data is not None and not read.error)
    throttle_ms = 0
    if consumer:
        throttle_ms = context.broker.throttle(
            context.session, context.header.client_id, CONSUMER_BYTE_RATE, fetched
        )
    return {
        "error_code": 0,
        "throttle_time_ms": throttle_ms,
        "session_id": 0,
        "responses": [
            {"topic": name, "topic_id": _topic_id(context, name), "partitions": partitions}
            for name, partitions in topics.items()
        ],
    }


def _topic_id(context: RequestContext, name: str) -> bytes:
    topic = context.broker.topics.get(name)
    return topic.topic_id if topic is not None else bytes(16)
