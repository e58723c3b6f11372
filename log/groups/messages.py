"""What goes in and out of the group coordinator: requests, results, settings and the write port.

The broker's handlers build the requests (``JoinRequest``, ``SyncRequest``,
``MemberIdentity``, ``OffsetCommit``) and read the answers (``LeaveResult``,
``GroupDescription``, ``GroupOverview``) that the coordinator shell passes
to and from the core, its offsets and its admin
(:mod:`eventplatform.log.groups.core`, ``offsets``, ``admin``).
``GroupConfig`` carries the broker's settings to the core and the store;
``RecordSink`` is the port through which the store
(:mod:`eventplatform.log.groups.store`) appends to ``__consumer_offsets``.
The JoinGroup and SyncGroup answers live with the group
(:mod:`eventplatform.log.groups.group`) that holds their callbacks.

The dataclasses are frozen and have no behaviour; they are built and read on
the broker's trio thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from eventplatform.log.groups.group import GroupState, Protocols
from eventplatform.log.protocol import ErrorCode

OFFSET_METADATA_BYTES_MAX_DEFAULT = 4096

Record = tuple[bytes, bytes | None]


class RecordSink(Protocol):
    """Appends records of one group to its ``__consumer_offsets`` partition, as one batch
    (a transactional one of ``producer``, (producer id, epoch), when given)."""

    def append(
        self,
        group_id: str,
        records: Sequence[Record],
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode: ...


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker's ``group.*`` and ``offsets.*`` settings the protocol obeys."""

    session_timeout_ms_min: int
    session_timeout_ms_max: int
    initial_rebalance_delay_ms: int
    group_size_max: int
    offsets_retention_ms: int
    offset_metadata_bytes_max: int = OFFSET_METADATA_BYTES_MAX_DEFAULT


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    require_known_member_id: bool


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode
    members: tuple[tuple[MemberIdentity, ErrorCode], ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One partition's commit as a member sends it."""

    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: GroupState
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: GroupState | str
    group_type: str = "classic"
    """ListGroups v5's type: ``classic`` (JoinGroup) or ``share`` (KIP-932)."""
