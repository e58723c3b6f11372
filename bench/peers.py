"""The systems the suite compares: their servers, streams and facts for the report.

Each system is a server (started here in a scratch folder, or the machine's
own for RabbitMQ) with four client workers in :mod:`clients`, each run in its
own ``spawn`` process: ``produce`` and ``consume`` for throughput,
``latency_produce`` and ``latency_consume`` for end-to-end latency.

Every system stores the same thing: N independent ordered logs ("streams"),
one per producer process, each a one-partition topic, a Redis stream key, a
JetStream stream or a RabbitMQ stream. Producer process i appends to stream
i and consumer process i reads stream i from its start.

The workers take plain, picklable arguments: an ``endpoint`` dict (host,
port and the few settings the system's client needs), the stream name, and
the sizes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import Deadline

STEP_TIMEOUT_S = 300.0
LOG_TAIL_BYTES = 4_000
START_TIMEOUT_S = 60.0
LATENCY_WARMUP_S = 1.0
STOP = b"stop"
PRIME = b"prime"
PRIME_INTERVAL_S = 0.02
HOST = "127.0.0.1"
REDIS_PIPELINE = 1_000
"""XADD commands per pipeline round trip."""
REDIS_READ_COUNT = 5_000
NATS_PENDING_MAX = 4_000
"""Async publishes in flight per NATS producer (nats-py's default window)."""
NATS_FETCH = 5_000
RABBIT_BATCH = 1_000
RABBIT_UNCONFIRMED_MAX = 50_000
KAFKA_FLUSH_MS = 1_000
"""Our broker fsyncs each partition every second, as Redis's appendfsync everysec does."""
KAFKA_QUEUED_MESSAGES_MIN = 1_000_000
"""Records librdkafka prefetches per partition before it pauses fetching (default 100,000)."""
KAFKA_FETCH_QUEUE_BACKOFF_MS = 10
"""How long that pause lasts (default 1,000 ms)."""


# ---------------------------------------------------------------- process facts


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of the processes so far (children reaped included)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def resident_bytes(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes] | None, what: str) -> None:
    import socket

    deadline = Deadline(START_TIMEOUT_S)
    while not deadline.passed():
        if process is not None and process.poll() is not None:
            raise SystemExit(f"{what} exited with {process.returncode} while starting")
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not listen on {HOST}:{port} within {START_TIMEOUT_S:.0f} s")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(60)


# ---------------------------------------------------------------- systems


@dataclass
class System:
    """A server under test: how to start it, its streams, and facts for the report."""

    name: str
    label: str
    durability: str
    client: str
    endpoint: dict[str, Any] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def start(self, scratch: Path) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        for process in self.processes:
            stop_process(process)

    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def exited(self) -> list[str]:
        """Each of this system's server processes that has ended, with its exit code and
        the end of its log: why a step that failed may have failed."""
        found = []
        for process in self.processes:
            if process.poll() is not None:
                found.append(f"{self.label}: server {process.pid} exited with {process.returncode}")
        if found:
            for path in self.logs:
                if path.exists():
                    tail = path.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace")
                    found.append(f"the end of {path}:\n{tail}")
        return found

    def create(self, streams: Sequence[str]) -> None:
        raise NotImplementedError

    def delete(self, streams: Sequence[str]) -> None:
        raise NotImplementedError

    def version(self) -> str:
        return ""


class OurBroker(System):
    """``platform serve``: one broker (RF=1, acks=1) or a 3-node cluster (RF=3, acks=all)."""

    def __init__(self, nodes: int) -> None:
        replicated = nodes > 1
        super().__init__(
            name="eventplatform-rf3" if replicated else "eventplatform",
            label=(
                "eventplatform, 3 nodes, RF=3, acks=all"
                if replicated
                else "eventplatform, 1 node, RF=1, acks=1"
            ),
            durability=(
                f"page cache, fsync every {KAFKA_FLUSH_MS} ms (flush.ms); acknowledged once "
                "2 of 3 replicas have it (min.insync.replicas=2)"
                if replicated
                else f"page cache, fsync every {KAFKA_FLUSH_MS} ms (flush.ms); acknowledged "
                "once in the leader's page cache"
            ),
            client=(
                "confluent-kafka (librdkafka): linger.ms=5, batch.size=1 MB, no compression; "
                f"consumer fetches of up to 64 MB, queued.min.messages="
                f"{KAFKA_QUEUED_MESSAGES_MIN:,}, fetch.queue.backoff.ms="
                f"{KAFKA_FETCH_QUEUE_BACKOFF_MS}, its topic's metadata fetched before the step "
                "starts"
            ),
        )
        self.nodes = nodes
        self.cluster: Any = None

    def start(self, scratch: Path) -> None:
        settings = [f"log.flush.interval.ms={KAFKA_FLUSH_MS}", "group.initial.rebalance.delay.ms=0"]
        if self.nodes == 1:
            port = free_port()
            command = [
                str(Path(sys.executable).with_name("platform")),
                "serve",
                "--data-dir",
                str(scratch / self.name),
                "--listen",
                f"{HOST}:{port}",
            ]
            for setting in settings:
                command += ["--override", setting]
            self.logs = [scratch / f"{self.name}.log"]
            log = self.logs[0].open("wb")
            self.processes = [subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)]
            wait_for_port(port, self.processes[0], self.label)
            self.endpoint = {"bootstrap": f"{HOST}:{port}", "acks": 1}
            return
        from eventplatform.testing import LocalCluster
        from eventplatform.tools.cluster_status import wait_healthy

        self.cluster = LocalCluster.create(scratch / self.name, self.nodes, settings)
        self.cluster.start()
        if not wait_healthy(self.cluster, START_TIMEOUT_S):
            raise SystemExit("the 3-node cluster did not become healthy")
        self.processes = [node.process for node in self.cluster.nodes.values()]
        self.logs = [self.cluster.log_path(node_id) for node_id in self.cluster.nodes]
        self.endpoint = {"bootstrap": self.cluster.bootstrap, "acks": -1}

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        else:
            super().stop()

    def create(self, streams: Sequence[str]) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.endpoint["bootstrap"]})
        configs = {"min.insync.replicas": "2"} if self.nodes > 1 else {}
        replication = min(3, self.nodes)
        topics = [NewTopic(name, 1, replication, config=configs) for name in streams]
        for future in admin.create_topics(topics, operation_timeout=30).values():
            future.result(timeout=60)

    def delete(self, streams: Sequence[str]) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.endpoint["bootstrap"]})
        for future in admin.delete_topics(list(streams), operation_timeout=30).values():
            future.result(timeout=60)

    def version(self) -> str:
        import confluent_kafka

        client, library = confluent_kafka.version()[0], confluent_kafka.libversion()[0]
        return f"confluent-kafka {client}, librdkafka {library}"


class RedisStreams(System):
    """A redis-server of its own, with the append-only file on and fsynced every second."""

    def __init__(self) -> None:
        super().__init__(
            name="redis",
            label="Redis Streams",
            durability="append-only file, appendfsync everysec; acknowledged once in memory",
            client=(
                f"redis-py with hiredis: XADD in pipelines of {REDIS_PIPELINE}; XREADGROUP "
                f"COUNT {REDIS_READ_COUNT} with NOACK"
            ),
        )

    def start(self, scratch: Path) -> None:
        folder = scratch / "redis"
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        command = [
            "redis-server",
            "--bind", HOST,
            "--port", str(port),
            "--dir", str(folder),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--logfile", str(folder / "redis.log"),
        ]  # fmt: skip
        self.logs = [folder / "redis.log"]
        self.processes = [subprocess.Popen(command, stdout=subprocess.DEVNULL)]
        wait_for_port(port, self.processes[0], self.label)
        self.endpoint = {"host": HOST, "port": port}

    def _client(self) -> Any:
        import redis

        return redis.Redis(host=HOST, port=self.endpoint["port"])

    def create(self, streams: Sequence[str]) -> None:
        client = self._client()
        for name in streams:
            client.xgroup_create(name, "bench", id="0", mkstream=True)

    def delete(self, streams: Sequence[str]) -> None:
        self._client().delete(*streams)

    def version(self) -> str:
        import redis

        server = self._client().info("server")["redis_version"]
        return f"redis-server {server}, redis-py {redis.__version__}"


class NatsJetStream(System):
    """A nats-server of its own with JetStream on file storage."""

    def __init__(self) -> None:
        super().__init__(
            name="nats",
            label="NATS JetStream",
            durability=(
                "file storage; acknowledged once written to the page cache, fsynced every "
                "2 minutes (the server's default sync interval)"
            ),
            client=(
                f"nats-py: async publish with up to {NATS_PENDING_MAX} acknowledgements "
                f"pending; pull consumer (AckNone), two pulls of {NATS_FETCH} outstanding"
            ),
        )

    def start(self, scratch: Path) -> None:
        folder = scratch / "nats"
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        command = ["nats-server", "-a", HOST, "-p", str(port), "-js", "-sd", str(folder)]
        self.logs = [scratch / "nats.log"]
        log = self.logs[0].open("wb")
        self.processes = [subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)]
        wait_for_port(port, self.processes[0], self.label)
        self.endpoint = {"url": f"nats://{HOST}:{port}"}

    def _run(self, work: Callable[[Any], Any]) -> Any:
        import nats

        async def session() -> Any:
            connection = await nats.connect(self.endpoint["url"])
            try:
                return await work(connection.jetstream())
            finally:
                await connection.close()

        return asyncio.run(session())

    def create(self, streams: Sequence[str]) -> None:
        from nats.js.api import StorageType

        async def work(js: Any) -> None:
            for name in streams:
                await js.add_stream(name=name, subjects=[name], storage=StorageType.FILE)

        self._run(work)

    def delete(self, streams: Sequence[str]) -> None:
        async def work(js: Any) -> None:
            for name in streams:
                await js.delete_stream(name)

        self._run(work)

    def version(self) -> str:
        import importlib.metadata

        server = subprocess.run(["nats-server", "--version"], capture_output=True, text=True)
        return f"{server.stdout.strip()}, nats-py {importlib.metadata.version('nats-py')}"


class RabbitStreams(System):
    """The machine's RabbitMQ, through its stream plugin's own protocol (port 5552)."""

    def __init__(self) -> None:
        super().__init__(
            name="rabbitmq",
            label="RabbitMQ Streams",
            durability=(
                "stream segments written to the page cache, no fsync of its own; "
                "acknowledged (publish confirm) once written"
            ),
            client=(
                f"rstream: send_batch of {RABBIT_BATCH} with publish confirms, at most "
                f"{RABBIT_UNCONFIRMED_MAX} unconfirmed; consumer from the first offset"
            ),
        )
        self.endpoint = {"host": HOST, "port": 5552}

    def start(self, scratch: Path) -> None:
        wait_for_port(self.endpoint["port"], None, "RabbitMQ's stream plugin")
        self.processes = []

    def stop(self) -> None:
        pass

    def pids(self) -> list[int]:
        found = subprocess.run(["pgrep", "-f", "beam.smp.*rabbit"], capture_output=True, text=True)
        return [int(pid) for pid in found.stdout.split()]

    def _run(self, work: Callable[[Any], Any]) -> Any:
        from rstream import Producer

        async def session() -> Any:
            async with Producer(
                HOST, self.endpoint["port"], username="guest", password="guest"
            ) as producer:
                return await work(producer)

        return asyncio.run(session())

    def create(self, streams: Sequence[str]) -> None:
        async def work(producer: Any) -> None:
            for name in streams:
                await producer.delete_stream(name, missing_ok=True)
                await producer.create_stream(name)

        self._run(work)

    def delete(self, streams: Sequence[str]) -> None:
        async def work(producer: Any) -> None:
            for name in streams:
                await producer.delete_stream(name, missing_ok=True)

        self._run(work)

    def version(self) -> str:
        import importlib.metadata

        server = subprocess.run(
            ["rabbitmqctl", "version"], capture_output=True, text=True, timeout=60
        ).stdout.strip()
        return f"rabbitmq-server {server}, rstream {importlib.metadata.version('rstream')}"


def all_systems() -> list[System]:
    return [OurBroker(1), OurBroker(3), RedisStreams(), NatsJetStream(), RabbitStreams()]


def rabbit_stream_available() -> str | None:
    """None when RabbitMQ's stream port answers; otherwise why not."""
    import socket

    try:
        with socket.create_connection((HOST, 5552), timeout=2):
            return None
    except OSError as exc:
        return (
            f"RabbitMQ's stream port {HOST}:5552 does not answer ({exc}); "
            "enable it with `rabbitmq-plugins enable rabbitmq_stream`"
        )
