"""A broker's replicas in a cluster: roles from the metadata, followers' fetching, the ISR.

:class:`ReplicaManager` turns each metadata image the broker receives into
local state. It creates, grows, reconfigures and deletes topics as the
image says, and makes each partition replica a leader or a follower of the
leader the image names, at the image's leader epoch. The broker holds only
the partitions it is a replica of (every partition of an internal topic):
one it becomes a replica of (a reassignment adding it) starts empty and
fetches from the leader; one it stops being a replica of (a reassignment
removing it) stops fetching and is deleted from its disk.

A follower is fetched for by the :class:`ReplicaFetcher` of its leader, one
per leader broker, over the Kafka protocol (:mod:`.peer`):

* first it **truncates by leader epoch**: OffsetForLeaderEpoch for its
  latest epoch, then truncate to where the leader's log and its own agree
  (KIP-101, KIP-279). The high watermark plays no part, so a follower never
  keeps a divergent suffix, and never drops a committed record;
* then Fetch (v15, topics by id) with its replica id and its broker epoch
  (``ReplicaState``, from its registration with the controller), from its
  log end, appending what comes back with the leader's offsets and epochs,
  and taking the leader's high watermark. The leader believes a follower's
  fetch offset only with the broker's current epoch (see
  :mod:`~eventplatform.log.broker.handlers.fetch`); a follower that has just
  registered again is refused (STALE_BROKER_EPOCH) until the leader has the
  registration, and retries.

A partition a storage error took offline takes no role and is not fetched
for; the broker moves its leaderships away (see
:class:`~eventplatform.log.cluster.node.BrokerMember`).

A leader learns its followers' positions from their fetches (the fetch
handler feeds :meth:`~eventplatform.log.replica.partition.Partition.on_replica_fetch`)
and :meth:`ReplicaManager.maintain_isr` asks the controller to shrink or
expand the ISR as followers fall behind or catch up.
"""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from eventplatform.log.cluster.metadata import (
    MetadataImage,
    PartitionState,
    TopicState,
    is_internal_topic,
)
from eventplatform.log.cluster.peer import PeerConnection, PeerError
from eventplatform.log.cluster.rpc import RpcError
from eventplatform.log.cluster.security_records import load_security
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import FETCH, OFFSET_FOR_LEADER_EPOCH
from eventplatform.log.replica.partition import NO_LEADER, Partition, ReplicaSettings
from eventplatform.log.replica.topics import Topic, TopicError
from eventplatform.log.storage import KafkaStorageError, StorageError

if TYPE_CHECKING:
    from eventplatform.log.cluster.broker_link import BrokerLink
    from eventplatform.log.cluster.host import BrokerHost

log = logging.getLogger(__name__)

FETCH_VERSION = 15
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
PARTITION_FETCH_BYTES = 1024 * 1024
FETCH_BYTES = 16 * 1024 * 1024
RETRY_DELAY_S = 0.1
ISR_CHECK_INTERVAL_S = 0.1
ALTER_RETRY_DELAY_S = 1.0
REQUEST_TIMEOUT_MARGIN_S = 5.0
ERROR_LOG_INTERVAL_S = 10.0
"""A fetcher that keeps failing says so once, then at most this often (it retries every
RETRY_DELAY_S: a dead leader would fill the log ten lines a second)."""
RETRIABLE = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.STALE_BROKER_EPOCH,
}


def topic_id_bytes(topic_id: str) -> bytes:
    return uuid.UUID(topic_id).bytes


class ReplicaManager:
    """See the module docstring. Runs on the broker's trio thread."""

    def __init__(self, broker: BrokerHost) -> None:
        self.broker = broker
        self.node_id = broker.node_id
        self.image = MetadataImage()
        self.link: BrokerLink | None = None
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.applied = trio.Event()
        self.applied_once = False
        self._nursery: trio.Nursery | None = None
        self._altering: set[tuple[str, int]] = set()
        self._security_version = 0

    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        for partition in self.broker.topics.partitions():
            partition.join_cluster(self.node_id)
        nursery.start_soon(self.maintain_isr)

    def settings(self, topic: Topic) -> ReplicaSettings:
        return ReplicaSettings(
            self.broker.config.replica_lag_time_max_ms, topic.log_config.min_insync_replicas
        )

    # ------------------------------------------------------------ metadata

    def apply(self, image: MetadataImage) -> None:
        """Make the local topics and replica roles what ``image`` says, and the broker's
        credentials and ACLs the cluster's."""
        self.image = image
        if image.security_version != self._security_version:
            load_security(image, self.broker.credentials, self.broker.acls, self.broker.quotas)
            self._security_version = image.security_version
        self.broker.group_configs.replace_all(image.group_configs)
        registry = self.broker.topics
        for name, state in image.topics.items():
            topic = self._ensure_topic(name, state)
            if topic is None:
                continue
            for number, partition_state in enumerate(state.partitions):
                try:
                    self._reconcile(topic, number, partition_state)
                except (OSError, StorageError) as exc:  # the epoch cache's disk failed
                    partition = topic.partitions[number]
                    if partition is not None:
                        partition.log.take_offline(exc)
            self._take_erasures(topic, state, image.erasure_version)
        for name in [name for name in registry.topics if name not in image.topics]:
            self._delete_topic(name)
        for leader, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions:
                fetcher.cancel()
                del self.fetchers[leader]
        self.broker.leadership_changed()
        self.applied.set()
        self.applied = trio.Event()

    def _take_erasures(self, topic: Topic, state: TopicState, version: int) -> None:
        """Note the erasures committed for the partitions held here: reads stop before
        each until the broker's erasure task has done it (:mod:`..replica.erasures`)."""
        for number, partition in enumerate(topic.partitions):
            if partition is None or partition.erasures.version == version:
                continue
            partition.erasures.version = version
            if partition.erasures.commit(state.erasures.get(number, ())):
                self.broker.erasure_work.wake()

    def _ensure_topic(self, name: str, state: TopicState) -> Topic | None:
        registry = self.broker.topics
        topic = registry.get(name)
        wanted_id = topic_id_bytes(state.topic_id)
        if topic is not None and topic.topic_id != wanted_id:
            log.info("topic %s was deleted and created again; dropping the old one", name)
            self._delete_topic(name)
            topic = None
        try:
            if topic is None:
                topic = registry.create(
                    name,
                    len(state.partitions),
                    state.configs,
                    internal=is_internal_topic(name),
                    topic_id=wanted_id,
                    hosted=self._held(name, state.partitions),
                )
                for partition in registry.partitions_of(name):
                    partition.join_cluster(self.node_id)
            if len(topic.partitions) < len(state.partitions):
                known = len(topic.partitions)
                held = self._held(name, state.partitions)
                registry.add_partitions(
                    name, len(state.partitions), {i for i in held if i >= known}
                )
                for partition in registry.partitions_of(name, first=known):
                    partition.join_cluster(self.node_id)
            if topic.configs != state.configs:
                registry.set_configs(name, state.configs)
        except (TopicError, StorageError, OSError) as exc:
            log.error("cannot apply topic %s from the metadata: %s", name, exc)
            return None
        return topic

    def _held(self, name: str, partitions: list[PartitionState]) -> set[int]:
        """The partitions of topic ``name`` this broker holds: those it is a replica of,
        and every one of an internal topic (its group coordinators read them all)."""
        return {number for number, state in enumerate(partitions) if self._holds(name, state)}

    def _holds(self, name: str, state: PartitionState) -> bool:
        return is_internal_topic(name) or self.node_id in state.replicas

    def _delete_topic(self, name: str) -> None:
        topic = self.broker.topics.get(name)
        if topic is None:
            return
        for partition in self.broker.topics.partitions_of(name):
            self._stop_fetching(partition)
        self.broker.topics.delete(name)
        if self.broker.groups is not None:
            self.broker.groups.topic_deleted(name)

    def _reconcile(self, topic: Topic, number: int, state: PartitionState) -> None:
        partition = topic.partitions[number]
        if not self._holds(topic.name, state):
            if partition is not None:
                log.info("%s-%d: no longer a replica; deleting it", topic.name, number)
                self._stop_fetching(partition)
                self.broker.topics.drop(topic.name, number)
            return
        if partition is None:
            try:
                partition = self.broker.topics.host(topic.name, number)
            except (StorageError, OSError) as exc:
                log.error("%s-%d: cannot create the new replica: %s", topic.name, number, exc)
                return
            log.info("%s-%d: a new replica; following the leader", topic.name, number)
            partition.join_cluster(self.node_id)
        if partition.offline:  # it serves nothing until the broker restarts
            self._stop_fetching(partition)
            if partition.is_leader:
                partition.become_follower(
                    NO_LEADER, state.leader_epoch, state.partition_epoch, state.replicas
                )
            return
        if self.node_id not in state.replicas:
            if partition.is_leader or partition.leader_id != NO_LEADER:
                self._stop_fetching(partition)
                partition.become_follower(NO_LEADER, state.leader_epoch, state.partition_epoch, ())
            return
        if state.leader == self.node_id:
            self._lead(topic, partition, state)
            return
        changed = (
            partition.is_leader
            or partition.leader_id != state.leader
            or partition.leader_epoch != state.leader_epoch
        )
        if changed:
            self._stop_fetching(partition)
            partition.become_follower(
                state.leader, state.leader_epoch, state.partition_epoch, state.replicas
            )
            if state.leader != NO_LEADER:
                self._fetcher(state.leader).add(partition)
        else:
            partition.partition_epoch = state.partition_epoch
            partition.replica_set = state.replicas

    def _lead(self, topic: Topic, partition: Partition, state: PartitionState) -> None:
        if (
            partition.is_leader
            and partition.leader_epoch == state.leader_epoch
            and partition.partition_epoch == state.partition_epoch
        ):
            return
        self._stop_fetching(partition)
        if not partition.is_leader or partition.leader_epoch != state.leader_epoch:
            log.info(
                "leading %s-%d at epoch %d (ISR %s)",
                partition.topic,
                partition.index,
                state.leader_epoch,
                list(state.isr),
            )
        partition.become_leader(
            state.leader_epoch,
            state.partition_epoch,
            state.replicas,
            state.isr,
            self.settings(topic),
            self.broker.clock_ms(),
        )

    def _fetcher(self, leader: int) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader)
        if fetcher is None:
            fetcher = self.fetchers[leader] = ReplicaFetcher(self, leader)
            assert self._nursery is not None
            self._nursery.start_soon(fetcher.run)
        return fetcher

    def _stop_fetching(self, partition: Partition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(partition)

    # ------------------------------------------------------------ the ISR

    async def maintain_isr(self) -> None:
        """Ask the controller to shrink or expand the ISR of the partitions this broker leads."""
        while True:
            await trio.sleep(ISR_CHECK_INTERVAL_S)
            now = self.broker.clock_ms()
            for partition in list(self.broker.topics.partitions()):
                replicas = partition.replicas
                key = (partition.topic, partition.index)
                if (
                    replicas is None
                    or key in self._altering
                    or self.link is None
                    or partition.offline
                ):
                    continue
                shrink, expand = replicas.to_shrink(now), replicas.to_expand()
                if not shrink and not expand:
                    continue
                wanted = (replicas.isr - shrink) | expand
                replicas.propose(wanted)
                self._altering.add(key)
                assert self._nursery is not None
                self._nursery.start_soon(self._alter, partition, wanted, shrink, expand)

    async def _alter(
        self,
        partition: Partition,
        isr: frozenset[int],
        shrink: frozenset[int],
        expand: frozenset[int],
    ) -> None:
        key = (partition.topic, partition.index)
        replicas = partition.replicas
        try:
            assert self.link is not None
            log.info(
                "%s-%d: asking for ISR %s (out: %s, in: %s)",
                partition.topic,
                partition.index,
                sorted(isr),
                sorted(shrink),
                sorted(expand),
            )
            await self.link.alter_partition(partition, sorted(isr))
            # the committed ISR arrives with the metadata; wait for it (bounded)
            with trio.move_on_after(self.broker.config.broker_heartbeat_interval_ms / 1000 * 4):
                while partition.replicas is replicas and replicas is not None and replicas.pending:
                    await self.applied.wait()
        except (RpcError, trio.TooSlowError) as exc:
            log.info("%s-%d: the ISR change was refused: %s", partition.topic, partition.index, exc)
            await trio.sleep(ALTER_RETRY_DELAY_S)
        finally:
            if replicas is not None and replicas is partition.replicas:
                replicas.propose(None)
            self._altering.discard(key)


@dataclass(slots=True)
class _Following:
    partition: Partition
    epoch: int
    truncate: bool = True
    retry_at: float = 0.0


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader; see the module."""

    def __init__(self, manager: ReplicaManager, leader: int) -> None:
        self.manager = manager
        self.leader = leader
        self.partitions: dict[tuple[str, int], _Following] = {}
        self._changed = trio.Event()
        self._scope = trio.CancelScope()
        self._connection: PeerConnection | None = None
        self._failing_since: float | None = None
        self._failures = 0
        self._logged_at = -math.inf

    def add(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self.partitions[key] = _Following(partition, partition.leader_epoch)
        self._changed.set()

    def remove(self, partition: Partition) -> None:
        following = self.partitions.get((partition.topic, partition.index))
        if following is not None and following.partition is partition:
            del self.partitions[(partition.topic, partition.index)]

    def cancel(self) -> None:
        self._scope.cancel()

    def _current(self, following: _Following) -> bool:
        partition = following.partition
        key = (partition.topic, partition.index)
        return (
            self.partitions.get(key) is following
            and not partition.is_leader
            and partition.leader_id == self.leader
            and partition.leader_epoch == following.epoch
            and not partition.offline
        )

    async def run(self) -> None:
        with self._scope:
            try:
                while True:
                    if not self.partitions:
                        self._changed = trio.Event()
                        await self._changed.wait()
                        continue
                    connection = self._connect()
                    if connection is None:
                        await trio.sleep(RETRY_DELAY_S)
                        continue
                    try:
                        await self._truncate(connection)
                        fetched = await self._fetch(connection)
                        self._recovered()
                        if not fetched:
                            await trio.sleep(RETRY_DELAY_S / 2)
                    except PeerError as exc:
                        self._failed(exc)
                        await trio.sleep(RETRY_DELAY_S)
                    except KafkaStorageError as exc:
                        # that partition is offline now and no longer fetched for (the
                        # broker moves its leaderships away); the others go on next round
                        log.error("fetching from %d: %s", self.leader, exc)
            finally:
                if self._connection is not None:
                    with trio.CancelScope(shield=True):
                        await self._connection.aclose()

    def _failed(self, error: PeerError) -> None:
        now = trio.current_time()
        self._failures += 1
        if self._failing_since is None:
            self._failing_since = now
        if now - self._logged_at >= ERROR_LOG_INTERVAL_S:
            self._logged_at = now
            log.info(
                "fetching from %d: %s (%d failures in %.1f s)",
                self.leader,
                error,
                self._failures,
                now - self._failing_since,
            )

    def _recovered(self) -> None:
        if self._failing_since is not None:
            log.info(
                "fetching from %d again after %d failures in %.1f s",
                self.leader,
                self._failures,
                trio.current_time() - self._failing_since,
            )
        self._failing_since, self._failures, self._logged_at = None, 0, -math.inf

    def _connect(self) -> PeerConnection | None:
        broker = self.manager.image.brokers.get(self.leader)
        if broker is None:
            return None
        connection = self._connection
        if connection is None or (connection.host, connection.port) != (broker.host, broker.port):
            connection = self._connection = PeerConnection(
                broker.host,
                broker.port,
                f"replica-{self.manager.node_id}",
                self.manager.broker.network,
            )
        return connection

    def _timeout_s(self) -> float:
        wait_ms = self.manager.broker.config.replica_fetch_wait_max_ms
        return wait_ms / 1000 + REQUEST_TIMEOUT_MARGIN_S

    async def _truncate(self, connection: PeerConnection) -> None:
        now = trio.current_time()
        pending = [
            f
            for f in self.partitions.values()
            if f.truncate and f.retry_at <= now and self._current(f)
        ]
        asking = []
        for following in pending:
            if following.partition.epochs.latest_epoch < 0:
                following.truncate = False  # nothing of any epoch to disagree about
            else:
                asking.append(following)
        if not asking:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for following in asking:
            partition = following.partition
            topics.setdefault(partition.topic, []).append(
                {
                    "partition": partition.index,
                    "current_leader_epoch": following.epoch,
                    "leader_epoch": partition.epochs.latest_epoch,
                }
            )
        body = {
            "replica_id": self.manager.node_id,
            "topics": [{"topic": t, "partitions": p} for t, p in topics.items()],
        }
        version = OFFSET_FOR_LEADER_EPOCH_VERSION
        response = await connection.request(
            OFFSET_FOR_LEADER_EPOCH, version, body, timeout_s=self._timeout_s()
        )
        answers = _by_partition(response["topics"], "partition")
        for following in asking:
            partition = following.partition
            answer = answers.get((partition.topic, partition.index))
            if answer is None or not self._current(following):
                continue
            if answer["error_code"] != ErrorCode.NONE:
                following.retry_at = trio.current_time() + RETRY_DELAY_S
                continue
            end = partition.log.log_end_offset
            offset = partition.epochs.truncation_offset(
                answer["leader_epoch"], answer["end_offset"], end
            )
            if offset < end:
                log.info(
                    "%s-%d: truncating from %d to %d to match leader %d (epoch %d ends at %d)",
                    partition.topic,
                    partition.index,
                    end,
                    offset,
                    self.leader,
                    answer["leader_epoch"],
                    answer["end_offset"],
                )
                partition.truncate_to(max(offset, partition.log.log_start_offset))
            following.truncate = False

    async def _fetch(self, connection: PeerConnection) -> bool:
        """One fetch round; False when there was nothing to fetch for."""
        now = trio.current_time()
        asked = [
            f
            for f in self.partitions.values()
            if not f.truncate and f.retry_at <= now and self._current(f)
        ]
        link = self.manager.link
        broker_epoch = link.epoch if link is not None else None
        if not asked or broker_epoch is None:
            return False
        topics: dict[str, list[dict[str, Any]]] = {}
        offsets = {}
        names = {}
        for following in asked:
            partition = following.partition
            topic = self.manager.broker.topics.get(partition.topic)
            if topic is None:
                continue
            names[topic.topic_id] = partition.topic
            offsets[(partition.topic, partition.index)] = partition.log.log_end_offset
            topics.setdefault(partition.topic, []).append(
                {
                    "partition": partition.index,
                    "current_leader_epoch": following.epoch,
                    "fetch_offset": partition.log.log_end_offset,
                    "log_start_offset": partition.log.log_start_offset,
                    "partition_max_bytes": PARTITION_FETCH_BYTES,
                }
            )
        config = self.manager.broker.config
        ids = {name: topic_id for topic_id, name in names.items()}
        body = {
            "replica_state": {"replica_id": self.manager.node_id, "replica_epoch": broker_epoch},
            "max_wait_ms": config.replica_fetch_wait_max_ms,
            "min_bytes": 1,
            "max_bytes": FETCH_BYTES,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic_id": ids[t], "partitions": p} for t, p in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        response = await connection.request(FETCH, FETCH_VERSION, body, timeout_s=self._timeout_s())
        for entry in response["responses"]:
            entry["topic"] = names.get(entry["topic_id"], "")
        answers = _by_partition(response["responses"], "partition_index")
        for following in asked:
            partition = following.partition
            key = (partition.topic, partition.index)
            answer = answers.get(key)
            if key not in offsets:
                continue
            if answer is None or not self._current(following):
                continue
            if partition.log.log_end_offset != offsets[key]:
                continue  # truncated meanwhile
            self._take(following, answer)
        return True

    def _take(self, following: _Following, answer: dict[str, Any]) -> None:
        partition = following.partition
        error = answer["error_code"]
        if error == ErrorCode.NONE:
            try:
                records = answer["records"] or b""
                if partition.append_replicated(records, answer["high_watermark"]):
                    self.manager.broker.erasure_work.wake()  # records it must erase came
            except StorageError as exc:
                log.error(
                    "%s-%d: cannot append what leader %d sent: %s",
                    partition.topic,
                    partition.index,
                    self.leader,
                    exc,
                )
                following.retry_at = trio.current_time() + RETRY_DELAY_S
                return
            leader_start = answer["log_start_offset"]
            if partition.log.log_start_offset < leader_start <= partition.log.log_end_offset:
                partition.log.advance_log_start_offset(leader_start)
        elif error == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_start = answer["log_start_offset"]
            if 0 <= partition.log.log_end_offset < leader_start:
                log.info(
                    "%s-%d: the leader's log starts at %d; starting there",
                    partition.topic,
                    partition.index,
                    leader_start,
                )
                partition.restart_at(leader_start)
            else:
                following.truncate = True
        else:
            if error not in RETRIABLE:
                log.warning(
                    "%s-%d: leader %d answered %s",
                    partition.topic,
                    partition.index,
                    self.leader,
                    ErrorCode(error).name,
                )
            following.retry_at = trio.current_time() + RETRY_DELAY_S


def _by_partition(
    topics: list[dict[str, Any]], partition_key: str
) -> dict[tuple[str, int], dict[str, Any]]:
    """A response's per-partition entries, by (topic, partition)."""
    return {
        (topic["topic"], entry[partition_key]): entry
        for topic in topics
        for entry in topic["partitions"]
    }
