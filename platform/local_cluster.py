"""A local cluster of ``platform serve`` processes, for development and tests.

:class:`LocalCluster` lays a cluster out under one directory::

    cluster.json        node ids, Kafka and quorum ports, settings (kept across restarts)
    node-<id>/          each node's data directory
    node-<id>.log       each node's output

By default every node runs both roles (``process.roles=broker,controller``),
so a 3-node cluster has a 3-voter quorum and 3 brokers; with
``controllers=K`` the quorum is K nodes of their own (ids after the
brokers') and the brokers are only brokers. Ports are chosen free
on the first start and then kept, so a node restarts where its peers
expect it. Each node is a separate process that a test can stop
(SIGTERM, a controlled shutdown), kill (SIGKILL), pause (SIGSTOP) and
resume (SIGCONT). Every wait is bounded.

A **secure** cluster (``secure=True``) is laid out as a production one would be, with
a development CA in ``certificates/`` (:mod:`eventplatform.dev_certificates`):

* each broker's INTERNAL listener (its Kafka port) is SSL with client certificates,
  and carries replication; the quorum ports (CONTROLLER) are mutual TLS too;
* each broker's CLIENT listener (a port of its own) is SASL_SSL with SCRAM;
* ACLs decide every request; the brokers (``User:CN=broker``) and the operator's
  ``admin`` certificate (``User:CN=admin``) are the super users.

The operator creates users and grants with the ``admin`` certificate on the INTERNAL
listener (:meth:`LocalCluster.admin_settings`); applications connect to CLIENT with
SCRAM (:meth:`LocalCluster.client_settings`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from eventplatform.dev_certificates import issue, make_authority

LAYOUT_FILE = "cluster.json"
PIDS_FILE = "pids.json"
"""The processes of a detached ``cluster up``, for ``cluster down`` and the next ``up``."""
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
HOST = "127.0.0.1"
SERVING = "serving on "
DEFAULT_SETTINGS = (
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=250",
    "replica.lag.time.max.ms=10000",
    "controller.quorum.election.timeout.ms=500",
    "controller.quorum.fetch.timeout.ms=1000",
)
"""Faster failure detection than Kafka's defaults (9 s sessions): a laptop cluster."""
CERTIFICATES_DIRECTORY = "certificates"
BROKER_PRINCIPAL = "User:CN=broker"
ADMIN_PRINCIPAL = "User:CN=admin"


class LocalClusterError(Exception):
    """A node did not start or stop in time, or the layout is unreadable."""


@dataclass
class Node:
    node_id: int
    kafka_port: int
    quorum_port: int
    roles: str = "broker,controller"
    rack: str = ""
    """The node's ``broker.rack``; empty for none."""
    client_port: int = 0
    """The SASL_SSL listener's port of a secure cluster's broker; 0 for none."""
    metrics_port: int = 0
    """The port of the node's metrics endpoint (``--metrics-listen``); 0 for none."""
    process: subprocess.Popen[bytes] | None = None

    @property
    def broker(self) -> bool:
        return "broker" in self.roles

    @property
    def controller(self) -> bool:
        return "controller" in self.roles


@dataclass
class LocalCluster:
    """See the module docstring."""

    directory: Path
    nodes: dict[int, Node] = field(default_factory=dict)
    settings: list[str] = field(default_factory=list)
    secure: bool = False
    platform: Path = field(default_factory=lambda: Path(sys.executable).with_name("platform"))

    @classmethod
    def create(
        cls,
        directory: Path,
        brokers: int = 3,
        settings: Sequence[str] = (),
        controllers: int = 0,
        rack_prefix: str = "",
        *,
        secure: bool = False,
        metrics: bool = False,
    ) -> LocalCluster:
        """The cluster laid out in ``directory``: read back, or new with free ports. With a
        ``rack_prefix``, broker N is in rack ``<rack_prefix>N``, each in a rack of its own.
        With ``metrics``, each node serves its metrics endpoint on a port of its own
        (chosen free when first asked for, then kept)."""
        directory.mkdir(parents=True, exist_ok=True)
        layout = directory / LAYOUT_FILE
        if layout.exists():
            cluster = cls.load(directory)
            if len(cluster.broker_ids) != brokers:
                held = len(cluster.broker_ids)
                raise LocalClusterError(
                    f"{directory} holds a cluster of {held} brokers, not {brokers}"
                )
            if metrics:
                cluster.serve_metrics()
            return cluster
        total = brokers + controllers
        ports = free_ports(3 * total)
        broker_roles = "broker" if controllers else "broker,controller"
        roles = dict.fromkeys(range(1, brokers + 1), broker_roles)
        roles.update(dict.fromkeys(range(brokers + 1, total + 1), "controller"))
        nodes = {
            n: Node(n, ports[2 * (n - 1)], ports[2 * (n - 1) + 1], roles[n])
            for n in range(1, total + 1)
        }
        if rack_prefix:
            for n in range(1, brokers + 1):
                nodes[n].rack = f"{rack_prefix}{n}"
        if secure:
            for n in range(1, brokers + 1):
                nodes[n].client_port = ports[2 * total + n - 1]
            _make_certificates(directory / CERTIFICATES_DIRECTORY)
        cluster = cls(directory, nodes, [*DEFAULT_SETTINGS, *settings], secure)
        if metrics:
            cluster.serve_metrics()
        cluster.save()
        return cluster

    def serve_metrics(self) -> None:
        """Give every node without one a free port for its metrics endpoint, and save."""
        missing = [node for node in self.nodes.values() if not node.metrics_port]
        taken = {
            port
            for node in self.nodes.values()
            for port in (node.kafka_port, node.quorum_port, node.client_port, node.metrics_port)
        }
        ports = [port for port in free_ports(2 * len(missing)) if port not in taken]
        for node, port in zip(missing, ports, strict=False):
            node.metrics_port = port
        if missing:
            self.save()

    @classmethod
    def load(cls, directory: Path) -> LocalCluster:
        try:
            document = orjson.loads((directory / LAYOUT_FILE).read_bytes())
            nodes = {
                int(entry["id"]): Node(
                    int(entry["id"]),
                    int(entry["kafka"]),
                    int(entry["quorum"]),
                    str(entry.get("roles", "broker,controller")),
                    str(entry.get("rack", "")),
                    int(entry.get("client", 0)),
                    int(entry.get("metrics", 0)),
                )
                for entry in document["nodes"]
            }
            secure = bool(document.get("secure", False))
            return cls(directory, nodes, list(document["settings"]), secure)
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise LocalClusterError(
                f"{directory / LAYOUT_FILE} is not a cluster layout: {exc}"
            ) from exc

    def save(self) -> None:
        document = {
            "nodes": [
                {
                    "id": n.node_id,
                    "kafka": n.kafka_port,
                    "quorum": n.quorum_port,
                    "roles": n.roles,
                    "rack": n.rack,
                    "client": n.client_port,
                    "metrics": n.metrics_port,
                }
                for n in self.nodes.values()
            ],
            "settings": self.settings,
            "secure": self.secure,
        }
        (self.directory / LAYOUT_FILE).write_bytes(
            orjson.dumps(document, option=orjson.OPT_INDENT_2)
        )

    # ------------------------------------------------------------ addresses

    @property
    def broker_ids(self) -> list[int]:
        return [n.node_id for n in self.nodes.values() if n.broker]

    @property
    def voters(self) -> str:
        return ",".join(
            f"{n.node_id}@{HOST}:{n.quorum_port}" for n in self.nodes.values() if n.controller
        )

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{n.kafka_port}" for n in self.nodes.values() if n.broker)

    @property
    def client_bootstrap(self) -> str:
        """The CLIENT (SASL_SSL) listeners of a secure cluster."""
        return ",".join(f"{HOST}:{n.client_port}" for n in self.nodes.values() if n.client_port)

    @property
    def metrics_urls(self) -> dict[int, str]:
        """Each node's metrics endpoint, of the nodes that serve one."""
        return {
            n.node_id: f"http://{HOST}:{n.metrics_port}/metrics"
            for n in self.nodes.values()
            if n.metrics_port
        }

    @property
    def certificates(self) -> Path:
        return self.directory / CERTIFICATES_DIRECTORY

    def admin_settings(self) -> dict[str, Any]:
        """librdkafka settings of the operator's super user: its certificate, on INTERNAL."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.certificates / "ca.pem"),
            "ssl.certificate.location": str(self.certificates / "admin.crt"),
            "ssl.key.location": str(self.certificates / "admin.key"),
        }

    def client_settings(self, user: str, password: str) -> dict[str, Any]:
        """librdkafka settings of an application's SCRAM user, on CLIENT."""
        return {
            "bootstrap.servers": self.client_bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(self.certificates / "ca.pem"),
        }

    def _security_settings(self, node: Node) -> list[str]:
        if not self.secure:
            return []
        listeners = f"INTERNAL://{HOST}:{node.kafka_port}"
        if node.client_port:
            listeners += f",CLIENT://{HOST}:{node.client_port}"
        return [
            f"listeners={listeners}",
            "listener.security.protocol.map=INTERNAL:SSL,CLIENT:SASL_SSL,CONTROLLER:SSL",
            "inter.broker.listener.name=INTERNAL",
            "controller.listener.names=CONTROLLER",
            f"ssl.keystore.location={self.certificates / 'broker.pem'}",
            f"ssl.truststore.location={self.certificates / 'ca.pem'}",
            "authorizer.class.name=StandardAuthorizer",
            f"super.users={BROKER_PRINCIPAL};{ADMIN_PRINCIPAL}",
        ]

    @property
    def controllers(self) -> dict[int, tuple[str, int]]:
        return {n.node_id: (HOST, n.quorum_port) for n in self.nodes.values() if n.controller}

    def log_path(self, node_id: int) -> Path:
        return self.directory / f"node-{node_id}.log"

    # ------------------------------------------------------------ processes

    def command(self, node_id: int) -> list[str]:
        node = self.nodes[node_id]
        command = [
            str(self.platform),
            "serve",
            "--data-dir",
            str(self.directory / f"node-{node_id}"),
            "--listen",
            f"{HOST}:{node.kafka_port}",
        ]
        if node.metrics_port:
            command += ["--metrics-listen", f"{HOST}:{node.metrics_port}"]
        factor = min(3, len(self.broker_ids))
        settings = [
            f"node.id={node_id}",
            f"process.roles={node.roles}",
            f"controller.quorum.voters={self.voters}",
            f"default.replication.factor={factor}",
            f"offsets.topic.replication.factor={factor}",
            *([f"broker.rack={node.rack}"] if node.rack else []),
            *self._security_settings(node),
            *self.settings,
        ]
        for setting in settings:
            command += ["--override", setting]
        return command

    def start(self, node_ids: Sequence[int] | None = None, *, wait: bool = True) -> None:
        """Start the nodes (all by default) and wait until each serves clients."""
        chosen = list(self.nodes) if node_ids is None else list(node_ids)
        starts = {}
        for node_id in chosen:
            node = self.nodes[node_id]
            if node.process is not None and node.process.poll() is None:
                continue
            log_file = self.log_path(node_id)
            starts[node_id] = log_file.stat().st_size if log_file.exists() else 0
            with log_file.open("ab") as output:
                node.process = subprocess.Popen(
                    self.command(node_id),
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                    start_new_session=True,
                )
        if wait:
            for node_id, offset in starts.items():
                self._wait_serving(node_id, offset)

    def _wait_serving(self, node_id: int, offset: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        node = self.nodes[node_id]
        while time.monotonic() < deadline:
            with self.log_path(node_id).open("rb") as log_file:
                log_file.seek(offset)
                if SERVING.encode() in log_file.read():
                    return
            if node.process is not None and node.process.poll() is not None:
                break
            time.sleep(0.05)
        raise LocalClusterError(f"node {node_id} did not start:\n{self.tail(node_id)}")

    def tail(self, node_id: int, lines: int = 40) -> str:
        try:
            text = self.log_path(node_id).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def signal(self, node_id: int, signum: int) -> None:
        process = self.nodes[node_id].process
        if process is not None and process.poll() is None:
            process.send_signal(signum)

    def kill(self, node_id: int) -> None:
        """SIGKILL, and reap."""
        self.signal(node_id, signal.SIGKILL)
        process = self.nodes[node_id].process
        if process is not None:
            process.wait(STOP_TIMEOUT_S)

    def pause(self, node_id: int) -> None:
        self.signal(node_id, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.signal(node_id, signal.SIGCONT)

    def stop(self, node_ids: Sequence[int] | None = None) -> None:
        """SIGTERM (a controlled shutdown) and wait; SIGKILL what outlives the wait."""
        chosen = list(self.nodes) if node_ids is None else list(node_ids)
        for node_id in chosen:
            self.resume(node_id)
            self.signal(node_id, signal.SIGTERM)
        for node_id in chosen:
            process = self.nodes[node_id].process
            if process is None:
                continue
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT_S)

    def running(self, node_id: int) -> bool:
        process = self.nodes[node_id].process
        return process is not None and process.poll() is None

    def write_pids(self, running: Mapping[int, int] | None = None) -> None:
        """Record the nodes' processes for ``cluster down``: those this object started,
        and ``running`` (node id to pid), the ones an earlier detached ``up`` left."""
        pids = dict(running or {})
        pids.update({n.node_id: n.process.pid for n in self.nodes.values() if n.process})
        document = {str(node_id): pid for node_id, pid in sorted(pids.items())}
        (self.directory / PIDS_FILE).write_bytes(orjson.dumps(document))

    def detached_running(self) -> dict[int, int]:
        """The nodes an earlier detached ``cluster up`` started that still run: node id to
        pid. A recorded pid counts only while it is that node's ``platform serve`` (a pid
        the system gave to another process since is not)."""
        try:
            recorded = orjson.loads((self.directory / PIDS_FILE).read_bytes())
            pids = {int(node_id): int(pid) for node_id, pid in recorded.items()}
        except (OSError, orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
            return {}
        return {node_id: pid for node_id, pid in pids.items() if self._serves_node(pid, node_id)}

    def _serves_node(self, pid: int, node_id: int) -> bool:
        if not _signal(pid, 0):
            return False
        try:
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return True  # no /proc here: a live pid is all there is to go by
        data_dir = self.directory / f"node-{node_id}"
        return any(
            argument in (str(data_dir).encode(), str(data_dir.resolve()).encode())
            for argument in arguments
        )

    def stop_detached(self) -> int:
        """SIGTERM the processes a detached ``cluster up`` left; how many were running."""
        path = self.directory / PIDS_FILE
        if not path.exists():
            return 0
        pids = list(self.detached_running().values())
        stopped = [pid for pid in pids if _signal(pid, signal.SIGTERM)]
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and any(_signal(pid, 0) for pid in stopped):
            time.sleep(0.1)
        for pid in stopped:
            _signal(pid, signal.SIGKILL)
        path.unlink(missing_ok=True)
        return len(stopped)


def _make_certificates(directory: Path) -> None:
    """The CA, one certificate every node serves and presents (``CN=broker``, valid for
    this host), and the operator's (``CN=admin``)."""
    make_authority(directory)
    issue(directory, "broker", hosts=(HOST, "localhost"))
    issue(directory, "admin")


def _signal(pid: int, signum: int) -> bool:
    """Send ``signum`` to ``pid``; False when no such process runs."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
