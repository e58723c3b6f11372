"""One cluster node's services, by ``process.roles``.

* ``controller``: a voter of the quorum in ``controller.quorum.voters``, its
  log and snapshots in ``<data dir>/__cluster_metadata-0``, and a
  :class:`~.controller.Controller` on it, taking brokers' requests on the
  voter's port;
* ``broker``: the :class:`~.broker_link.BrokerLink` to the active controller
  and the :class:`~.replication.ReplicaManager` that turns metadata into
  replica roles.

A node with both roles runs both, sharing nothing but the process: its
broker reaches the controllers over the network like any other broker.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from eventplatform.log.cluster.broker_link import BrokerLink
from eventplatform.log.cluster.controller import (
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    RESOURCE_NOT_FOUND,
    TOPIC_EXISTS,
    UNKNOWN_TOPIC,
    Controller,
)
from eventplatform.log.cluster.controller_methods import controller_methods
from eventplatform.log.cluster.membership import BrokerAddress, PartitionLayout
from eventplatform.log.cluster.metadata import BrokerState
from eventplatform.log.cluster.network import TCP, Network
from eventplatform.log.cluster.quorum import QuorumServer
from eventplatform.log.cluster.quorum_storage import SegmentQuorumStorage
from eventplatform.log.cluster.raft import RaftConfig
from eventplatform.log.cluster.replication import ReplicaManager, topic_id_bytes
from eventplatform.log.cluster.rpc import NOT_CONTROLLER, RpcError, answer
from eventplatform.log.cluster.security_records import acl_change, quota_change, scram_change
from eventplatform.log.config import BrokerConfig
from eventplatform.log.invariants import find_invariant_error
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.topics import Topic, TopicError
from eventplatform.log.security.acls import AclBinding
from eventplatform.log.security.credentials import Deletion
from eventplatform.log.security.quotas import QuotaChange
from eventplatform.log.security.scram import ScramCredential

if TYPE_CHECKING:
    from eventplatform.log.cluster.host import BrokerHost

log = logging.getLogger(__name__)

METADATA_DIRECTORY = "__cluster_metadata-0"
APPLY_WAIT_S = 10.0
LEAVE_RETRY_DELAY_S = 1.0


def raft_config(config: BrokerConfig) -> RaftConfig:
    return RaftConfig(
        election_timeout_ms=config.controller_quorum_election_timeout_ms,
        fetch_timeout_ms=config.controller_quorum_fetch_timeout_ms,
        request_timeout_ms=max(config.controller_quorum_election_timeout_ms // 2, 10),
    )


class ControllerNode:
    """The controller role: a quorum voter with a controller on it."""

    def __init__(self, config: BrokerConfig, network: Network = TCP) -> None:
        self.config = config
        peers = {node: (host, port) for node, host, port in config.controller_quorum_voters}
        self.storage = SegmentQuorumStorage(
            Path(config.data_dir) / METADATA_DIRECTORY,
            segment_bytes=config.metadata_log_segment_bytes,
        )
        self.quorum = QuorumServer.over_tcp(
            config.node_id,
            peers,
            self.storage,
            self._request,
            network,
            config=raft_config(config),
            snapshot_bytes=config.metadata_log_max_record_bytes_between_snapshots,
        )
        self.controller = Controller(
            self.quorum,
            session_timeout_ms=config.broker_session_timeout_ms,
            leader_rebalance_interval_s=(
                config.leader_imbalance_check_interval_seconds
                if config.auto_leader_rebalance_enable
                else None
            ),
        )
        self._methods = controller_methods(self.controller)

    async def _request(self, document: dict[str, object]) -> dict[str, object]:
        return await answer(self._methods, document)

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the voter until cancelled; reports its bound port."""
        try:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(self.quorum.serve)
                nursery.start_soon(self.controller.run)
                log.info("controller %d: quorum port %s", self.config.node_id, port)
                task_status.started(port)
        except BaseException as error:
            if find_invariant_error(error) is None:  # after a broken one, recovery runs
                self.storage.close()
            raise
        self.storage.close()


class BrokerMember:
    """The broker role: replica roles from the metadata, and the link that brings it.

    It is the broker's :class:`~eventplatform.log.cluster.membership.Membership` in a
    cluster: it answers from the metadata applied here and forwards topic changes to
    the active controller."""

    def __init__(self, broker: BrokerHost) -> None:
        self.broker = broker
        self.replicas = ReplicaManager(broker)
        self.link = BrokerLink(broker, self.replicas)
        self.replicas.link = self.link
        self._producer_ids_next = self._producer_ids_end = 0
        self._producer_ids_lock = trio.Lock()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Until cancelled: register, follow the metadata, replicate.

        Reports started once the broker has applied the cluster's metadata, caught up
        (as Kafka's brokers wait for theirs): before that it knows its logs on disk but
        not their layout, leaders or the live brokers, so it could only answer clients
        wrongly."""
        async with trio.open_nursery() as nursery:
            self.replicas.start(nursery)
            await nursery.start(self.link.run)
            nursery.start_soon(self._leave_on_storage_failure)
            while not self.replicas.applied_once:
                await self.replicas.applied.wait()
            task_status.started()

    async def _leave_on_storage_failure(self) -> None:
        """Once a storage error has taken a partition offline (the broker's one log
        directory is failing), move every leadership of this broker away and leave every
        ISR, as a controlled shutdown does, so its partitions are served by the other
        replicas. The broker stays fenced while it heartbeats, answering metadata and
        KAFKA_STORAGE_ERROR, until it restarts (which recovers its logs); should it lead
        again meanwhile, it asks again."""
        await self.broker.storage_failed.wait()
        log.error(
            "broker %d: a storage error took %s offline; moving its leaderships away",
            self.broker.node_id,
            sorted(self.broker.offline_partitions),
        )
        await self.link.controlled_shutdown()
        while True:  # again if refused, unanswered, or a new controller gave leadership back
            await trio.sleep(LEAVE_RETRY_DELAY_S)
            if self.link.leads_with_followers():
                await self.link.controlled_shutdown()

    # ------------------------------------------------------------ what the node knows

    def live_brokers(self) -> list[BrokerAddress]:
        brokers = self.replicas.image.brokers.values()
        return [
            BrokerAddress(b.broker, b.host, b.port, b.rack, b.endpoints)
            for b in sorted(brokers, key=lambda b: b.broker)
            if not b.fenced
        ]

    def registered_broker(self, node_id: int) -> BrokerState | None:
        return self.link.image.brokers.get(node_id)

    def broker_ids(self) -> list[int]:
        return list(self.replicas.image.brokers)

    def layout(self, topic: Topic) -> list[PartitionLayout]:
        image = self.replicas.image
        state = image.topics.get(topic.name)
        fenced = {b.broker for b in image.brokers.values() if b.fenced}
        return [
            PartitionLayout(
                index,
                partition.leader,
                partition.leader_epoch,
                partition.replicas,
                partition.isr,
                tuple(r for r in partition.replicas if r in fenced),
            )
            for index, partition in enumerate(state.partitions if state is not None else [])
        ]

    def replication_factor(self, topic: str) -> int:
        state = self.replicas.image.topics.get(topic)
        return len(state.partitions[0].replicas) if state is not None and state.partitions else -1

    def assigned_replicas(self, topic: str) -> int | None:
        state = self.replicas.image.topics.get(topic)
        if state is None or not state.partitions:
            return None
        return len(state.partitions[0].target or state.partitions[0].replicas)

    def check_replication_factor(self, replication_factor: int) -> None:
        """The active controller judges every factor, against the brokers it knows."""

    async def controlled_shutdown(self) -> None:
        await self.link.controlled_shutdown()

    # ------------------------------------------------------------ changes

    async def allocate_producer_id(self) -> int:
        """The next producer id of this broker's block, fetching a new block when it is
        used up; raises TopicError (REQUEST_TIMED_OUT) when no controller answers."""
        if self._producer_ids_next >= self._producer_ids_end:
            async with self._producer_ids_lock:
                if self._producer_ids_next >= self._producer_ids_end:
                    epoch = self.link.epoch
                    result = await self._forward(
                        "allocate_producer_ids", {"broker": self.broker.node_id, "epoch": epoch}
                    )
                    self._producer_ids_next = int(result["start"])
                    self._producer_ids_end = self._producer_ids_next + int(result["size"])
        producer_id = self._producer_ids_next
        self._producer_ids_next += 1
        return producer_id

    # ------------------------------------------------------------ topic changes

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        assignment: list[list[int]] | None = None,
    ) -> None:
        """Create ``name`` through the controller (placed by ``assignment`` when given: the
        replicas of each partition); return once this broker has it."""
        factor = (
            self.broker.config.default_replication_factor
            if replication_factor == -1
            else replication_factor
        )
        result = await self._forward(
            "create_topic",
            {
                "name": name,
                "partitions": partitions,
                "replication_factor": factor,
                "configs": configs,
                "assignment": assignment,
            },
        )
        wanted = topic_id_bytes(str(result["topic_id"]))
        await self._until(lambda: _has_topic(self.broker, name, wanted))

    async def delete_topic(self, name: str) -> None:
        await self._forward("delete_topic", {"name": name})
        await self._until(lambda: self.broker.topics.get(name) is None)

    async def add_partitions(
        self, name: str, count: int, assignment: list[list[int]] | None = None
    ) -> None:
        await self._forward(
            "add_partitions", {"name": name, "count": count, "assignment": assignment}
        )
        await self._until(
            lambda: len(getattr(self.broker.topics.get(name), "partitions", ())) >= count
        )

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        await self._forward("topic_configs", {"name": name, "configs": configs})
        await self._until(lambda: getattr(self.broker.topics.get(name), "configs", None) == configs)

    async def set_group_configs(self, group: str, configs: dict[str, str]) -> None:
        await self._forward("group_configs", {"group": group, "configs": configs})
        await self._until(lambda: self.broker.group_configs.overrides(group) == configs)

    async def alter_scram_credentials(
        self, upsertions: list[tuple[str, ScramCredential]], deletions: list[Deletion]
    ) -> None:
        """Through the active controller, into the cluster's metadata: every broker checks
        the same credentials."""
        change = scram_change(upsertions, deletions)
        await self._change_security("scram_change", dataclasses.asdict(change))

    async def change_acls(self, added: list[AclBinding], removed: list[AclBinding]) -> None:
        """Through the active controller, into the cluster's metadata: every broker decides
        by the same ACLs."""
        change = acl_change(added, removed)
        await self._change_security("acl_change", dataclasses.asdict(change))

    async def alter_quotas(self, changes: list[QuotaChange]) -> None:
        """Through the active controller, into the cluster's metadata: every broker
        enforces the same quotas."""
        await self._change_security("quota_change", dataclasses.asdict(quota_change(changes)))

    async def erase(self, topic: str, partition: int, offsets: list[int]) -> None:
        """Through the active controller, into the cluster's metadata: every replica
        erases the records, this one before it serves them again."""
        params = {"topic": topic, "partition": partition, "offsets": offsets}
        result = await self._forward("erasure", params)
        version = int(result["erasure_version"])
        await self._until(lambda: self.replicas.image.erasure_version >= version)

    async def _change_security(self, method: str, params: dict[str, Any]) -> None:
        result = await self._forward(method, params)
        version = int(result["security_version"])
        await self._until(lambda: self.replicas.image.security_version >= version)

    async def _forward(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await self.link.call(method, params)
        except RpcError as exc:
            code = RPC_ERRORS.get(exc.code, ErrorCode.UNKNOWN_SERVER_ERROR)
            raise TopicError(code, str(exc)) from exc
        except trio.TooSlowError as exc:
            raise TopicError(ErrorCode.REQUEST_TIMED_OUT, "no active controller answered") from exc
        return result

    async def _until(self, done: Callable[[], bool]) -> None:
        """Wait (bounded) until the metadata applied here makes ``done`` true."""
        with trio.move_on_after(APPLY_WAIT_S):
            while not done():
                await self.replicas.applied.wait()
            return
        raise TopicError(ErrorCode.REQUEST_TIMED_OUT, "the change is committed but not yet applied")


def _has_topic(broker: BrokerHost, name: str, topic_id: bytes) -> bool:
    topic = broker.topics.get(name)
    return topic is not None and topic.topic_id == topic_id


RPC_ERRORS = {
    RESOURCE_NOT_FOUND: ErrorCode.RESOURCE_NOT_FOUND,
    TOPIC_EXISTS: ErrorCode.TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    INVALID_REPLICATION_FACTOR: ErrorCode.INVALID_REPLICATION_FACTOR,
    INVALID_REPLICA_ASSIGNMENT: ErrorCode.INVALID_REPLICA_ASSIGNMENT,
    INVALID_PARTITIONS: ErrorCode.INVALID_PARTITIONS,
    NOT_CONTROLLER: ErrorCode.REQUEST_TIMED_OUT,
}
