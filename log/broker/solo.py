"""A broker on its own: the :class:`Membership` of a cluster of one.

A broker started without a controller quorum (no ``process.roles``) is the only
broker of its cluster: the only replica and the leader of every partition, at
leader epoch 0, with itself as the whole ISR. It changes its own topics: their
files are created in a worker thread (:meth:`Broker.off_loop`), one change at a
time, while requests go on; and it hands out producer ids from its own
:class:`~eventplatform.log.broker.broker.ProducerIdAllocator`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

import trio

from eventplatform.log.cluster.membership import BrokerAddress, PartitionLayout
from eventplatform.log.cluster.metadata import BrokerState
from eventplatform.log.groups.records import OFFSETS_TOPIC
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.topics import Topic, TopicError
from eventplatform.log.security.acls import AclBinding
from eventplatform.log.security.credentials import Deletion
from eventplatform.log.security.quotas import QuotaChange
from eventplatform.log.security.scram import ScramCredential
from eventplatform.log.transactions.records import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from eventplatform.log.broker.broker import Broker

log = logging.getLogger("eventplatform.broker")

SOLO_REPLICATION_FACTORS = (-1, 1)
"""The factors a broker on its own offers: the default (-1), or itself alone."""


class SoloNode:
    """See the module docstring."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._topic_changes = trio.Lock()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Nothing to join. A broker on its own creates ``__consumer_offsets`` at its first
        start (a cluster, at its first FindCoordinator), so that its group coordinator,
        which leads every partition, serves from the start."""
        if self.broker.groups is not None:
            self.broker.groups.offsets_topic.ensure_created()
        task_status.started()

    # ------------------------------------------------------------ what the node knows

    def live_brokers(self) -> list[BrokerAddress]:
        broker = self.broker
        rack = broker.config.broker_rack or None
        return [BrokerAddress(broker.node_id, broker.advertised_host, broker.port, rack)]

    def registered_broker(self, node_id: int) -> BrokerState | None:
        """No other broker registers with a broker on its own."""
        return None

    def broker_ids(self) -> list[int]:
        return [self.broker.node_id]

    def layout(self, topic: Topic) -> list[PartitionLayout]:
        node = self.broker.node_id
        return [
            PartitionLayout(partition.index, node, partition.leader_epoch, (node,), (node,))
            for partition in topic.partitions
            if partition is not None
        ]

    def replication_factor(self, topic: str) -> int:
        return 1

    def assigned_replicas(self, topic: str) -> int | None:
        return None

    # ------------------------------------------------------------ changes

    def check_replication_factor(self, replication_factor: int) -> None:
        if replication_factor not in SOLO_REPLICATION_FACTORS:
            raise TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {replication_factor} is larger than the 1 available broker",
            )

    async def allocate_producer_id(self) -> int:
        await trio.lowlevel.checkpoint()
        return self.broker.producer_ids.allocate()

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        assignment: list[list[int]] | None = None,
    ) -> None:
        """Create the files of ``name`` (the caller checked ``assignment``: this node
        alone, and the factor: :meth:`Broker.check_new_topic`)."""
        topics = self.broker.topics
        async with self._topic_changes:
            with _storage_failure_answered(name):
                internal = name in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
                prepare = functools.partial(topics.prepare, internal=internal)
                topic = await self.broker.off_loop(prepare, name, partitions, configs)
            topics.register(topic)
        if topic.internal:
            self.broker.leadership_changed()  # it leads the new internal partitions

    async def delete_topic(self, name: str) -> None:
        async with self._topic_changes:
            self.broker.topics.delete(name)
        if self.broker.groups is not None:
            self.broker.groups.topic_deleted(name)

    async def add_partitions(
        self, name: str, count: int, assignment: list[list[int]] | None = None
    ) -> None:
        topics = self.broker.topics
        async with self._topic_changes:
            with _storage_failure_answered(name):
                added = await self.broker.off_loop(topics.prepare_partitions, name, count)
            topics.extend(name, added)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        async with self._topic_changes:
            self.broker.topics.set_configs(name, configs)

    async def set_group_configs(self, group: str, configs: dict[str, str]) -> None:
        """The broker's own group configs file, written in a worker thread (an fsync)."""
        async with self._topic_changes:
            try:
                await self.broker.off_loop(self.broker.group_configs.set, group, configs)
            except OSError as exc:
                log.error("cannot write the group configs: %s", exc)
                raise TopicError(
                    ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the group configs: {exc}"
                ) from exc

    async def alter_scram_credentials(
        self, upsertions: list[tuple[str, ScramCredential]], deletions: list[Deletion]
    ) -> None:
        """The broker's own credentials file, written in a worker thread (an fsync)."""
        async with self._topic_changes:
            try:
                await self.broker.off_loop(self.broker.credentials.apply, upsertions, deletions)
            except OSError as exc:
                log.error("cannot write the SCRAM credentials: %s", exc)
                raise TopicError(
                    ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the credentials: {exc}"
                ) from exc

    async def change_acls(self, added: list[AclBinding], removed: list[AclBinding]) -> None:
        """The broker's own ACL file, written in a worker thread (an fsync)."""
        async with self._topic_changes:
            try:
                await self.broker.off_loop(self.broker.acls.change, added, removed)
            except OSError as exc:
                log.error("cannot write the ACLs: %s", exc)
                raise TopicError(
                    ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the ACLs: {exc}"
                ) from exc

    async def alter_quotas(self, changes: list[QuotaChange]) -> None:
        """The broker's own quota file, written in a worker thread (an fsync)."""
        async with self._topic_changes:
            try:
                await self.broker.off_loop(self.broker.quotas.apply, changes)
            except OSError as exc:
                log.error("cannot write the client quotas: %s", exc)
                raise TopicError(
                    ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write the quotas: {exc}"
                ) from exc

    async def erase(self, topic: str, partition: int, offsets: list[int]) -> None:
        """The only replica: its ledger takes the erasure, and the broker's erasure task
        carries it out. Not written down: the answer waits until it is done, and a
        request not answered is sent again."""
        held = self.broker.topics.partition(topic, partition)
        if held is None:
            raise TopicError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic}-{partition}"
            )
        if held.erasures.commit(offsets):
            self.broker.erasure_work.wake()
        await trio.lowlevel.checkpoint()

    async def controlled_shutdown(self) -> None:
        """Nobody to hand leaderships to."""
        await trio.lowlevel.checkpoint()


@contextlib.contextmanager
def _storage_failure_answered(topic: str) -> Iterator[None]:
    """A topic change whose files cannot be created (out of descriptors, a full disk) is
    answered KAFKA_STORAGE_ERROR; the partitions opened so far are closed again."""
    try:
        yield
    except OSError as exc:
        log.error("cannot create the files of topic %s: %s", topic, exc)
        raise TopicError(
            ErrorCode.KAFKA_STORAGE_ERROR, f"cannot create the partitions' files: {exc}"
        ) from exc
