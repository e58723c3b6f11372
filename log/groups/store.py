"""Groups and committed offsets as records of ``__consumer_offsets``: Kafka's GroupMetadataManager.

``GroupStore`` owns the ``RecordSink`` and writes every record the
coordinator persists: a group's metadata (the leader's assignment, a
generation that starts with no member, a static member taking over), the
offsets a member commits, and the tombstones that delete offsets and
groups. A failed write is answered with Kafka's mapping of the append
error (``group_store_error``, ``offset_store_error``). It also decides
which committed offsets are past retention (``expired_offsets``, pure),
and ``restore_group`` turns what the loader read back into a ``Group``.

Callers: :mod:`eventplatform.log.groups.core` (metadata, and restoring
groups at load), :mod:`eventplatform.log.groups.offsets` (commits) and
:mod:`eventplatform.log.groups.admin` (tombstones and expiry). The store
holds no groups itself; it updates the ``Group`` it is given only after its
write succeeded.

Concurrency: called only from the coordinator's trio thread; every append
is synchronous, so a write and the state change that follows it are never
interleaved with another request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from eventplatform.log.groups.group import Group, GroupState, Member
from eventplatform.log.groups.messages import GroupConfig, OffsetCommit, Record, RecordSink
from eventplatform.log.groups.records import (
    CommittedOffset,
    GroupRecord,
    MemberRecord,
    TopicPartition,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from eventplatform.log.invariants import require
from eventplatform.log.protocol import ErrorCode

log = logging.getLogger("eventplatform.groups")

_COORDINATOR_UNAVAILABLE_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)
_NOT_COORDINATOR_ERRORS = frozenset(
    {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR}
)
_TOO_LARGE_ERRORS = frozenset(
    {ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE}
)


def group_store_error(error: ErrorCode) -> ErrorCode:
    """What a failed group-metadata write is answered with (Kafka's mapping)."""
    if error in _COORDINATOR_UNAVAILABLE_ERRORS:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in _NOT_COORDINATOR_ERRORS:
        return ErrorCode.NOT_COORDINATOR
    if error is ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.UNKNOWN_SERVER_ERROR


def offset_store_error(error: ErrorCode) -> ErrorCode:
    """What a failed offset-commit write is answered with (Kafka's mapping)."""
    if error in _COORDINATOR_UNAVAILABLE_ERRORS:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in _NOT_COORDINATOR_ERRORS:
        return ErrorCode.NOT_COORDINATOR
    if error in _TOO_LARGE_ERRORS:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    if error is ErrorCode.REQUEST_TIMED_OUT:
        return error
    return ErrorCode.UNKNOWN_SERVER_ERROR


class GroupStore:
    """See the module docstring."""

    def __init__(
        self, config: GroupConfig, sink: RecordSink, wall_clock_ms: Callable[[], int]
    ) -> None:
        self.config = config
        self.sink = sink
        self.wall_clock_ms = wall_clock_ms

    def store_group(self, group: Group, assignment: Mapping[str, bytes]) -> ErrorCode:
        """Write the group's metadata record; the error is already mapped for clients."""
        key = encode_group_key(group.group_id)
        value = encode_group_value(_group_record(group, assignment))
        error = self.sink.append(group.group_id, [(key, value)])
        if error is ErrorCode.NONE:
            return error
        log.warning("group %s: metadata write failed with %s", group.group_id, error.name)
        return group_store_error(error)

    def store_offsets(
        self,
        group: Group,
        offsets: Mapping[TopicPartition, OffsetCommit],
        producer: tuple[int, int] | None = None,
    ) -> dict[TopicPartition, int]:
        """Write the offsets as one batch and keep them in ``group``; an error per partition.

        Offsets whose metadata is too long are refused one by one; the others
        are written, and kept only if the write succeeds. With ``producer`` (id,
        epoch) they are a transaction's (TxnOffsetCommit): written as its
        transactional batch and kept pending until its marker.
        """
        wall_ms = self.wall_clock_ms()
        results: dict[TopicPartition, int] = {}
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for partition, commit in offsets.items():
            metadata = commit.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_bytes_max:
                results[partition] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            accepted[partition] = CommittedOffset(
                commit.offset, metadata, commit.leader_epoch, wall_ms
            )
        if accepted:
            records = [
                (
                    encode_offset_key(group.group_id, partition.topic, partition.partition),
                    encode_offset_value(committed),
                )
                for partition, committed in accepted.items()
            ]
            error = self.sink.append(group.group_id, records, producer)
            if error is ErrorCode.NONE and producer is not None:
                group.pending_offsets.setdefault(producer[0], {}).update(accepted)
            elif error is ErrorCode.NONE:
                group.offsets.update(accepted)
            else:
                log.warning("group %s: offset commit failed with %s", group.group_id, error.name)
            answer = error if error is ErrorCode.NONE else offset_store_error(error)
            results.update(dict.fromkeys(accepted, answer))
        return results

    def write_tombstones(
        self, group: Group, partitions: Iterable[TopicPartition], *, group_record: bool
    ) -> ErrorCode:
        """Delete the offsets of ``partitions`` and, with ``group_record``, the group's metadata.

        The metadata tombstone is written only for a group that ever had a
        generation (before that, no metadata record exists). The error is
        already mapped for clients.
        """
        records: list[Record] = [
            (encode_offset_key(group.group_id, partition.topic, partition.partition), None)
            for partition in partitions
        ]
        if group_record and group.generation_id > 0:
            records.append((encode_group_key(group.group_id), None))
        if not records:
            return ErrorCode.NONE
        error = self.sink.append(group.group_id, records)
        return error if error is ErrorCode.NONE else group_store_error(error)

    def expired_offsets(self, group: Group, wall_ms: int) -> list[TopicPartition]:
        """The group's committed offsets past ``offsets.retention.minutes`` at ``wall_ms``.

        The clock of an Empty consumer group starts when it became Empty; a
        group that never had members (commits only) counts from each commit.
        Groups with members keep their offsets. An offset committed with an
        explicit expiry expires then.
        """
        retention_ms = self.config.offsets_retention_ms
        if group.protocol_type is None:
            state_since_ms = None
        elif group.is_(GroupState.EMPTY):
            state_since_ms = group.current_state_timestamp_ms
        else:
            return []
        expired = []
        for partition, committed in group.offsets.items():
            if committed.expire_timestamp_ms >= 0:
                due = wall_ms >= committed.expire_timestamp_ms
            else:
                base_ms = (
                    committed.commit_timestamp_ms if state_since_ms is None else state_since_ms
                )
                due = base_ms + retention_ms <= wall_ms
            if due:
                expired.append(partition)
        return expired


def _group_record(group: Group, assignment: Mapping[str, bytes]) -> GroupRecord:
    protocol = group.protocol_name
    require(
        not group.members or protocol is not None,
        f"group {group.group_id} has members but no protocol",
    )
    return GroupRecord(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=protocol,
        leader=group.leader_id,
        current_state_timestamp_ms=group.current_state_timestamp_ms or -1,
        members=tuple(
            MemberRecord(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                session_timeout_ms=member.session_timeout_ms,
                subscription=member.metadata(protocol or ""),
                assignment=assignment.get(member.member_id, b""),
            )
            for member in group.members.values()
        ),
    )


def restore_group(
    group_id: str,
    record: GroupRecord | None,
    offsets: Mapping[TopicPartition, CommittedOffset],
    pending: Mapping[int, Mapping[TopicPartition, CommittedOffset]] | None = None,
) -> Group:
    """The group as its last metadata record and committed offsets describe it.

    Members come back without a session deadline and without held
    requests; the core arms their sessions when it installs the group.
    """
    group = Group(group_id)
    group.offsets.update(offsets)
    for producer_id, waiting in (pending or {}).items():
        group.pending_offsets[producer_id] = dict(waiting)
    if record is None:
        return group
    group.generation_id = record.generation
    group.protocol_type = record.protocol_type or None
    group.protocol_name = record.protocol
    timestamp_ms = record.current_state_timestamp_ms
    group.current_state_timestamp_ms = timestamp_ms if timestamp_ms >= 0 else None
    protocol = record.protocol or ""
    for stored in record.members:
        member = Member(
            member_id=stored.member_id,
            group_instance_id=stored.group_instance_id,
            client_id=stored.client_id,
            client_host=stored.client_host,
            rebalance_timeout_ms=(
                stored.rebalance_timeout_ms
                if stored.rebalance_timeout_ms > 0
                else stored.session_timeout_ms
            ),
            session_timeout_ms=stored.session_timeout_ms,
            protocol_type=record.protocol_type,
            protocols=((protocol, stored.subscription),),
            assignment=stored.assignment,
        )
        group.add(member, None)
    if record.leader is not None and group.has(record.leader):
        group.leader_id = record.leader
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    if group.members:
        require(record.protocol is not None, f"group {group.group_id} has members but no protocol")
    return group
