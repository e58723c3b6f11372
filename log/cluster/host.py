"""What a cluster member needs of the broker it runs in.

The cluster layer sits below the broker (see ``docs/architecture.md``), so it names
the broker by this port, not by its class: the node's identity and settings, the
topics it holds, its group coordinator's two hooks, and the network it speaks on.
:class:`~eventplatform.log.broker.broker.Broker` is the one implementation.
"""

from __future__ import annotations

from typing import Protocol

import trio

from eventplatform.log.cluster.network import Network
from eventplatform.log.config import BrokerConfig
from eventplatform.log.replica.erasures import ErasureWork
from eventplatform.log.replica.topics import TopicRegistry
from eventplatform.log.security.acls import AclStore
from eventplatform.log.security.credentials import CredentialStore
from eventplatform.log.security.quotas import QuotaStore


class GroupHooks(Protocol):
    """What the cluster tells the group coordinator."""

    def leadership_changed(self) -> None:
        """Leaderships of ``__consumer_offsets`` partitions moved."""

    def topic_deleted(self, topic: str) -> None:
        """``topic`` is gone; its committed offsets go too."""


class BrokerHost(Protocol):
    """The broker a cluster member runs in."""

    node_id: int
    port: int
    config: BrokerConfig
    topics: TopicRegistry
    network: Network
    offline_partitions: set[tuple[str, int]]
    storage_failed: trio.Event
    credentials: CredentialStore
    acls: AclStore
    quotas: QuotaStore
    erasure_work: ErasureWork

    @property
    def groups(self) -> GroupHooks | None: ...

    @property
    def advertised_host(self) -> str: ...

    @property
    def listener_ports(self) -> dict[str, int]: ...

    def advertised_address(self, listener: str) -> tuple[str, int]: ...

    def clock_ms(self) -> int: ...
