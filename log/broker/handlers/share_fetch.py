"""ShareFetch (key 78), v1: a share group's member acquires records, and settles
those it holds on the way (KIP-932).

The request names the member's share session (:mod:`~eventplatform.log.groups.share_sessions`):
epoch 0 opens it, the next epoch carries it on, -1 closes it (acknowledgements
only). Its partitions are added to the session, its forgotten partitions
leave it (what the member held there is released). Then, for every partition
of the session this broker leads, the broker acquires what is available for
the member (:mod:`~eventplatform.log.broker.sharing`): whole batches from the
log, and the offsets acquired in them with their delivery counts. With
nothing to hand out, the request waits up to ``max_wait_ms`` (at most
``MAX_WAIT_MS_MAX``) for an append or a release.

Acknowledgements piggy-backed on the request are applied first and answered
in each partition's ``acknowledge_error_code``; they are kept by the share
coordinator before the answer leaves. A partition this broker does not lead
is NOT_LEADER_OR_FOLLOWER, with the leader it knows in ``current_leader``.
Needs READ on the group (GROUP_AUTHORIZATION_FAILED, for the whole request)
and READ on each topic (TOPIC_AUTHORIZATION_FAILED, for its partitions).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import trio

from eventplatform.log.broker.authorizer import AclOperation, AclResourceType, authorize, may_group
from eventplatform.log.broker.context import Body, RequestContext
from eventplatform.log.broker.regions import OwnedRegion
from eventplatform.log.broker.sharing import PartitionFetch
from eventplatform.log.groups.share_partition import AckBatch
from eventplatform.log.groups.share_sessions import CLOSE_EPOCH, OPEN_EPOCH, ShareSession
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import SHARE_FETCH
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.partition import Partition

API = SHARE_FETCH
VERSIONS = Versions.parse("1")
MAX_WAIT_MS_MAX = 60_000
MAX_RECORDS_DEFAULT = 500


@dataclass(slots=True)
class Named:
    """A partition of the request, by topic id and the name it has here ("" unknown)."""

    topic_id: bytes
    topic: str
    index: int
    batches: list[AckBatch] = field(default_factory=list)


@dataclass(slots=True)
class Opened:
    """A request's session, or the top-level error that refused it."""

    session: ShareSession | None
    error: ErrorCode
    message: str | None = None


def named_partitions(context: RequestContext, topics: list[Body]) -> list[Named]:
    names = {topic.topic_id: name for name, topic in context.broker.topics.topics.items()}
    named = []
    for entry in topics:
        topic_id = bytes(entry["topic_id"])
        for part in entry["partitions"]:
            batches = [
                AckBatch(b["first_offset"], b["last_offset"], tuple(b["acknowledge_types"]))
                for b in part.get("acknowledgement_batches", [])
            ]
            named.append(Named(topic_id, names.get(topic_id, ""), part["partition_index"], batches))
    return named


def open_session(context: RequestContext, request: Body) -> Opened:
    """Check the request's group and member, and open, continue or close its session."""
    group_id, member_id = request["group_id"], request["member_id"]
    if not group_id or not member_id:
        return Opened(None, ErrorCode.INVALID_REQUEST, "GroupId and MemberId are required")
    if not may_group(context, AclOperation.READ, group_id):
        return Opened(None, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    shares = context.broker.shares
    epoch = request["share_session_epoch"]
    if epoch == OPEN_EPOCH:
        session, replaced, error = shares.sessions.open(group_id, member_id, context.connection_id)
        if replaced is not None:
            shares.release(group_id, member_id, replaced.partitions)
        return Opened(session, error)
    session, error = shares.sessions.resume(group_id, member_id, epoch)
    return Opened(session, error)


def partition_error(context: RequestContext, named: Named) -> tuple[Partition | None, ErrorCode]:
    """The partition this broker leads, or why a request cannot use it here."""
    if not named.topic:
        return None, ErrorCode.UNKNOWN_TOPIC_ID
    if not authorize(context, AclOperation.READ, AclResourceType.TOPIC, named.topic):
        return None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
    partition = context.broker.topics.partition(named.topic, named.index)
    if partition is None:
        return None, context.broker.topics.absence_error(named.topic, named.index)
    return partition, partition.check_leader()


async def apply_acknowledgements(
    context: RequestContext, group_id: str, member_id: str, named: list[Named]
) -> dict[tuple[str, int], ErrorCode]:
    """Apply each partition's acknowledgement batches; the error of each partition
    that had some."""
    shares = context.broker.shares
    results: dict[tuple[str, int], ErrorCode] = {}
    for entry in named:
        if not entry.batches:
            continue
        partition, error = partition_error(context, entry)
        if partition is not None and error is ErrorCode.NONE:
            held = await shares.share_partition(group_id, partition, entry.topic_id)
            if held is None:
                error = ErrorCode.INVALID_RECORD_STATE  # nothing is held under a lost state
            else:
                key = (group_id, entry.topic, entry.index)
                error = await shares.acknowledge(group_id, member_id, held, key, entry.batches)
        results[entry.topic, entry.index] = error
    return results


def leader_of(context: RequestContext, partition: Partition | None) -> Body:
    if partition is None:
        return {"leader_id": -1, "leader_epoch": -1}
    return {"leader_id": partition.leader_id, "leader_epoch": partition.leader_epoch}


def node_endpoints(context: RequestContext, partitions: list[Partition | None]) -> list[Body]:
    """The address of every leader named in ``current_leader`` of an error."""
    wanted = {p.leader_id for p in partitions if p is not None and p.leader_id >= 0}
    return [
        {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
        for b in context.broker.membership.live_brokers()
        if b.node_id in wanted
    ]


async def handle(context: RequestContext, request: Body) -> Body:
    top: Body = {"throttle_time_ms": 0, "acquisition_lock_timeout_ms": 0, "responses": []}
    top["node_endpoints"] = []
    opened = open_session(context, request)
    if opened.session is None:
        await trio.lowlevel.checkpoint()
        return {**top, "error_code": opened.error, "error_message": opened.message}
    session = opened.session
    shares = context.broker.shares
    group_id, member_id = session.group_id, session.member_id
    named = named_partitions(context, request["topics"])
    forgotten = named_partitions(
        context,
        [
            {
                "topic_id": t["topic_id"],
                "partitions": [{"partition_index": p} for p in t["partitions"]],
            }
            for t in request["forgotten_topics_data"]
        ],
    )
    acks = await apply_acknowledgements(context, group_id, member_id, named)
    outcomes: dict[tuple[str, int], PartitionFetch] = {}
    partitions: dict[tuple[str, int], Partition | None] = {}
    ids: dict[tuple[str, int], bytes] = {}
    forget = {(entry.topic, entry.index) for entry in forgotten if entry.topic}
    shares.release(group_id, member_id, forget)
    closing = request["share_session_epoch"] == CLOSE_EPOCH
    if closing:
        shares.release(group_id, member_id, session.partitions)
    else:
        session.partitions -= forget
        for entry in named:
            key = (entry.topic, entry.index)
            partition, error = partition_error(context, entry)
            if entry.topic:
                session.partitions.add(key)
            partitions[key] = partition
            ids[key] = entry.topic_id
            if error is not ErrorCode.NONE:
                outcomes[key] = PartitionFetch(error)
        await _acquire(context, request, session, outcomes, partitions, ids)
    for key in acks:
        outcomes.setdefault(key, PartitionFetch()).acknowledge_error = acks[key]
    responses: dict[bytes, list[Body]] = {}
    for key, outcome in outcomes.items():
        partition = partitions.get(key) or context.broker.topics.partition(*key)
        topic = context.broker.topics.get(key[0])
        topic_id = ids.get(key) or (topic.topic_id if topic is not None else bytes(16))
        records: OwnedRegion | bytes = b""  # never null: clients read an empty set
        if outcome.data is not None:
            data = outcome.data
            records = OwnedRegion(os.dup(data.descriptor), data.position, data.length)
        responses.setdefault(topic_id, []).append(
            {
                "partition_index": key[1],
                "error_code": outcome.error,
                "error_message": None,
                "acknowledge_error_code": outcome.acknowledge_error or ErrorCode.NONE,
                "acknowledge_error_message": None,
                "current_leader": leader_of(context, partition),
                "records": records,
                "acquired_records": [
                    {
                        "first_offset": a.first_offset,
                        "last_offset": a.last_offset,
                        "delivery_count": a.delivery_count,
                    }
                    for a in outcome.acquired
                ],
            }
        )
    failed = [
        partitions.get(k)
        for k, o in outcomes.items()
        if o.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    ]
    return {
        **top,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "acquisition_lock_timeout_ms": shares.lock_duration_ms(group_id),
        "responses": [
            {"topic_id": topic_id, "partitions": parts} for topic_id, parts in responses.items()
        ],
        "node_endpoints": node_endpoints(context, failed),
    }


async def _acquire(
    context: RequestContext,
    request: Body,
    session: ShareSession,
    outcomes: dict[tuple[str, int], PartitionFetch],
    partitions: dict[tuple[str, int], Partition | None],
    ids: dict[tuple[str, int], bytes],
) -> None:
    """Acquire from every partition of the session this broker leads, waiting up to
    ``max_wait_ms`` while there is nothing to hand out."""
    shares = context.broker.shares
    topics = context.broker.topics
    max_wait_s = min(max(request["max_wait_ms"], 0), MAX_WAIT_MS_MAX) / 1000
    deadline = trio.current_time() + max_wait_s
    max_records = request["max_records"] if request["max_records"] > 0 else MAX_RECORDS_DEFAULT
    while True:
        budget_records, budget_bytes = max_records, request["max_bytes"]
        leading: list[Partition] = []
        for key in sorted(session.partitions):
            if key in outcomes and outcomes[key].error is not ErrorCode.NONE:
                continue
            partition = topics.partition(*key)
            topic = topics.get(key[0])
            if partition is None or topic is None or partition.check_leader() is not ErrorCode.NONE:
                continue
            partitions.setdefault(key, partition)
            ids.setdefault(key, topic.topic_id)
            leading.append(partition)
            if budget_records <= 0 or budget_bytes <= 0:
                continue
            held = await shares.share_partition(session.group_id, partition, topic.topic_id)
            if held is None or not partition.is_leader:
                continue
            outcome = shares.acquire(
                session.group_id,
                session.member_id,
                held,
                partition,
                max_records=budget_records,
                max_bytes=budget_bytes,
            )
            if outcome.acquired or outcome.error is not ErrorCode.NONE:
                outcomes[key] = outcome
                budget_records -= sum(a.last_offset - a.first_offset + 1 for a in outcome.acquired)
                if outcome.data is not None:
                    budget_bytes -= outcome.data.length
        acquired = any(o.acquired for o in outcomes.values())
        if acquired or not leading or trio.current_time() >= deadline:
            return
        await shares.wait_for_records(leading, deadline)
