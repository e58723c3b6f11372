"""The controller: decides the cluster's metadata and commits it through the quorum.

Every voter runs a :class:`Controller` on its :class:`~.quorum.QuorumServer`;
each applies the committed metadata records (:mod:`.metadata`) to its own
:class:`~.metadata.MetadataImage`, in log order, so all images agree. The
voter that leads the quorum is the **active** controller: it takes the
brokers' requests and turns them into records.

* :meth:`register` gives a broker a new epoch (one more than its last) and
  unfences it; the broker then heartbeats with that epoch.
* :meth:`heartbeat` keeps it alive, from the heartbeat's arrival; a heartbeat
  waits here for new records at most :func:`heartbeat_wait_ms`, well inside
  the session. The active controller fences a broker
  that has not heartbeated for ``session_timeout_ms``: the broker leaves
  every ISR it is in (unless it is the last member) and its partitions get
  new leaders (:func:`~.metadata.fence_changes`). A controller that has just
  become active gives every broker a full session before fencing it.
* :meth:`create_topic` places replicas round-robin over the live brokers,
  starting where the last topic left off, so leadership spreads, or where an
  explicit assignment says (:func:`~.metadata.check_replica_assignment`:
  registered brokers, no broker twice in a partition, one replica count for
  every partition; the live replicas are the ISR). A topic
  change is answered once every live broker has applied it (bounded, see
  :meth:`wait_propagated`), so a client that creates a topic and then asks
  any broker about it finds it.

* :meth:`alter_partition` commits a leader's ISR change once it checks the
  leader and partition epochs the leader based it on; :meth:`controlled_shutdown`
  moves a stopping broker's leaderships away first; :meth:`rebalance_leaders`
  gives partitions back to their preferred (first) replica.
* :meth:`reassign` starts moving partitions to new replica sets,
  :meth:`cancel_reassignments` stops them, and the active controller
  completes each one as soon as its new replicas are in the ISR (checked
  after every ISR change it commits, and on every round of its duties, so a
  controller that has just become active finishes what another started).

Brokers reach these through :mod:`.controller_methods` (over :mod:`.rpc`); a heartbeat
also carries the committed metadata records the broker has not applied, so
brokers follow the metadata at the pace it commits. A broker whose offset is
below the quorum's log start (the records before it are in a snapshot now)
gets the whole image instead, as of the applied offset, and follows the
records from there.

The quorum's snapshots are of this image (:func:`~.metadata.encode_image`);
a voter that restores one (at start, or sent by the leader) rebuilds its
image from it.

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

from eventplatform.log.cluster.answers import (
    heartbeat_answer,
    heartbeat_wait_ms,
)
from eventplatform.log.cluster.metadata import (
    NO_LEADER,
    AclChange,
    AddPartitions,
    CreateTopic,
    DeleteTopic,
    Erasure,
    FenceBroker,
    GroupConfigs,
    MetadataError,
    MetadataImage,
    MetadataRecord,
    PartitionAssignment,
    PartitionChange,
    ProducerIds,
    QuotaChangeRecord,
    RegisterBroker,
    ScramChange,
    TopicConfigs,
    UnfenceBroker,
    assign_replicas,
    check_replica_assignment,
    decode,
    decode_image,
    elect_leader,
    encode,
    encode_image,
    fence_changes,
    is_internal_topic,
    place_replicas,
    scram_key,
)
from eventplatform.log.cluster.quorum import QuorumServer
from eventplatform.log.cluster.raft import LEADER_CHANGE, Entry, NotLeaderError
from eventplatform.log.cluster.reassignment import (
    cancel_reassignment,
    reassignment_completions,
    reassignments,
    start_reassignment,
)
from eventplatform.log.cluster.rpc import INVALID_REQUEST, Params, RpcError

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS_DEFAULT = 9_000
FENCE_CHECK_INTERVAL_S = 0.1
APPLY_POLL_S = 0.001
PRODUCER_ID_BLOCK = 1_000
PROPAGATION_WAIT_S = 5.0
"""How long a topic change's answer waits for the live brokers to have it."""
LEADER_REBALANCE_INTERVAL_S_DEFAULT = 300.0

# Codes of refused requests (the broker maps them to Kafka's error codes).
STALE_BROKER_EPOCH = "stale_broker_epoch"
TOPIC_EXISTS = "topic_exists"
UNKNOWN_TOPIC = "unknown_topic"
RESOURCE_NOT_FOUND = "resource_not_found"
INVALID_REPLICATION_FACTOR = "invalid_replication_factor"
INVALID_REPLICA_ASSIGNMENT = "invalid_replica_assignment"
INVALID_PARTITIONS = "invalid_partitions"
FENCED_LEADER_EPOCH = "fenced_leader_epoch"
INVALID_UPDATE_VERSION = "invalid_update_version"
INELIGIBLE_REPLICA = "ineligible_replica"
INVALID_REPLICAS = "invalid_replicas"
INVALID_REASSIGNMENT = "invalid_reassignment"
NO_REASSIGNMENT = "no_reassignment"


class Controller:
    """The metadata of one voter, and the active controller's decisions; see the module."""

    def __init__(
        self,
        quorum: QuorumServer,
        *,
        session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT,
        leader_rebalance_interval_s: float | None = LEADER_REBALANCE_INTERVAL_S_DEFAULT,
    ) -> None:
        self.quorum = quorum
        self.session_timeout_ms = session_timeout_ms
        self.leader_rebalance_interval_s = leader_rebalance_interval_s
        self.image = MetadataImage()
        self._heartbeats: dict[int, float] = {}
        self._active_epoch: int | None = None
        self._next_start = 0
        self._deciding = trio.Lock()
        self._shutting_down: set[tuple[int, int]] = set()
        self._broker_offsets: dict[int, int] = {}
        self._broker_offsets_moved = trio.Event()
        quorum.on_commit = self._apply
        quorum.take_snapshot = lambda: encode_image(self.image)
        quorum.restore = self._restore

    @property
    def active(self) -> bool:
        """Leading the quorum with the image current: a new leader's log may hold records
        of the previous epoch that commit only with its own first entry, and deciding
        before they are applied would contradict them."""
        return self.quorum.leads_caught_up

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

    def _restore(self, data: bytes) -> None:
        """Rebuild the image from a snapshot's data (a MetadataError if it is not one)."""
        self.image = decode_image(data)

    async def run(self) -> None:
        """The active controller's duties (fencing, completing reassignments, and every
        ``leader_rebalance_interval_s`` unless it is None, leader rebalancing) until
        cancelled."""
        interval_s = self.leader_rebalance_interval_s
        next_rebalance = trio.current_time() + (interval_s or 0.0)
        while True:
            await trio.sleep(FENCE_CHECK_INTERVAL_S)
            if not self.active:
                continue
            try:
                await self._fence_silent()
                await self.complete_reassignments()
                if interval_s is not None and trio.current_time() >= next_rebalance:
                    next_rebalance = trio.current_time() + interval_s
                    await self.rebalance_leaders()
            except (NotLeaderError, trio.TooSlowError) as exc:
                log.info("controller duties paused: %s", exc)

    # ------------------------------------------------------------ requests

    async def register(
        self,
        broker: int,
        host: str,
        port: int,
        rack: str | None = None,
        endpoints: tuple[tuple[str, str, int], ...] = (),
    ) -> int:
        """Register ``broker`` (again); returns its new epoch."""
        async with self._deciding:
            self.require_active()
            known = self.image.brokers.get(broker)
            epoch = (known.epoch if known else 0) + 1
            if known is not None:
                # a new incarnation: what the old one held (ISR places, leaderships) goes
                # first, as if it had been fenced; it rejoins the ISRs as it catches up
                if not known.fenced:
                    await self._commit([FenceBroker(broker, known.epoch)])
                changes = fence_changes(self.image, broker)
                if changes:
                    await self._commit(changes)
            self._shutting_down = {s for s in self._shutting_down if s[0] != broker}
            await self._commit([RegisterBroker(broker, epoch, host, port, rack, endpoints)])
            await self._commit([UnfenceBroker(broker, epoch)])
            self._heartbeats[broker] = trio.current_time()
            return epoch

    def heartbeat(self, broker: int, epoch: int) -> None:
        self.require_active()
        known = self.image.brokers.get(broker)
        if known is None or known.epoch != epoch:
            raise MetadataError(f"broker {broker} epoch {epoch} is not registered; register")
        self._heartbeats[broker] = trio.current_time()

    async def answer_heartbeat(self, broker: int, epoch: int, offset: int, wait_ms: int) -> Params:
        """Keep ``broker`` alive and answer with the committed records after its
        ``offset``, waiting up to ``wait_ms`` (bounded by :func:`heartbeat_wait_ms`) for
        some when there are none yet. A fenced broker that heartbeats again is unfenced."""
        self.require_active()
        if offset > self.quorum.applied:  # brokers only ever apply what was committed
            raise RpcError(
                INVALID_REQUEST, f"offset {offset} is past the committed {self.quorum.applied}"
            )
        try:
            self.heartbeat(broker, epoch)
        except MetadataError as exc:
            raise RpcError(STALE_BROKER_EPOCH, str(exc)) from exc
        self._note_broker_offset(broker, offset)
        if self.image.brokers[broker].fenced and (broker, epoch) not in self._shutting_down:
            await self.unfence(broker, epoch)
        wait_ms = heartbeat_wait_ms(self.session_timeout_ms, wait_ms)
        if self.quorum.applied <= offset and wait_ms:
            await self.quorum.wait_applied(offset, trio.current_time() + wait_ms / 1000)
        return heartbeat_answer(self.quorum, self.image, offset)

    async def unfence(self, broker: int, epoch: int) -> None:
        """A fenced broker that heartbeats again with its epoch is back (after a pause)."""
        async with self._deciding:
            self.require_active()
            known = self.image.brokers.get(broker)
            if known is not None and known.epoch == epoch and known.fenced:
                log.info("unfencing broker %d: it heartbeats again", broker)
                await self._commit([UnfenceBroker(broker, epoch)])

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str] | None = None,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> CreateTopic:
        """Commit a new topic: ``partitions`` placed round-robin with ``replication_factor``
        replicas each, or, when ``assignment`` is given, partition ``p`` on the brokers
        ``assignment[p]`` (refused with INVALID_REPLICA_ASSIGNMENT as Kafka refuses one)."""
        async with self._deciding:
            self.require_active()
            if name in self.image.topics:
                raise MetadataError(f"topic {name} exists")
            if assignment:
                assignments = self._assigned(assignment)
            else:
                placed = place_replicas(
                    self.image.live_brokers(), partitions, replication_factor, self._next_start
                )
                self._next_start += partitions
                assignments = tuple(PartitionAssignment(r, r, r[0]) for r in placed)
            record = CreateTopic(name, str(uuid.uuid4()), assignments, dict(configs or {}))
            await self._commit([record])
            return record

    def _assigned(
        self,
        assignment: Sequence[Sequence[int]],
        *,
        replicas_per_partition: int | None = None,
        first: int = 0,
    ) -> tuple[PartitionAssignment, ...]:
        """The partitions of an explicit assignment, checked against the registered and
        the live brokers."""
        try:
            check_replica_assignment(
                assignment,
                self.image.brokers,
                replicas_per_partition=replicas_per_partition,
                first=first,
            )
            return assign_replicas(assignment, set(self.image.live_brokers()), first=first)
        except MetadataError as exc:
            raise RpcError(INVALID_REPLICA_ASSIGNMENT, str(exc)) from exc

    async def add_partitions(
        self,
        name: str,
        count: int,
        replication_factor: int,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """Grow ``name`` to ``count`` partitions, placed round-robin or, when given, where
        ``assignment`` says (one replica list per new partition, each as long as the
        topic's partitions' replica lists)."""
        async with self._deciding:
            self.require_active()
            topic = self.image.topics.get(name)
            if topic is None:
                raise RpcError(UNKNOWN_TOPIC, f"topic {name} does not exist")
            if count <= len(topic.partitions):
                raise RpcError(
                    INVALID_PARTITIONS, f"topic {name} has {len(topic.partitions)} partitions"
                )
            factor = replication_factor
            if factor <= 0:
                first = topic.partitions[0]
                factor = len(first.target or first.replicas)
            if assignment:
                added = count - len(topic.partitions)
                if len(assignment) != added:
                    raise RpcError(
                        INVALID_REPLICA_ASSIGNMENT,
                        f"{added} partitions are added but {len(assignment)} are assigned",
                    )
                assignments = self._assigned(
                    assignment, replicas_per_partition=factor, first=len(topic.partitions)
                )
            else:
                placed = place_replicas(
                    self.image.live_brokers(),
                    count - len(topic.partitions),
                    factor,
                    self._next_start,
                )
                self._next_start += len(placed)
                assignments = tuple(PartitionAssignment(r, r, r[0]) for r in placed)
            await self._commit([AddPartitions(name, assignments)])

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        async with self._deciding:
            self.require_active()
            if name not in self.image.topics:
                raise RpcError(UNKNOWN_TOPIC, f"topic {name} does not exist")
            await self._commit([TopicConfigs(name, dict(configs))])

    async def set_group_configs(self, group: str, configs: Mapping[str, str]) -> None:
        async with self._deciding:
            self.require_active()
            await self._commit([GroupConfigs(group, dict(configs))])

    async def delete_topic(self, name: str) -> None:
        async with self._deciding:
            self.require_active()
            if name not in self.image.topics:
                raise RpcError(UNKNOWN_TOPIC, f"topic {name} does not exist")
            await self._commit([DeleteTopic(name)])

    async def change_scram(self, change: ScramChange) -> int:
        """Commit users' credential changes; the security version that has them."""
        async with self._deciding:
            self.require_active()
            for user, mechanism in change.deleted:
                if scram_key(mechanism, user) not in self.image.scram:
                    raise RpcError(
                        RESOURCE_NOT_FOUND, f"user {user!r} has no {mechanism} credential"
                    )
            await self._commit([change])
            return self.image.security_version

    async def change_quotas(self, change: QuotaChangeRecord) -> int:
        """Commit client quotas set and removed; the security version that has them."""
        async with self._deciding:
            self.require_active()
            await self._commit([change])
            return self.image.security_version

    async def change_acls(self, change: AclChange) -> int:
        """Commit ACL bindings added and removed; the security version that has them."""
        async with self._deciding:
            self.require_active()
            await self._commit([change])
            return self.image.security_version

    async def erase(self, erasure: Erasure) -> int:
        """Commit an erasure of records of a partition; the erasure version that has it."""
        async with self._deciding:
            self.require_active()
            topic = self.image.topics.get(erasure.topic)
            if topic is None:
                raise RpcError(UNKNOWN_TOPIC, f"topic {erasure.topic} does not exist")
            if not 0 <= erasure.partition < len(topic.partitions):
                raise RpcError(
                    UNKNOWN_TOPIC, f"topic {erasure.topic} has no partition {erasure.partition}"
                )
            await self._commit([erasure])
            return self.image.erasure_version

    async def allocate_producer_ids(self, broker: int, epoch: int) -> ProducerIds:
        """The next block of producer ids, for ``broker`` alone."""
        async with self._deciding:
            self.require_active()
            known = self.image.brokers.get(broker)
            if known is None or known.epoch != epoch:
                raise RpcError(STALE_BROKER_EPOCH, f"broker {broker} epoch {epoch} is stale")
            block = ProducerIds(broker, self.image.next_producer_id, PRODUCER_ID_BLOCK)
            await self._commit([block])
            return block

    async def alter_partition(
        self,
        topic: str,
        partition: int,
        *,
        broker: int,
        leader_epoch: int,
        partition_epoch: int,
        isr: Sequence[int],
    ) -> PartitionChange | None:
        """The leader ``broker`` asks for ``isr``, having seen the partition at
        ``leader_epoch`` and ``partition_epoch``; a stale view is refused."""
        async with self._deciding:
            self.require_active()
            try:
                state = self.image.partition(topic, partition)
            except MetadataError as exc:
                raise RpcError(UNKNOWN_TOPIC, str(exc)) from exc
            if state.leader != broker or state.leader_epoch != leader_epoch:
                raise RpcError(
                    FENCED_LEADER_EPOCH,
                    f"{topic}/{partition}: broker {broker} at leader epoch {leader_epoch} "
                    f"is not the leader (leader {state.leader}, epoch {state.leader_epoch})",
                )
            if state.partition_epoch != partition_epoch:
                raise RpcError(
                    INVALID_UPDATE_VERSION,
                    f"{topic}/{partition}: partition epoch {partition_epoch} is stale "
                    f"(now {state.partition_epoch})",
                )
            wanted = tuple(r for r in state.replicas if r in set(isr))
            if broker not in wanted:
                raise RpcError(INVALID_REPLICAS, f"the ISR {list(isr)} must hold its leader")
            live = set(self.image.live_brokers())
            added = [r for r in wanted if r not in state.isr and r not in live]
            if added:
                raise RpcError(INELIGIBLE_REPLICA, f"brokers {added} are fenced")
            if wanted == state.isr:
                return None
            change = PartitionChange(topic, partition, isr=wanted)
            await self._commit([change])
            await self._complete_reassignments()
            return change

    async def controlled_shutdown(self, broker: int, epoch: int) -> None:
        """Move ``broker``'s leaderships away and take it out of every ISR, as fencing does,
        before it stops: its clients move to the new leaders at once."""
        async with self._deciding:
            self.require_active()
            known = self.image.brokers.get(broker)
            if known is None or known.epoch != epoch:
                raise RpcError(STALE_BROKER_EPOCH, f"broker {broker} epoch {epoch} is stale")
            self._shutting_down.add((broker, epoch))
            if not known.fenced:
                log.info("controlled shutdown of broker %d", broker)
                await self._commit([FenceBroker(broker, epoch)])
            changes = fence_changes(self.image, broker)
            if changes:
                await self._commit(changes)

    async def rebalance_leaders(self) -> int:
        """Give each partition back to its preferred replica when that one is live and in
        the ISR; how many moved."""
        async with self._deciding:
            self.require_active()
            live = set(self.image.live_brokers())
            changes = [
                PartitionChange(topic.name, number, leader=state.replicas[0])
                for topic in self.image.topics.values()
                for number, state in enumerate(topic.partitions)
                if state.leader != state.replicas[0]
                and state.replicas[0] in live
                and state.replicas[0] in state.isr
            ]
            if changes:
                log.info("moving %d partitions back to their preferred leaders", len(changes))
                await self._commit(changes)
            return len(changes)

    async def elect_leaderless(self) -> None:
        """Elect a leader for partitions that have none, now that a replica may be back."""
        async with self._deciding:
            self.require_active()
            live = self.image.live_brokers()
            changes = []
            for topic in self.image.topics.values():
                unclean = topic.configs.get("unclean.leader.election.enable", "false") == "true"
                for number, state in enumerate(topic.partitions):
                    if state.leader != NO_LEADER:
                        continue
                    leader = elect_leader(state, live, unclean=unclean)
                    if leader == NO_LEADER:
                        continue
                    isr = state.isr if leader in state.isr else (leader,)
                    changes.append(PartitionChange(topic.name, number, leader=leader, isr=isr))
            if changes:
                await self._commit(changes)

    # ------------------------------------------------------------ reassignment

    async def reassign(self, targets: Sequence[tuple[str, int, Sequence[int]]]) -> int:
        """Start moving each (topic, partition) to its replicas; all or nothing: one bad
        entry refuses the whole request. Returns how many partitions changed."""
        async with self._deciding:
            self.require_active()
            seen: set[tuple[str, int]] = set()
            changes = []
            for topic, partition, replicas in targets:
                self._check_reassignable(topic, partition)
                if (topic, partition) in seen:
                    raise RpcError(INVALID_REASSIGNMENT, f"{topic}/{partition} is named twice")
                seen.add((topic, partition))
                try:
                    change = start_reassignment(self.image, topic, partition, replicas)
                except MetadataError as exc:
                    raise RpcError(INVALID_REASSIGNMENT, str(exc)) from exc
                if change is not None:
                    changes.append(change)
            if changes:
                log.info("reassigning %d partitions", len(changes))
                await self._commit(changes)
                await self._complete_reassignments()
            return len(changes)

    async def cancel_reassignments(self, partitions: Sequence[tuple[str, int]] | None) -> int:
        """Return the partitions (every one being reassigned, for None) to their replicas
        before the reassignment; all or nothing. Returns how many were cancelled."""
        async with self._deciding:
            self.require_active()
            if partitions is None:
                partitions = [(name, number) for name, number, _ in reassignments(self.image)]
            live = self.image.live_brokers()
            changes = []
            for topic, partition in partitions:
                self._check_reassignable(topic, partition)
                state = self.image.partition(topic, partition)
                try:
                    changes.append(cancel_reassignment(state, topic, partition, live))
                except MetadataError as exc:
                    raise RpcError(NO_REASSIGNMENT, str(exc)) from exc
            if changes:
                log.info("cancelling the reassignment of %d partitions", len(changes))
                await self._commit(changes)
            return len(changes)

    async def complete_reassignments(self) -> None:
        """Complete every reassignment whose new replicas are all in the ISR."""
        if any(state.reassigning for _, _, state in reassignments(self.image)):
            async with self._deciding:
                self.require_active()
                await self._complete_reassignments()

    async def _complete_reassignments(self) -> None:
        changes = reassignment_completions(self.image)
        if changes:
            for change in changes:
                log.info(
                    "%s/%d: reassignment complete, replicas %s, leader %s",
                    change.topic,
                    change.partition,
                    list(change.replicas or ()),
                    change.leader,
                )
            await self._commit(changes)

    def _check_reassignable(self, topic: str, partition: int) -> None:
        state = self.image.topics.get(topic)
        if state is None or not 0 <= partition < len(state.partitions):
            raise RpcError(UNKNOWN_TOPIC, f"no partition {topic}/{partition}")
        if is_internal_topic(topic):
            raise RpcError(INVALID_REASSIGNMENT, f"the internal topic {topic} cannot be moved")

    # ------------------------------------------------------------ propagation

    def _note_broker_offset(self, broker: int, offset: int) -> None:
        """A heartbeat says ``broker`` has applied the metadata up to ``offset``."""
        if offset > self._broker_offsets.get(broker, -1):
            self._broker_offsets[broker] = offset
            self._broker_offsets_moved.set()
            self._broker_offsets_moved = trio.Event()

    async def wait_propagated(self, timeout_s: float = PROPAGATION_WAIT_S) -> bool:
        """Wait (bounded) until every live broker has applied the metadata committed so
        far, so a client told that a topic change is done finds it on whichever broker it
        asks next. Each heartbeat reports how far its broker has applied; a heartbeat
        waiting here for new records returns them at once, so this is about one round
        trip. False if some live broker was still behind when the time ran out."""
        target = self.quorum.applied
        with trio.move_on_after(timeout_s):
            while True:
                behind = [
                    broker
                    for broker in self.image.live_brokers()
                    if self._broker_offsets.get(broker, -1) < target
                ]
                if not behind:
                    return True
                await self._broker_offsets_moved.wait()
        log.info("live brokers %s had not applied offset %d in %.1f s", behind, target, timeout_s)
        return False

    # ------------------------------------------------------------ fencing

    async def _fence_silent(self) -> None:
        raft = self.quorum.raft
        now = trio.current_time()
        if self._active_epoch != raft.epoch:  # newly active: everyone gets a full session
            self._active_epoch = raft.epoch
            self._heartbeats = dict.fromkeys(self.image.brokers, now)
            log.info(
                "active controller at quorum epoch %d: every broker gets a full session",
                raft.epoch,
            )
        timeout_s = self.session_timeout_ms / 1000
        for broker in sorted(self.image.brokers):
            async with self._deciding:
                # read under the lock: a registration may have replaced the epoch meanwhile
                state = self.image.brokers.get(broker)
                silent_s = trio.current_time() - self._heartbeats.get(broker, now)
                if state is None or state.fenced or silent_s < timeout_s:
                    continue
                log.info("fencing broker %d: no heartbeat for %.1f s", broker, timeout_s)
                await self._commit([FenceBroker(broker, state.epoch)])
                changes: Sequence[MetadataRecord] = fence_changes(self.image, broker)
                if changes:
                    await self._commit(changes)
        if any(
            state.leader == NO_LEADER
            for topic in self.image.topics.values()
            for state in topic.partitions
        ):
            await self.elect_leaderless()

    # ------------------------------------------------------------ proposing

    def require_active(self) -> None:
        """Raise NotLeaderError (naming the leader) unless this controller is active."""
        if not self.active:
            raise NotLeaderError(self.quorum.raft.leader if self.quorum.node else None)

    async def _commit(self, records: Sequence[MetadataRecord]) -> None:
        """Propose ``records`` and wait until they are committed and applied here."""
        first = await self.quorum.propose([encode(record) for record in records])
        end = first + len(records)
        while self.quorum.applied < end:  # applied before propose returns; this is a guard
            await trio.sleep(APPLY_POLL_S)
