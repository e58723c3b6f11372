"""The broker's shared state: configuration, topics, producer ids, the group coordinator.

``Broker.open`` loads the data directory (recovering every partition) and
``Broker.close`` shuts every log down cleanly and writes the broker's own
clean-shutdown marker. ``run_background`` is the one task that owns the
periodic work: retention and compaction, producer-id expiry. Compaction reads
and writes in a worker thread and swaps the cleaned segments in on the event
loop (see :meth:`Broker.compact_log`). ``run_flusher``
fsyncs the logs whose ``flush.ms`` has passed, in a worker thread, so that a
slow fsync never stalls the event loop's produce and fetch requests. Topic
changes are checked here and made by the node's :attr:`Broker.membership`
(:mod:`eventplatform.log.cluster.membership`), the one thing that differs
between a broker on its own and a cluster member.

Everything here runs on the broker's trio thread; handlers receive the
``Broker`` through their ``RequestContext``.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import struct
import threading
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from eventplatform.log.broker.descriptors import (
    DESCRIPTORS_FOR_ENTITY_VERSIONS,
    DESCRIPTORS_PER_NEW_PARTITION,
    check_new_partitions,
    partitions_held_here,
)
from eventplatform.log.broker.group_configs import GROUP_CONFIGS_FILE, GroupConfigStore
from eventplatform.log.broker.memory_pool import MemoryPool
from eventplatform.log.broker.metrics import RequestStats
from eventplatform.log.broker.sharing import ShareService
from eventplatform.log.broker.solo import SoloNode
from eventplatform.log.cluster.membership import Membership
from eventplatform.log.cluster.metadata import MetadataError, check_replica_assignment
from eventplatform.log.cluster.network import TCP, Network
from eventplatform.log.cluster.peer import PeerPool
from eventplatform.log.config import BrokerConfig, format_voters
from eventplatform.log.extensions import ENTITY_VERSIONS_CONFIG
from eventplatform.log.groups.share_group import ShareGroupSettings
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.erasures import ErasureWork
from eventplatform.log.replica.topics import META_FILE, Topic, TopicError, TopicRegistry
from eventplatform.log.security.acls import ACLS_FILE, AclAuthorizer, AclStore
from eventplatform.log.security.credentials import (
    CREDENTIALS_FILE,
    CredentialStore,
    FailedAuthentications,
)
from eventplatform.log.security.quotas import QUOTAS_FILE, QuotaStore, Rates
from eventplatform.log.security.session import SaslSettings, Session
from eventplatform.log.storage import Cleaner, KafkaStorageError
from eventplatform.log.storage.cleaner import CleaningAbortedError, CompactionJob
from eventplatform.log.storage.files import CLEAN_SHUTDOWN_FILE, write_atomically
from eventplatform.log.storage.partition_log import (
    DESCRIPTOR_LIMIT_ERRNOS,
    PartitionLog,
    run_flush_jobs,
    wall_clock_ms,
)
from eventplatform.log.transactions.records import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from eventplatform.log.groups.coordinator import GroupCoordinator
    from eventplatform.log.replica.partition import Partition
    from eventplatform.log.transactions.coordinator import TransactionCoordinator

log = logging.getLogger("eventplatform.broker")
T = TypeVar("T")

OffLoop = Callable[..., Awaitable[Any]]
"""How the broker runs blocking disk work (an fsync, creating files, compaction):
``await off_loop(work, *arguments)``. ``trio.to_thread.run_sync`` by default;
:func:`run_inline` where time is simulated."""


async def run_inline(work: Callable[..., T], *arguments: Any) -> T:
    """Disk work on the event loop itself, for runs under trio's mock clock (the
    deterministic simulations, the tests of timeouts): that clock jumps ahead whenever
    every task waits, and a worker thread's time is real."""
    return work(*arguments)


PRODUCER_ID_BLOCK = 1000
PRODUCER_IDS_FILE = "producer_ids"
FLUSH_INTERVAL_S = 1.0
FLUSH_CHECK_INTERVAL_S = 0.1
PRODUCER_EXPIRY_INTERVAL_S = 600.0
_INT64 = struct.Struct(">q")


class ProducerIdAllocator:
    """Hands out producer ids that are never reused, even across restarts.

    Ids are reserved in blocks: the end of the current block is written (and
    fsynced) before any id of it is handed out, so a crash skips at most the
    rest of a block.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.next_id = _INT64.unpack(path.read_bytes())[0] if path.exists() else 0
        self.block_end = self.next_id

    def allocate(self) -> int:
        if self.next_id >= self.block_end:
            self.block_end = self.next_id + PRODUCER_ID_BLOCK
            write_atomically(self.path, _INT64.pack(self.block_end))
        producer_id = self.next_id
        self.next_id += 1
        return producer_id


class Broker:
    """See the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicRegistry,
        cluster_id: str,
        clock_ms: Callable[[], int],
        off_loop: OffLoop = trio.to_thread.run_sync,
    ) -> None:
        self.config = config
        self.run_off_loop = off_loop
        self.topics = topics
        self.cluster_id = cluster_id
        self.node_id = config.node_id
        self.clock_ms = clock_ms
        self.port = config.listen_port
        self.producer_ids = ProducerIdAllocator(config.data_dir / PRODUCER_IDS_FILE)
        self.cleaner = Cleaner()
        self.log_rewrites = trio.Lock()
        """Held while a compaction or an erasure rewrites a log's segments."""
        self.erasure_work = ErasureWork()
        """Wakes the erasure task (:mod:`.erasing`) when a partition has erasures due."""
        self.request_memory = MemoryPool(config.queued_max_request_bytes)
        """Request bytes every connection together holds (``queued.max.request.bytes``)."""
        self.request_stats = RequestStats()
        """Requests, bytes and latencies by API, for the metrics endpoint (:mod:`.metrics`)."""
        self.groups: GroupCoordinator | None = None
        self.transactions: TransactionCoordinator | None = None
        self.membership: Membership = SoloNode(self)
        """What this node knows of its cluster and how it changes topics: a broker on its
        own until the server makes it a cluster member (:mod:`.membership`)."""
        self.api_versions: list[dict[str, int]] = []
        self.was_clean_shutdown = False
        self.network: Network = TCP
        """How this broker reaches other nodes (replica fetches, the controller)."""
        self.offline_partitions: set[tuple[str, int]] = set()
        """The partitions a storage error took offline (see :meth:`check_storage`)."""
        self.storage_failed = trio.Event()
        self.listener_ports: dict[str, int] = {}
        """The port each listener bound, by listener name (port 0 binds any free one)."""
        self.credentials = CredentialStore(
            None if config.clustered else config.data_dir / CREDENTIALS_FILE
        )
        """Users' SCRAM credentials: a file of a broker on its own."""
        self.failed_authentications = FailedAuthentications(config.failed_authentication_max_per_ip)
        self.acls = AclStore(None if config.clustered else config.data_dir / ACLS_FILE)
        self.quotas = QuotaStore(None if config.clustered else config.data_dir / QUOTAS_FILE)
        """Client quotas (AlterClientQuotas): a file of a broker on its own."""
        self.group_configs = GroupConfigStore(
            None if config.clustered else config.data_dir / GROUP_CONFIGS_FILE, config
        )
        """Group configs (IncrementalAlterConfigs on a group): a file of a broker on its own."""
        self.peers = PeerPool(self._peer_address, f"broker-{config.node_id}")
        """Connections to the other brokers, for share state and transaction markers."""
        self.shares = ShareService(self)
        """The share-partitions this broker leads, and its share sessions."""
        self.rates = Rates()
        self.authorizer = (
            AclAuthorizer(self.acls, config.super_users, config.allow_everyone_if_no_acl_found)
            if config.authorizer_class_name
            else None
        )
        """The ACLs' decision, or None: every request allowed (no ``authorizer.class.name``)."""
        self.sasl = SaslSettings(
            config.sasl_enabled_mechanisms,
            self.credentials,
            secrets.token_bytes(32),
            config.connections_max_reauth_ms,
        )

    def throttle(self, session: Session, client_id: str | None, key: str, amount: int) -> int:
        """Count ``amount`` bytes against the caller's ``key`` quota; the throttle time it
        owes in milliseconds (0 within its quota), and its connection muted for as long."""
        principal = session.principal or ""
        user = principal.partition(":")[2] or None
        found = self.quotas.byte_quota(user, client_id or "", key)
        if found is None:
            return 0
        now = trio.current_time()
        throttle_ms = self.rates.record(found[0], key, amount, found[1], now)
        if throttle_ms:
            session.muted_until = max(session.muted_until, now + throttle_ms / 1000)
        return throttle_ms

    def advertised_address(self, listener: str) -> tuple[str, int]:
        """Where clients of ``listener`` reach this broker."""
        return self.config.advertised_endpoint(
            listener, self.listener_ports.get(listener, self.port)
        )

    @classmethod
    def open(
        cls,
        config: BrokerConfig,
        clock_ms: Callable[[], int] = wall_clock_ms,
        off_loop: OffLoop = trio.to_thread.run_sync,
    ) -> Broker:
        data_dir = config.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        marker = data_dir / CLEAN_SHUTDOWN_FILE
        was_clean = marker.exists()
        marker.unlink(missing_ok=True)
        cluster_id = _load_cluster_id(data_dir, config)
        topics = TopicRegistry.open(data_dir, config.log_defaults, clock_ms)
        broker = cls(config, topics, cluster_id, clock_ms, off_loop)
        broker.was_clean_shutdown = was_clean
        log.info(
            "broker %d opened %s (%d topics, %s shutdown before)",
            config.node_id,
            data_dir,
            len(topics.topics),
            "clean" if was_clean else "unclean or first",
        )
        return broker

    @property
    def advertised_host(self) -> str:
        return self.config.advertised

    async def auto_create_topic(self, name: str) -> Topic | None:
        """Create ``name`` with the broker defaults when auto-creation is on."""
        if not self.config.auto_create_topics_enable:
            return None
        try:
            await self.create_topic(name, self.config.num_partitions, -1, {})
        except TopicError:
            return None
        topic = self.topics.get(name)
        if topic is not None:
            log.info("auto-created topic %s with %d partitions", name, len(topic.partitions))
        return topic

    # ------------------------------------------------------------ topic changes
    # Checked here against what this node knows, then made by its membership: a broker on
    # its own changes its own topics; a cluster member asks the controller and returns
    # once the committed change has reached it.

    def check_assignment(
        self,
        assignment: list[list[int]],
        *,
        replicas_per_partition: int | None = None,
        first: int = 0,
    ) -> None:
        """Refuse (INVALID_REPLICA_ASSIGNMENT) an explicit replica assignment Kafka refuses,
        against the brokers this one knows (the registered brokers of the cluster, this
        node alone on its own). The active controller checks a cluster's again as it
        decides."""
        try:
            check_replica_assignment(
                assignment,
                self.membership.broker_ids(),
                replicas_per_partition=replicas_per_partition,
                first=first,
            )
        except MetadataError as exc:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, str(exc)) from exc

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        assignment: list[list[int]] | None = None,
    ) -> None:
        """Create ``name``: ``partitions`` of ``replication_factor`` replicas (-1: the
        default), or laid out by ``assignment`` (partition ``p`` on the brokers
        ``assignment[p]``; ``partitions`` is then its length)."""
        self.check_new_topic(name, partitions, replication_factor, configs, assignment)
        if assignment:
            replication_factor = len(assignment[0])
        await self.membership.create_topic(
            name, partitions, replication_factor, configs, assignment
        )

    def check_new_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        assignment: list[list[int]] | None = None,
    ) -> None:
        """Every check of a new topic this node can make before the change (CreateTopics'
        ``validate_only`` stops here)."""
        self.topics.check_new_topic(name, partitions, configs)
        if assignment:
            self.check_assignment(assignment)
            replication_factor = len(assignment[0])
        versioned = configs.get(ENTITY_VERSIONS_CONFIG, "").strip().lower() == "true"
        self.check_descriptors(partitions, replication_factor, versioned=versioned)
        self.membership.check_replication_factor(replication_factor)

    def check_descriptors(
        self, partitions: int, replication_factor: int = -1, *, versioned: bool = False
    ) -> None:
        """Refuse (POLICY_VIOLATION) ``partitions`` new partitions whose replicas would
        leave this broker too few file descriptors for its connections, counting the
        share of them it would hold (and, ``versioned``, their entity versions' files)."""
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        brokers = len(self.membership.live_brokers())
        held = partitions_held_here(partitions, replication_factor, brokers)
        each = DESCRIPTORS_PER_NEW_PARTITION + (DESCRIPTORS_FOR_ENTITY_VERSIONS if versioned else 0)
        check_new_partitions(held, max_connections=self.config.max_connections, each=each)

    async def delete_topic(self, name: str) -> None:
        if self.topics.get(name) is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        await self.membership.delete_topic(name)

    async def add_partitions(
        self, name: str, count: int, assignment: list[list[int]] | None = None
    ) -> None:
        """Grow ``name`` to ``count`` partitions, the new ones laid out by ``assignment``
        when given (its checks: :meth:`check_new_partitions`)."""
        self.check_new_partitions(name, count, assignment)
        await self.membership.add_partitions(name, count, assignment)

    def check_new_partitions(
        self, name: str, count: int, assignment: list[list[int]] | None
    ) -> None:
        """Refuse a CreatePartitions entry as Kafka does: a count that does not grow the
        topic, or an assignment that does not name one replica list per new partition,
        each as long as the topic's replica lists, or partitions that would exhaust this
        broker's descriptor budget (:meth:`check_descriptors`)."""
        topic = self.topics.check_partition_count(name, count)
        if topic.log_config.eventplatform_entity_versions_enable:
            raise TopicError(
                ErrorCode.POLICY_VIOLATION,
                f"topic {name!r} keeps entity versions ({ENTITY_VERSIONS_CONFIG}=true): with "
                "more partitions some entities' next events would land in another partition, "
                "splitting their histories and versions; turn the config off first to add "
                "partitions anyway",
            )
        replication_factor = self.membership.replication_factor(name)
        self.check_descriptors(count - len(topic.partitions), replication_factor)
        if not assignment:
            return
        current = len(topic.partitions)
        if len(assignment) != count - current:
            raise TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"{count - current} partitions are added but {len(assignment)} are assigned",
            )
        replicas = self.membership.assigned_replicas(name)
        self.check_assignment(assignment, replicas_per_partition=replicas, first=current)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics.check_configs(name, configs)
        await self.membership.set_topic_configs(name, configs)

    async def ensure_coordinator_topic(self, name: str) -> Topic:
        """``__consumer_offsets`` or ``__transaction_state``, created now if missing (with
        its ``offsets.topic.*`` or ``transaction.state.log.*`` settings; on a cluster
        through the controller, with at most as many replicas as live brokers).
        Raises TopicError when it cannot be had."""
        topic = self.topics.get(name)
        if topic is not None:
            await trio.lowlevel.checkpoint()
            return topic
        config = self.config
        if name == TRANSACTION_STATE_TOPIC:
            count = config.transaction_state_log_num_partitions
            factor = config.transaction_state_log_replication_factor
            segment_bytes = config.transaction_state_log_segment_bytes
        else:
            count = config.offsets_topic_num_partitions
            factor = config.offsets_topic_replication_factor
            segment_bytes = config.offsets_topic_segment_bytes
        factor = max(min(factor, len(self.membership.live_brokers())), 1)
        configs = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
        try:
            await self.create_topic(name, count, factor, configs)
        except TopicError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"creating {name}")
        return topic

    def leader_of(self, topic: str, index: int) -> int:
        """The leader of a partition as this broker knows it (-1: none, or unknown)."""
        known = self.topics.get(topic)
        if known is None:
            return -1
        for layout in self.membership.layout(known):
            if layout.index == index:
                return layout.leader
        return -1

    def leadership_changed(self) -> None:
        """This broker's leaderships of internal partitions may have moved: its group and
        transaction coordinators load or drop what they coordinate."""
        if self.groups is not None:
            self.groups.leadership_changed()
        if self.transactions is not None:
            self.transactions.leadership_changed()

    def _peer_address(self, node_id: int) -> tuple[str, int] | None:
        registered = self.membership.registered_broker(node_id)
        return None if registered is None else (registered.host, registered.port)

    def share_group_settings(self, group_id: str) -> ShareGroupSettings:
        """A share group's coordinator settings: its group configs."""
        configs = self.group_configs
        return ShareGroupSettings(
            session_timeout_ms=configs.get_int(group_id, "share.session.timeout.ms"),
            heartbeat_interval_ms=configs.get_int(group_id, "share.heartbeat.interval.ms"),
            max_size=self.config.group_share_max_size,
        )

    def partition_counts(self) -> dict[str, int]:
        """Every client topic's partition count (what share groups are assigned from)."""
        return {
            name: len(topic.partitions)
            for name, topic in self.topics.topics.items()
            if not topic.internal
        }

    async def off_loop(self, work: Callable[..., T], *arguments: Any) -> T:
        """``work(*arguments)`` (an fsync, creating files) through the broker's
        :data:`OffLoop`: in a worker thread, so that the event loop serves everyone else
        meanwhile."""
        result: T = await self.run_off_loop(work, *arguments)
        return result

    async def run_flusher(self) -> None:
        """Every 100 ms, fsync the logs whose ``flush.ms`` has passed, off the event loop,
        and note the partitions a storage error took offline."""
        while True:
            await trio.sleep(FLUSH_CHECK_INTERVAL_S)
            await self.flush_due_logs()
            self.check_storage()

    async def flush_due_logs(self) -> None:
        """Prepare the due fsyncs and run them off the loop. A log whose files cannot be
        duplicated because the process is out of descriptors waits for its next turn
        (its recovery point stays where it is); the broker is not stopped for it."""
        jobs = []
        for partition in list(self.topics.partitions()):
            partition_log = partition.log
            partition_log.background_flush = True
            if partition_log.closed or partition_log.offline:
                continue
            try:
                job = partition_log.start_flush()
            except KafkaStorageError:
                continue  # offline now; check_storage reports it
            except OSError as exc:
                if exc.errno not in DESCRIPTOR_LIMIT_ERRNOS:
                    raise
                log.warning(
                    "putting off the flush of %s-%d: %s (the process's open-file limit)",
                    partition.topic,
                    partition.index,
                    exc.strerror,
                )
                continue
            if job is not None:
                jobs.append((partition_log, job))
        if not jobs:
            return
        errors = await self.off_loop(run_flush_jobs, [job for _, job in jobs])
        for (partition_log, job), error in zip(jobs, errors, strict=True):
            partition_log.finish_flush(job, error)  # a failed fsync: offline, never retried

    def check_storage(self) -> None:
        """Report each partition a storage error has taken offline, once: logged, and
        ``storage_failed`` set (a cluster member then moves its leaderships away)."""
        for partition in self.topics.partitions():
            key = (partition.topic, partition.index)
            if partition.offline and key not in self.offline_partitions:
                self.offline_partitions.add(key)
                log.error(
                    "%s-%d is offline until restart (KAFKA_STORAGE_ERROR): %s",
                    partition.topic,
                    partition.index,
                    partition.log.failure,
                )
                self.storage_failed.set()

    async def run_background(self) -> None:
        """Delete expired files every second; run retention every
        ``log.retention.check.interval.ms`` and look for logs to compact every
        ``log.cleaner.backoff.ms``, each on its own clock, as Kafka's log manager and
        log cleaner do."""
        retention_interval_s = self.config.log_retention_check_interval_ms / 1000
        compaction_interval_s = self.config.log_cleaner_backoff_ms / 1000
        next_retention = trio.current_time() + retention_interval_s
        next_compaction = trio.current_time() + compaction_interval_s
        next_expiry = trio.current_time() + PRODUCER_EXPIRY_INTERVAL_S
        while True:
            await trio.sleep(min(FLUSH_INTERVAL_S, compaction_interval_s))
            for partition in list(self.topics.partitions()):
                partition.log.delete_expired_files()
            now = trio.current_time()
            retention, compaction = now >= next_retention, now >= next_compaction
            if retention:
                next_retention = now + retention_interval_s
            if compaction:
                next_compaction = now + compaction_interval_s
            if retention or compaction:
                await self.clean_logs(retention=retention, compaction=compaction)
            if now >= next_expiry:
                next_expiry = now + PRODUCER_EXPIRY_INTERVAL_S
                now_ms = self.clock_ms()
                for partition in self.topics.partitions():
                    partition.producers.expire(now_ms, self.config.producer_id_expiration_ms)

    async def clean_logs(self, *, retention: bool = True, compaction: bool = True) -> None:
        """One retention pass, compaction pass or both over every partition, below the high
        watermark."""
        for partition in list(self.topics.partitions()):
            await trio.lowlevel.checkpoint()
            log_ = partition.log
            if log_.offline:
                continue
            try:
                if log_.closed:
                    continue
                if retention:
                    bound = partition.high_watermark
                    self.cleaner.apply_retention(log_, upper_bound_offset=bound)
                if compaction:
                    await self.compact_log(partition)
            except CleaningAbortedError:
                log.info("cleaning %s-%d stopped", partition.topic, partition.index)
            except (OSError, KafkaStorageError) as exc:
                log_.take_offline(exc)  # the cleaner's own writes failed: the disk did
            except Exception:
                log.exception("cleaning %s-%d failed", partition.topic, partition.index)

    async def compact_log(self, partition: Partition) -> None:
        """One compaction pass of ``partition`` if it needs one. The reading, the offset
        map and the writing of cleaned segments run in a worker thread (they can take
        seconds), while this loop serves requests and appends; the swap of the cleaned
        segments into the log runs back here, the only thread that changes the log's
        segments, one group at a time with requests served in between. Cancelling the
        wait stops the worker at its next batch."""
        async with self.log_rewrites:  # an erasure never runs between read and install
            log_ = partition.log
            job = self.cleaner.prepare_compaction(
                log_, upper_bound_offset=partition.high_watermark, only_if_needed=True
            )
            if job is not None:
                await self._run_compaction(log_, job)

    async def _run_compaction(self, log_: PartitionLog, job: CompactionJob) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_abort_when_cancelled, job.abort)
            try:
                await self.off_loop(self.cleaner.run_compaction, job)
            except CleaningAbortedError:
                await trio.lowlevel.checkpoint()  # the cancellation that set abort
                raise
            finally:
                nursery.cancel_scope.cancel()
        while self.cleaner.install_next_group(log_, job):
            await trio.lowlevel.checkpoint()
        self.cleaner.conclude(log_, job)

    def close(self) -> None:
        """Close every log cleanly and leave the broker's clean-shutdown marker."""
        self.topics.close()
        try:
            write_atomically(self.config.data_dir / CLEAN_SHUTDOWN_FILE, b"")
        except OSError as exc:  # a full or failing disk: the next start is an unclean one
            log.error("broker %d: cannot mark the shutdown clean: %s", self.node_id, exc)
            return
        log.info("broker %d shut down cleanly", self.node_id)


async def _abort_when_cancelled(abort: threading.Event) -> None:
    """Set ``abort`` when this task is cancelled: a worker thread cannot be cancelled,
    but it checks the event between batches."""
    try:
        await trio.sleep_forever()
    finally:
        abort.set()


def _load_cluster_id(data_dir: Path, config: BrokerConfig) -> str:
    path = data_dir / META_FILE
    properties: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, separator, value = line.partition("=")
            if separator:
                properties[key.strip()] = value.strip()
    cluster_id = properties.get("cluster.id") or config.cluster_id
    if not cluster_id and config.clustered:
        # every member must report the same id: derive it from what they share
        voters = format_voters(config.controller_quorum_voters).encode()
        cluster_id = urlsafe_b64encode(hashlib.sha256(voters).digest()[:16]).decode().rstrip("=")
    if not cluster_id:
        cluster_id = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if properties.get("cluster.id") != cluster_id:
        text = f"version=1\ncluster.id={cluster_id}\nnode.id={config.node_id}\n"
        write_atomically(path, text.encode())
    return cluster_id
