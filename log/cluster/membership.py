"""What a broker knows of the cluster it belongs to, and how it changes its topics.

Every node runs one code path: the request handlers and the broker ask a
:class:`Membership` and never ask which kind of node they run on. Two kinds
implement it:

* :class:`~eventplatform.log.cluster.node.BrokerMember`, a member of a cluster:
  it answers from the metadata image the controller quorum sends it, and
  forwards topic changes to the active controller;
* :class:`~eventplatform.log.broker.solo.SoloNode`, a broker on its own (no
  controller quorum): a cluster of one, which is every partition's only
  replica and leader and changes its topics itself.

The server picks one at start (``process.roles``), and nothing else decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import trio

from eventplatform.log.cluster.metadata import BrokerState
from eventplatform.log.replica.topics import Topic
from eventplatform.log.security.acls import AclBinding
from eventplatform.log.security.credentials import Deletion
from eventplatform.log.security.quotas import QuotaChange
from eventplatform.log.security.scram import ScramCredential


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where clients reach a broker."""

    node_id: int
    host: str
    port: int
    rack: str | None
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where clients of ``listener`` reach the broker (see ``BrokerState.address``)."""
        if not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class PartitionLayout:
    """One partition as Metadata describes it: its leader (``-1``: none now), the
    leader's epoch, its replicas, the in-sync ones and those on fenced brokers."""

    index: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()


class Membership(Protocol):
    """See the module docstring."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Join (register, follow the metadata, replicate) until cancelled."""

    # ------------------------------------------------------------ what the node knows

    def live_brokers(self) -> list[BrokerAddress]:
        """The brokers clients may connect to, by node id."""
        ...

    def registered_broker(self, node_id: int) -> BrokerState | None:
        """Another broker's registration (its epoch, rack, whether it is fenced); None for
        one this node does not know."""
        ...

    def broker_ids(self) -> list[int]:
        """Every registered broker, fenced or not: where replicas may be assigned."""
        ...

    def layout(self, topic: Topic) -> list[PartitionLayout]:
        """The partitions of ``topic`` as clients are told of them."""
        ...

    def replication_factor(self, topic: str) -> int:
        """The replicas per partition of ``topic`` (-1 when not known here)."""
        ...

    def assigned_replicas(self, topic: str) -> int | None:
        """How many replicas a new partition of ``topic`` must list in an explicit
        assignment; None when any count is accepted."""
        ...

    # ------------------------------------------------------------ changes

    def check_replication_factor(self, replication_factor: int) -> None:
        """Refuse (TopicError) a factor this node knows at once it cannot offer; the
        active controller judges the others."""

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before in this cluster; TopicError if none can be
        had now."""
        ...

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        assignment: list[list[int]] | None = None,
    ) -> None:
        """Create ``name``; return once this node holds it. Raises TopicError."""

    async def delete_topic(self, name: str) -> None:
        """Delete ``name``; return once this node no longer holds it."""

    async def add_partitions(
        self, name: str, count: int, assignment: list[list[int]] | None = None
    ) -> None:
        """Grow ``name`` to ``count`` partitions; return once this node has them."""

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the configs of ``name``; return once this node applies them."""

    async def set_group_configs(self, group: str, configs: dict[str, str]) -> None:
        """Replace the config overrides of ``group``; return once this node applies them."""

    async def alter_scram_credentials(
        self, upsertions: list[tuple[str, ScramCredential]], deletions: list[Deletion]
    ) -> None:
        """Store and remove users' SCRAM credentials, all or none; return once this node
        authenticates with them. Raises CredentialError, or TopicError when the node
        cannot change them now."""

    async def change_acls(self, added: list[AclBinding], removed: list[AclBinding]) -> None:
        """Add and remove ACL bindings, all or none; return once this node decides by them.
        Raises AclError, or TopicError when the node cannot change them now."""

    async def alter_quotas(self, changes: list[QuotaChange]) -> None:
        """Set and remove client quotas, all or none; return once this node enforces them."""

    async def erase(self, topic: str, partition: int, offsets: list[int]) -> None:
        """Commit an erasure of the records at ``offsets``, for every replica; return once
        this node's replica has taken it in (its reads stop before each until erased).
        Raises TopicError."""

    async def controlled_shutdown(self) -> None:
        """Hand this node's leaderships to other replicas before it stops."""
