"""The whole cluster in one ``trio.run``: real brokers and controllers, simulated network
and disk, a workload, faults, and a checker.

Each node is the real :class:`~eventplatform.log.broker.server.BrokerServer`
(broker and controller roles: quorum, controller, broker link, replica
fetchers, Kafka request handlers, storage) on a
:class:`~sim_network.Fabric` host, its data in a directory of its own on a
:class:`~sim_disk.FakeDisk`, its clock trio's. The caller's ``trio.run``
gives a ``MockClock(autojump_threshold=0)``, so a run's seconds are
simulated, and the run seeds trio's scheduler, the network, the disk and
the faults from one seed: a seed replays exactly.

Clients speak the Kafka protocol over the same fabric: idempotent
producers at acks=all (one batch in flight each, retried with the same
sequence until it is acknowledged, so lost answers become duplicate sends)
and one consumer per partition reading from the leader.

Faults, one at a time while the run is faulty: kill a node (its page cache
survives), cut a node's power (unflushed bytes are lost or torn; only while
every replica is in sync, see :mod:`sim_disk`), pause a node, partition the
network; connections also reset at random. Then everything heals, and the
run waits (bounded) for the producers to finish and the replicas to agree.

Odd seeds run the controllers with snapshots every few hundred bytes of
metadata records (:data:`SNAPSHOT_SETTINGS`), so their logs are truncated,
and voters and brokers that were away catch up from a snapshot or the whole
image; the checker then also holds every controller to the same image.

:class:`History` is what the checker (:meth:`ClusterSim.check`) holds it
to: no acknowledged record lost, no offset with two different records on
two replicas, no consumer read past the high watermark or of a record the
log later lost, offsets monotonic, at most one leader per leader epoch (and
per quorum epoch), and no record written twice by an idempotent producer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from crash_simulation import crash
from sim_disk import FakeDisk, fake_disk
from sim_network import Fabric

from eventplatform.log.broker.broker import run_inline
from eventplatform.log.broker.server import BrokerServer
from eventplatform.log.cluster.peer import PeerConnection, PeerError
from eventplatform.log.config import BrokerConfig
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.protocol.apis import FETCH, INIT_PRODUCER_ID, METADATA, PRODUCE
from eventplatform.log.replica.partition import Partition
from eventplatform.log.storage.files import CLEAN_SHUTDOWN_FILE
from eventplatform.log.storage.record_batch import Record, decode_record_set, encode_batch

BROKER_PORT = 9092
QUORUM_PORT = 9093
TOPIC = "sim"
EPOCH_MS = 1_800_000_000_000
MONITOR_INTERVAL_S = 0.005
REQUEST_TIMEOUT_S = 5.0
PRODUCE_PAUSE_S = 0.04
SETTINGS = {
    "broker.session.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "200",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "200",
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "offsets.topic.replication.factor": "3",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "log.segment.bytes": "4096",
    "auto.create.topics.enable": "false",
}
SNAPSHOT_SETTINGS = {
    "metadata.log.max.record.bytes.between.snapshots": "400",
    "metadata.log.segment.bytes": "1024",
}
RETRIABLE = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.KAFKA_STORAGE_ERROR,  # a replica's disk failed: Kafka's clients retry elsewhere
}
LOST_PRODUCER = {
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ErrorCode.UNKNOWN_PRODUCER_ID,
    ErrorCode.INVALID_PRODUCER_EPOCH,
}


class SimulationError(AssertionError):
    """A property broke; the message names the seed and what broke."""


@dataclass
class Acked:
    value: bytes
    partition: int
    offset: int | None  # None: acknowledged as a duplicate, offset not told


@dataclass
class History:
    seed: int
    acked: dict[bytes, Acked] = field(default_factory=dict)
    reads: dict[int, dict[int, bytes]] = field(default_factory=dict)
    leaders: dict[tuple[str, int, int], int] = field(default_factory=dict)
    quorum_leaders: dict[int, int] = field(default_factory=dict)
    faults: list[tuple[float, str]] = field(default_factory=list)
    snapshots: int = 0
    """Controllers that hold a snapshot at the end of the run."""
    producer_resets: int = 0
    may_repeat: set[bytes] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    final: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)

    def violation(self, message: str) -> None:
        self.violations.append(f"seed {self.seed}: {message}")

    def outcome(self) -> tuple[Any, ...]:
        """What a replay of the seed must reproduce exactly."""
        return (
            sorted((a.value, a.partition, a.offset) for a in self.acked.values()),
            self.faults,
            sorted(self.leaders.items()),
            self.final,
        )


@dataclass
class SimNode:
    node_id: int
    data_dir: Path
    server: BrokerServer | None = None
    scope: trio.CancelScope | None = None
    stopped: trio.Event = field(default_factory=trio.Event)
    killed: bool = False

    @property
    def host(self) -> str:
        return f"node-{self.node_id}"

    @property
    def up(self) -> bool:
        return self.server is not None and self.server.broker is not None and not self.killed


class ClusterSim:
    """See the module docstring."""

    def __init__(
        self,
        seed: int,
        root: Path,
        *,
        nodes: int = 3,
        partitions: int = 2,
        topic_configs: dict[str, str] | None = None,
        replication_factor: int = 3,
        snapshots: bool = False,
    ) -> None:
        self.seed = seed
        self.random = random.Random(seed)
        self.fabric = Fabric(random.Random(seed * 7919 + 1))
        self.disk = FakeDisk(random.Random(seed * 7919 + 2))
        self.history = History(seed)
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.topic_configs = topic_configs or {}
        self.nodes = {n: SimNode(n, root / f"node-{n}") for n in range(1, nodes + 1)}
        voters = ",".join(f"{n}@node-{n}:{QUORUM_PORT}" for n in self.nodes)
        self._configs = {
            n: dataclasses.replace(
                BrokerConfig.from_properties(
                    {
                        **SETTINGS,
                        **(SNAPSHOT_SETTINGS if snapshots else {}),
                        "node.id": n,
                        "process.roles": "broker,controller",
                        "controller.quorum.voters": voters,
                    }
                ),
                data_dir=node.data_dir,
                listen_host=node.host,
                listen_port=BROKER_PORT,
            )
            for n, node in self.nodes.items()
        }
        self._nursery: trio.Nursery | None = None

    # ------------------------------------------------------------ nodes

    def clock_ms(self) -> int:
        return EPOCH_MS + int(trio.current_time() * 1000)

    async def start(self, node_id: int) -> None:
        node = self.nodes[node_id]
        assert self._nursery is not None and node.server is None
        server = BrokerServer(
            self._configs[node_id],
            network=self.fabric.host(node.host),
            clock_ms=self.clock_ms,
            off_loop=run_inline,
        )
        node.server, node.scope, node.killed = server, trio.CancelScope(), False
        node.stopped = trio.Event()
        scope, stopped = node.scope, node.stopped

        async def run() -> None:
            try:
                with scope:
                    await server.run()
            except BaseException as exc:
                if not node.killed and server is node.server:
                    node.killed = True  # what is left of it is no replica to check
                    self.history.violation(f"node {node_id} failed: {exc!r}")
                    logging.getLogger(__name__).exception("node %d failed", node_id)
            finally:
                stopped.set()

        self._nursery.start_soon(run)
        await trio.lowlevel.checkpoint()

    async def kill(self, node_id: int, *, power: bool = False) -> None:
        """SIGKILL (page cache kept) or a power cut (unflushed bytes lost) of a node."""
        node = self.nodes[node_id]
        server = node.server
        if server is None or node.killed:
            return
        node.killed = True
        if server.broker is not None:
            for partition in server.broker.topics.partitions():
                if not partition.log._closed:
                    crash(partition.log)
        if server.controller is not None and not server.controller.storage.log._closed:
            crash(server.controller.storage.log)
        self.fabric.crash(node.host)
        assert node.scope is not None
        node.scope.cancel()
        await node.stopped.wait()
        (node.data_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        if power:
            self.disk.lose_power(node.data_dir)
        node.server = None

    def brokers(self) -> list[SimNode]:
        return [node for node in self.nodes.values() if node.up]

    def partition_replicas(self, index: int) -> list[tuple[SimNode, Partition]]:
        found = []
        for node in self.brokers():
            assert node.server is not None and node.server.broker is not None
            topic = node.server.broker.topics.get(TOPIC)
            if topic is not None and index < len(topic.partitions):
                partition = topic.partitions[index]
                if partition is not None and node.node_id in partition.replica_set:
                    found.append((node, partition))
        return found

    def in_sync(self) -> bool:
        """Every node up and every partition's ISR whole, as its leader sees it."""
        if len(self.brokers()) != len(self.nodes):
            return False
        for index in range(self.partitions):
            leaders = [p for _, p in self.partition_replicas(index) if p.is_leader]
            if len(leaders) != 1 or leaders[0].replicas is None:
                return False
            replicas = leaders[0].replicas
            if set(replicas.isr) != set(leaders[0].replica_set) or replicas.pending:
                return False
        return True

    # ------------------------------------------------------------ monitor

    async def monitor(self) -> None:
        history = self.history
        while True:
            for node in self.brokers():
                server = node.server
                assert server is not None
                if server.broker is not None:
                    for partition in server.broker.topics.partitions():
                        if partition.clustered and partition.is_leader:
                            key = (partition.topic, partition.index, partition.leader_epoch)
                            known = history.leaders.setdefault(key, node.node_id)
                            if known != node.node_id:
                                history.violation(
                                    f"brokers {known} and {node.node_id} lead {key[0]}-{key[1]}"
                                    f" in epoch {key[2]}"
                                )
                if server.controller is not None and server.controller.quorum.is_leader:
                    raft = server.controller.quorum.raft
                    known = history.quorum_leaders.setdefault(raft.epoch, node.node_id)
                    if known != node.node_id:
                        history.violation(
                            f"voters {known} and {node.node_id} lead quorum epoch {raft.epoch}"
                        )
            await trio.sleep(MONITOR_INTERVAL_S)

    # ------------------------------------------------------------ clients

    def _connection(self, client: str, node_id: int) -> PeerConnection:
        return PeerConnection(
            f"node-{node_id}", BROKER_PORT, client, network=self.fabric.host(client)
        )

    async def request(
        self, client: str, node_id: int, api: Any, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        connection = self._connection(client, node_id)
        try:
            return await connection.request(api, version, body, timeout_s=REQUEST_TIMEOUT_S)
        finally:
            await connection.aclose()

    async def leaders(self, client: str) -> dict[int, int]:
        """partition → leader id, from a Metadata request to some node; {} when none answers."""
        for node_id in self.random.sample(sorted(self.nodes), len(self.nodes)):
            body = {
                "topics": [{"name": TOPIC}],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            }
            try:
                response = await self.request(client, node_id, METADATA, 8, body)
            except PeerError:
                continue
            for topic in response["topics"]:
                if topic["name"] == TOPIC and topic["error_code"] == ErrorCode.NONE:
                    return {
                        p["partition_index"]: p["leader_id"]
                        for p in topic["partitions"]
                        if p["leader_id"] >= 0
                    }
        return {}

    async def create_topic(self) -> None:
        with trio.fail_after(60):
            while True:
                for node in self.brokers():
                    assert node.server is not None and node.server.broker is not None
                    try:
                        await node.server.broker.create_topic(
                            TOPIC,
                            self.partitions,
                            self.replication_factor,
                            dict(self.topic_configs),
                        )
                        return
                    except Exception as exc:
                        if "exists" in str(exc).lower():
                            return
                await trio.sleep(0.2)

    async def producer(self, number: int, stop: trio.Event) -> None:
        client = f"producer-{number}"
        producer_id, epoch = await self._init_producer(client)
        sequences = dict.fromkeys(range(self.partitions), 0)
        count = 0
        leaders: dict[int, int] = {}
        while not stop.is_set():
            partition = count % self.partitions
            values = [f"p{number}-{count}-{i}".encode() for i in range(self.random.randint(1, 3))]
            count += 1
            while True:  # until acknowledged: the same batch, the same sequence
                leader = leaders.get(partition)
                if leader is None:
                    leaders = await self.leaders(client)
                    if partition not in leaders:
                        await trio.sleep(0.05)
                    continue
                batch = encode_batch(
                    [Record(i, self.clock_ms(), None, v) for i, v in enumerate(values)],
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    base_sequence=sequences[partition],
                )
                body = {
                    "transactional_id": None,
                    "acks": -1,
                    "timeout_ms": 2000,
                    "topic_data": [
                        {"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}
                    ],
                }
                try:
                    response = await self.request(client, leader, PRODUCE, 8, body)
                except PeerError:
                    leaders = {}
                    continue
                answer = response["responses"][0]["partition_responses"][0]
                error = answer["error_code"]
                if error == ErrorCode.NONE:
                    for i, value in enumerate(values):
                        self._acked(value, partition, answer["base_offset"] + i)
                    break
                if error == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                    for value in values:
                        self._acked(value, partition, None)
                    break
                if error in LOST_PRODUCER:
                    # the producer's state is gone: start over as a new producer; what the
                    # old one wrote may now be written again (Kafka's clients do the same)
                    self.history.producer_resets += 1
                    self.history.may_repeat.update(values)
                    producer_id, epoch = await self._init_producer(client)
                    sequences = dict.fromkeys(range(self.partitions), 0)
                    continue
                if error not in RETRIABLE:
                    self.history.violation(f"{client}: produce answered {ErrorCode(error).name}")
                    return
                leaders = {}
                await trio.sleep(0.02)
            sequences[partition] += len(values)
            await trio.sleep(self.random.uniform(0.0, PRODUCE_PAUSE_S))

    def _acked(self, value: bytes, partition: int, offset: int | None) -> None:
        known = self.history.acked.get(value)
        if known is not None and known.offset is not None and offset not in (None, known.offset):
            self.history.violation(
                f"{value!r} acknowledged at {partition}/{offset} and {partition}/{known.offset}"
            )
        if known is None or known.offset is None:
            self.history.acked[value] = Acked(value, partition, offset)

    async def _init_producer(self, client: str) -> tuple[int, int]:
        while True:
            for node in self.random.sample(sorted(self.nodes), len(self.nodes)):
                body = {
                    "transactional_id": None,
                    "transaction_timeout_ms": 60_000,
                }
                try:
                    answer = await self.request(client, node, INIT_PRODUCER_ID, 1, body)
                except PeerError:
                    continue
                if answer["error_code"] == ErrorCode.NONE:
                    return answer["producer_id"], answer["producer_epoch"]
            await trio.sleep(0.1)

    async def consumer(self, partition: int) -> None:
        """Reads ``partition`` from the leader, below the high watermark, forever."""
        client = f"consumer-{partition}"
        reads = self.history.reads.setdefault(partition, {})
        position = 0
        leader: int | None = None
        while True:
            if leader is None:
                leader = (await self.leaders(client)).get(partition)
                if leader is None:
                    await trio.sleep(0.05)
                    continue
            body = {
                "replica_id": -1,
                "max_wait_ms": 200,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": TOPIC,
                        "partitions": [
                            {
                                "partition": partition,
                                "current_leader_epoch": -1,
                                "fetch_offset": position,
                                "log_start_offset": -1,
                                "partition_max_bytes": 1 << 20,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            }
            try:
                response = await self.request(client, leader, FETCH, 11, body)
            except PeerError:
                leader = None
                continue
            answer = response["responses"][0]["partitions"][0]
            if answer["error_code"] != ErrorCode.NONE:
                leader = None
                await trio.sleep(0.02)
                continue
            high_watermark = answer["high_watermark"]
            for batch in decode_record_set(answer["records"] or b""):
                for record in batch.records:
                    if record.offset < position:
                        continue  # a batch that starts before the position
                    if record.offset >= high_watermark:
                        self.history.violation(
                            f"consumer of {partition} read offset {record.offset} at or past "
                            f"the high watermark {high_watermark}"
                        )
                    if record.offset in reads and reads[record.offset] != record.value:
                        self.history.violation(
                            f"partition {partition} offset {record.offset} read as "
                            f"{reads[record.offset]!r} and later {record.value!r}"
                        )
                    reads[record.offset] = record.value or b""
                    position = record.offset + 1

    # ------------------------------------------------------------ faults

    async def faults(self, until: float) -> None:
        everyone = (
            {node.host for node in self.nodes.values()}
            | {f"producer-{n}" for n in range(2)}
            | {f"consumer-{p}" for p in range(self.partitions)}
        )
        while trio.current_time() < until:
            delay = self.random.expovariate(1 / 1.5)
            if not self.history.faults:  # every run has at least one fault
                delay = min(delay, max(0.0, until - trio.current_time() - 0.5))
            await trio.sleep(delay)
            if trio.current_time() >= until:
                return
            node_id = self.random.choice(sorted(self.nodes))
            kind = self.random.choice(["kill", "kill", "power", "pause", "partition", "partition"])
            if kind == "power" and not self.in_sync():
                kind = "kill"
            self.history.faults.append((round(trio.current_time(), 6), f"{kind} {node_id}"))
            if kind in ("kill", "power"):
                await self.kill(node_id, power=kind == "power")
                await trio.sleep(self.random.uniform(0.2, 3.0))
                await self.start(node_id)
            elif kind == "pause":
                self.fabric.pause(f"node-{node_id}")
                await trio.sleep(self.random.uniform(0.2, 4.0))
                self.fabric.resume(f"node-{node_id}")
            else:
                side = set(self.random.sample(sorted(everyone), self.random.randint(1, 3)))
                self.fabric.partition(side, everyone)
                await trio.sleep(self.random.uniform(0.2, 4.0))
                self.fabric.heal()

    # ------------------------------------------------------------ the run

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[trio.Nursery]:
        with fake_disk(self.disk):
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for node_id in self.nodes:
                    await self.start(node_id)
                nursery.start_soon(self.monitor)
                try:
                    yield nursery
                finally:
                    for node_id in self.nodes:
                        await self.kill(node_id)
                    nursery.cancel_scope.cancel()

    async def settle(self, timeout_s: float) -> None:
        """Wait until every replica holds the same log and every consumer has read it."""
        with trio.move_on_after(timeout_s):
            while not self._settled():
                await trio.sleep(0.05)
            return
        self.history.violation(f"replicas did not converge within {timeout_s} s of healing")

    def _settled(self) -> bool:
        if not self.in_sync():
            return False
        for index in range(self.partitions):
            replicas = [p for _, p in self.partition_replicas(index)]
            ends = {p.log.log_end_offset for p in replicas}
            leader = next(p for p in replicas if p.is_leader)
            if len(ends) != 1 or leader.high_watermark != leader.log.log_end_offset:
                return False
            reads = self.history.reads.get(index)  # None: no consumer in this run
            if reads is not None and max(reads, default=-1) < leader.high_watermark - 1:
                return False
        return True

    def check(self) -> None:
        """Hold the history to the properties in the module docstring."""
        history = self.history
        for index in range(self.partitions):
            logs = []
            for node, partition in self.partition_replicas(index):
                records = [
                    (record.offset, record.value or b"")
                    for batch in partition.log.iter_batches()
                    for record in batch.records
                ]
                offsets = [offset for offset, _ in records]
                if offsets != sorted(set(offsets)):
                    history.violation(f"node {node.node_id} partition {index}: offsets go back")
                logs.append((node.node_id, dict(records)))
            reference_node, reference = logs[0]
            for node_id, other in logs[1:]:
                for offset in reference.keys() & other.keys():
                    if reference[offset] != other[offset]:
                        history.violation(
                            f"partition {index} offset {offset} holds {reference[offset]!r} on "
                            f"node {reference_node} and {other[offset]!r} on node {node_id}"
                        )
            history.final[index] = sorted(reference.items())
            for offset, value in history.reads.get(index, {}).items():
                if reference.get(offset) != value:
                    history.violation(
                        f"partition {index} offset {offset} was read as {value!r}; the log now "
                        f"holds {reference.get(offset)!r}"
                    )
        self._check_controllers()
        where: dict[bytes, list[tuple[int, int]]] = {}
        for index, records in history.final.items():
            for offset, value in records:
                where.setdefault(value, []).append((index, offset))
        for value, acked in history.acked.items():
            places = where.get(value, [])
            if not places:
                history.violation(
                    f"acknowledged {value!r} at {acked.partition}/{acked.offset} is lost"
                )
            elif acked.offset is not None and (acked.partition, acked.offset) not in places:
                history.violation(f"acknowledged {value!r} at {acked.offset}, found at {places}")
        for value, places in where.items():
            if len(places) > 1 and value not in history.may_repeat:
                history.violation(f"{value!r} written {len(places)} times: {places}")
        if history.violations:
            faults = ", ".join(f"{at:.3f} {what}" for at, what in history.faults)
            raise SimulationError(
                "\n".join([*history.violations[:20], f"faults: {faults}", *self.describe()])
            )

    def _check_controllers(self) -> None:
        """Controllers that applied the same offset hold the same image (one of them
        may have rebuilt it from a snapshot)."""
        images = {}
        for node in self.nodes.values():
            server = node.server
            if not node.up or server is None or server.controller is None:
                continue
            quorum = server.controller.quorum
            if quorum.node is not None and quorum.raft.latest_snapshot is not None:
                self.history.snapshots += 1
            image = server.controller.controller.image
            known = images.setdefault(quorum.applied, (node.node_id, image))
            if known[1] != image:
                self.history.violation(
                    f"controllers {known[0]} and {node.node_id} applied {quorum.applied} "
                    f"entries into different images"
                )

    def describe(self) -> list[str]:
        lines = []
        for index in range(self.partitions):
            for node, p in self.partition_replicas(index):
                role = "leader" if p.is_leader else f"follower of {p.leader_id}"
                epochs = [(entry.epoch, entry.start_offset) for entry in p.epochs.entries]
                lines.append(
                    f"partition {index} node {node.node_id}: {role} epoch {p.leader_epoch}, "
                    f"log {p.log.log_start_offset}..{p.log.log_end_offset}, "
                    f"high watermark {p.high_watermark}, epochs {epochs}"
                )
        return lines


async def run_cluster(
    seed: int, root: Path, *, faulty_s: float = 12.0, recovery_s: float = 40.0
) -> History:
    """One seeded run (see the module); raises SimulationError when a property breaks."""
    seed_trio_scheduler(seed)
    sim = ClusterSim(seed, root, snapshots=seed % 2 == 1)
    try:
        async with sim.running() as nursery:
            await sim.create_topic()
            stop = trio.Event()
            async with trio.open_nursery() as clients:
                for partition in range(sim.partitions):
                    nursery.start_soon(sim.consumer, partition)
                for number in range(2):
                    clients.start_soon(sim.producer, number, stop)
                await sim.faults(trio.current_time() + faulty_s)
                sim.fabric.faulty = False
                sim.fabric.heal()
                for node_id, node in sim.nodes.items():
                    sim.fabric.resume(node.host)
                    if node.server is None:
                        await sim.start(node_id)
                stop.set()
                clients.cancel_scope.deadline = trio.current_time() + recovery_s
            if clients.cancel_scope.cancelled_caught:
                sim.history.violation(f"producers did not finish within {recovery_s} s of healing")
            await sim.settle(recovery_s)
            sim.check()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return sim.history


def seed_trio_scheduler(seed: int) -> None:
    """Trio shuffles each batch of runnable tasks with a module-level generator; in its
    deterministic mode it first sorts the batch by task creation, so the order in which
    tasks were woken (which can follow object addresses) does not matter."""
    run_module: Any = trio._core._run
    run_module._ALLOW_DETERMINISTIC_SCHEDULING = True
    generator = getattr(run_module, "_r", None)
    if isinstance(generator, random.Random):
        generator.seed(seed)
