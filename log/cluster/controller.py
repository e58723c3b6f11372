"""The controller: decides the cluster's metadata and commits it through the quorum.

Every voter runs a :class:`Controller` on its :class:`~.quorum.QuorumServer`;
each applies the committed metadata records (:mod:`.metadata`) to its own
:class:`~.metadata.MetadataImage`, in log order, so all images agree. The
voter that leads the quorum is the **active** controller: it takes the
brokers' requests and turns them into records.

* :meth:`register` gives a broker a new epoch (one more than its last) and
  unfences it; the broker then heartbeats with that epoch.
* :meth:`heartbeat` keeps it alive. The active controller fences a broker
  that has not heartbeated for ``session_timeout_ms``: the broker leaves
  every ISR it is in (unless it is the last member) and its partitions get
  new leaders (:func:`~.metadata.fence_changes`). A controller that has just
  become active gives every broker a full session before fencing it.
* :meth:`create_topic` places replicas round-robin over the live brokers,
  starting where the last topic left off, so leadership spreads.

A request that reaches a controller that is not active raises
:class:`~.raft.NotLeaderError` naming the active one. Every decision is made
against the image as committed, and a proposal is only acknowledged once
committed, so a decision is never lost in a failover.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence

import trio

from eventplatform.log.cluster.metadata import (
    CreateTopic,
    FenceBroker,
    MetadataError,
    MetadataImage,
    MetadataRecord,
    PartitionAssignment,
    RegisterBroker,
    UnfenceBroker,
    decode,
    encode,
    fence_changes,
    place_replicas,
)
from eventplatform.log.cluster.quorum import QuorumServer
from eventplatform.log.cluster.raft import LEADER_CHANGE, Entry, NotLeaderError

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS_DEFAULT = 9_000
FENCE_CHECK_INTERVAL_S = 0.1
APPLY_POLL_S = 0.001


class Controller:
    """The metadata of one voter, and the active controller's decisions; see the module."""

    def __init__(
        self, quorum: QuorumServer, *, session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT
    ) -> None:
        self.quorum = quorum
        self.session_timeout_ms = session_timeout_ms
        self.image = MetadataImage()
        self._heartbeats: dict[int, float] = {}
        self._active_epoch: int | None = None
        self._next_start = 0
        self._deciding = trio.Lock()
        quorum.on_commit = self._apply

    @property
    def active(self) -> bool:
        return self.quorum.is_leader

    def _apply(self, offset: int, entry: Entry) -> None:
        if entry.payload == LEADER_CHANGE:
            return
        try:
            self.image.apply(decode(entry.payload))
        except MetadataError:
            # committed records were checked against this same image before they were
            # proposed: a contradiction here is a bug, and the node must not go on
            log.critical("metadata record at offset %d does not apply", offset)
            raise

    async def run(self) -> None:
        """The active controller's duties (fencing) until cancelled."""
        while True:
            await trio.sleep(FENCE_CHECK_INTERVAL_S)
            if self.active:
                await self._fence_silent()

    # ------------------------------------------------------------ requests

    async def register(self, broker: int, host: str, port: int, rack: str | None = None) -> int:
        """Register ``broker`` (again); returns its new epoch."""
        async with self._deciding:
            self._require_active()
            known = self.image.brokers.get(broker)
            epoch = (known.epoch if known else 0) + 1
            await self._commit([RegisterBroker(broker, epoch, host, port, rack)])
            await self._commit([UnfenceBroker(broker, epoch)])
            self._heartbeats[broker] = trio.current_time()
            return epoch

    def heartbeat(self, broker: int, epoch: int) -> None:
        self._require_active()
        known = self.image.brokers.get(broker)
        if known is None or known.epoch != epoch:
            raise MetadataError(f"broker {broker} epoch {epoch} is not registered; register")
        self._heartbeats[broker] = trio.current_time()

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str] | None = None,
    ) -> CreateTopic:
        async with self._deciding:
            self._require_active()
            if name in self.image.topics:
                raise MetadataError(f"topic {name} exists")
            placed = place_replicas(
                self.image.live_brokers(), partitions, replication_factor, self._next_start
            )
            self._next_start += partitions
            assignments = tuple(PartitionAssignment(r, r, r[0]) for r in placed)
            record = CreateTopic(name, str(uuid.uuid4()), assignments, dict(configs or {}))
            await self._commit([record])
            return record

    # ------------------------------------------------------------ fencing

    async def _fence_silent(self) -> None:
        raft = self.quorum.raft
        now = trio.current_time()
        if self._active_epoch != raft.epoch:  # newly active: everyone gets a full session
            self._active_epoch = raft.epoch
            self._heartbeats = dict.fromkeys(self.image.brokers, now)
        timeout_s = self.session_timeout_ms / 1000
        for broker, state in sorted(self.image.brokers.items()):
            if state.fenced or now - self._heartbeats.get(broker, now) < timeout_s:
                continue
            async with self._deciding:
                log.info("fencing broker %d: no heartbeat for %.1f s", broker, timeout_s)
                await self._commit([FenceBroker(broker, state.epoch)])
                changes: Sequence[MetadataRecord] = fence_changes(self.image, broker)
                if changes:
                    await self._commit(changes)

    # ------------------------------------------------------------ proposing

    def _require_active(self) -> None:
        if not self.active:
            raise NotLeaderError(self.quorum.raft.leader if self.quorum.node else None)

    async def _commit(self, records: Sequence[MetadataRecord]) -> None:
        """Propose ``records`` and wait until they are committed and applied here."""
        first = await self.quorum.propose([encode(record) for record in records])
        end = first + len(records)
        while self.quorum.applied < end:  # applied before propose returns; this is a guard
            await trio.sleep(APPLY_POLL_S)
