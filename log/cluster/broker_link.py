"""A broker's link to the active controller: registration, heartbeats, metadata.

The broker registers (:meth:`BrokerLink.run`) with its advertised address
and gets a broker epoch; it then heartbeats with that epoch. Each heartbeat
waits at the controller (up to ``broker.heartbeat.interval.ms``) for
committed metadata records the broker has not applied, so records reach
every broker as soon as they commit. A broker so far behind that the
controller's log no longer holds the records it needs (they are in a
snapshot now) gets the whole image instead, and follows from its offset.
Once the broker has applied all the committed records it knows of, each new
image goes to the :class:`~.replication.ReplicaManager`.

One heartbeat exchange takes at most a third of ``broker.session.timeout.ms``
(:func:`~.answers.heartbeat_timeout_ms`; its wait at the controller at most
half of that): a controller that does not answer in time (its process
stopped, or cut off) is given up, and the broker asks the other voters, which
name the active controller, so it heartbeats there before its session ends.

A heartbeat refused as stale (the controller fenced this epoch, or lost it
in a restart) makes the broker register again with a new epoch. Requests
brokers forward to the controller (topic changes, ISR changes) go through
:meth:`BrokerLink.call`, which follows the active controller.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from eventplatform.log.cluster.answers import heartbeat_timeout_ms, heartbeat_wait_ms
from eventplatform.log.cluster.controller import STALE_BROKER_EPOCH
from eventplatform.log.cluster.metadata import (
    MetadataError,
    MetadataImage,
    decode_document,
    image_from_document,
)
from eventplatform.log.cluster.rpc import ControllerClient, RpcError

if TYPE_CHECKING:
    from eventplatform.log.cluster.host import BrokerHost
    from eventplatform.log.cluster.replication import ReplicaManager
    from eventplatform.log.replica.partition import Partition

log = logging.getLogger(__name__)

RETRY_DELAY_S = 0.2
SHUTDOWN_WAIT_S = 10.0


class BrokerLink:
    """See the module docstring."""

    def __init__(self, broker: BrokerHost, replicas: ReplicaManager) -> None:
        self.broker = broker
        self.replicas = replicas
        voters = broker.config.controller_quorum_voters
        self.client = ControllerClient(
            {node: (host, port) for node, host, port in voters}, broker.network
        )
        self.epoch: int | None = None
        self.offset = 0
        self.image = MetadataImage()
        self.caught_up = trio.Event()

    @property
    def heartbeat_wait_ms(self) -> int:
        config = self.broker.config
        return heartbeat_wait_ms(
            config.broker_session_timeout_ms, config.broker_heartbeat_interval_ms
        )

    @property
    def heartbeat_timeout_s(self) -> float:
        """How long one heartbeat may take before the broker tries another controller."""
        return heartbeat_timeout_ms(self.broker.config.broker_session_timeout_ms) / 1000

    async def call(self, method: str, params: dict[str, Any], *, timeout_s: float = 10.0) -> Any:
        return await self.client.call(method, params, timeout_s=timeout_s)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Register, then heartbeat and apply metadata until cancelled."""
        started = False
        while True:
            try:
                if self.epoch is None:
                    await self._register()
                    if not started:
                        started = True
                        task_status.started()
                await self._heartbeat()
            except RpcError as exc:
                if exc.code == STALE_BROKER_EPOCH:
                    log.info("broker %d: %s; registering again", self.broker.node_id, exc)
                    self.epoch = None
                else:
                    log.warning("broker %d: the controller refused: %s", self.broker.node_id, exc)
                    await trio.sleep(RETRY_DELAY_S)
            except trio.TooSlowError:
                log.warning("broker %d: no active controller answers", self.broker.node_id)

    async def _register(self) -> None:
        result = await self.client.call(
            "register_broker",
            {
                "broker": self.broker.node_id,
                "host": self.broker.advertised_host,
                "port": self.broker.port,
                "rack": self.broker.config.broker_rack or None,
                "endpoints": [
                    [name, *self.broker.advertised_address(name)]
                    for name in self.broker.listener_ports
                ],
            },
        )
        self.epoch = int(result["epoch"])
        log.info("broker %d registered with epoch %d", self.broker.node_id, self.epoch)

    async def _heartbeat(self) -> None:
        wait_ms = self.heartbeat_wait_ms if self.caught_up.is_set() else 0
        params = {
            "broker": self.broker.node_id,
            "epoch": self.epoch,
            "offset": self.offset,
            "wait_ms": wait_ms,
        }
        result = await self.client.call("heartbeat", params, timeout_s=self.heartbeat_timeout_s)
        entries = result["entries"]
        replaced = "image" in result
        if replaced:
            self.image = image_from_document(result["image"])
            self.offset = int(result["end"])
            log.info(
                "broker %d: took the whole metadata image at %d", self.broker.node_id, self.offset
            )
        for document in entries:
            if document is not None:
                try:
                    self.image.apply(decode_document(document))
                except MetadataError:
                    log.critical("metadata record %d does not apply", self.offset)
                    raise
            self.offset += 1
        if self.offset >= int(result["applied"]):
            self.caught_up.set()
        if self.caught_up.is_set() and (entries or replaced or not self.replicas.applied_once):
            self.replicas.applied_once = True
            self.replicas.apply(self.image)

    async def alter_partition(self, partition: Partition, isr: list[int]) -> None:
        await self.client.call(
            "alter_partition",
            {
                "topic": partition.topic,
                "partition": partition.index,
                "broker": self.broker.node_id,
                "leader_epoch": partition.leader_epoch,
                "partition_epoch": partition.partition_epoch,
                "isr": isr,
            },
        )

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away, and wait (bounded)
        until the metadata shows it leads nothing, so clients move before it stops."""
        if self.epoch is None:
            return
        me = self.broker.node_id
        with trio.move_on_after(SHUTDOWN_WAIT_S):
            try:
                await self.client.call(
                    "controlled_shutdown", {"broker": me, "epoch": self.epoch}, timeout_s=5.0
                )
            except (RpcError, trio.TooSlowError) as exc:
                log.warning("controlled shutdown was refused: %s", exc)
                return
            while self.leads_with_followers():
                await self.replicas.applied.wait()
        log.info("broker %d: controlled shutdown done", me)

    def leads_with_followers(self) -> bool:
        """Whether the metadata still makes this broker the leader of a partition that has
        another ISR member to take over."""
        me = self.broker.node_id
        return any(
            state.leader == me and len(state.isr) > 1
            for topic in self.image.topics.values()
            for state in topic.partitions
        )
