"""What a cluster member needs of the broker it runs in.

The cluster layer sits below the broker (see ``docs/architecture.md``), so it names
the broker by this port, not by its class: the node's identity and settings, the
topics it holds, its group coordinator's two hooks, its group configs, and the network it speaks on.
:class:`~eventplatform.log.broker.broker.Broker` is the one implementation.
"""

from __future__ import annotations

from collections.abc import Mapping
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


class GroupConfigHooks(Protocol):
    """The broker's group configs, which a cluster member keeps as the metadata has them."""

    def overrides(self, group_id: str) -> dict[str, str]:
        """The overrides of ``group_id`` in force here."""
        ...

    def replace_all(self, overrides: Mapping[str, Mapping[str, str]]) -> None:
        """Hold exactly ``overrides``, by group."""


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
    def group_configs(self) -> GroupConfigHooks: ...

    @property
    def groups(self) -> GroupHooks | None: ...

    @property
    def advertised_host(self) -> str: ...

    @property
    def listener_ports(self) -> dict[str, int]: ...

    def advertised_address(self, listener: str) -> tuple[str, int]: ...

    def clock_ms(self) -> int: ...

    def leadership_changed(self) -> None:
        """Leaderships of internal partitions may have moved (the coordinators load or
        drop what they coordinate)."""
