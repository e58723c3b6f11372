"""A real ``platform serve`` process for tests and benchmarks: start, stop, kill -9, restart;
and a 3-node :class:`LocalCluster` that stands in for it.

The broker listens on a free port (``--listen 127.0.0.1:0``); the port is read
from its "serving on" log line. Every wait is bounded.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from eventplatform.local_cluster import LocalCluster

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
_SERVING = re.compile(r"serving on (\S+):(\d+)")
_LISTENER = re.compile(r"listener (\S+) \((\S+)\) on (\S+):(\d+)")
_METRICS = re.compile(r"metrics on (http://\S+)")
PLATFORM = Path(sys.executable).with_name("platform")


class BrokerProcess:
    def __init__(
        self,
        data_dir: Path,
        overrides: Sequence[str] = (),
        port: int = 0,
        launcher: Sequence[str] = (str(PLATFORM),),
        *,
        open_files_limit: int | None = None,
        metrics_listen: str | None = None,
    ) -> None:
        """``launcher`` is the command before ``serve``: the ``platform`` script, or a
        test's own entry point that calls the same command line. ``open_files_limit`` sets
        the process's RLIMIT_NOFILE (soft and hard), as ``ulimit -n`` would. With
        ``metrics_listen`` (``127.0.0.1:0`` for a free port) the broker serves its metrics,
        at :attr:`metrics_url`."""
        self.data_dir = data_dir
        self.launcher = list(launcher)
        self.overrides = list(overrides)
        self.port = port
        self.open_files_limit = open_files_limit
        self.process: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self.listener_ports: dict[str, int] = {}
        self.metrics_listen = metrics_listen
        self.metrics_url: str | None = None
        """The port each named listener bound (``listeners`` with port 0 binds free ones)."""

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        return f"127.0.0.1:{self.listener_ports[listener]}"

    def start(self) -> BrokerProcess:
        command = [
            *self.launcher,
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            f"127.0.0.1:{self.port}",
        ]
        for override in self.overrides:
            command += ["--override", override]
        if self.metrics_listen is not None:
            command += ["--metrics-listen", self.metrics_listen]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=None if self.open_files_limit is None else self._limit_open_files,
        )
        ready = threading.Event()
        threading.Thread(target=self._pump, args=(self.process, ready), daemon=True).start()
        if not ready.wait(START_TIMEOUT_S):
            self.kill()
            raise RuntimeError("broker did not start:\n" + "".join(self.output[-50:]))
        return self

    def _limit_open_files(self) -> None:
        assert self.open_files_limit is not None
        limit = self.open_files_limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    def open_descriptors(self) -> int:
        """How many descriptors the broker process has open now."""
        assert self.process is not None
        return sum(1 for _ in Path(f"/proc/{self.process.pid}/fd").iterdir())

    def resident_bytes(self) -> int:
        """The broker process's resident set size."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS line")

    def _pump(self, process: subprocess.Popen[str], ready: threading.Event) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.output.append(line)
            listener = _LISTENER.search(line)
            if listener:
                self.listener_ports[listener.group(1)] = int(listener.group(4))
            metrics = _METRICS.search(line)
            if metrics:
                self.metrics_url = metrics.group(1)
            match = _SERVING.search(line)
            if match and not ready.is_set():
                self.port = int(match.group(2))
                ready.set()
        ready.set()

    def stop(self) -> int:
        """SIGTERM and wait: a clean shutdown."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(STOP_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL: no shutdown at all."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)

    def restart(self) -> BrokerProcess:
        """Start again on the same port and data directory."""
        return self.start()

    def log_text(self) -> str:
        return "".join(self.output)


@contextmanager
def running_broker(data_dir: Path, overrides: Sequence[str] = ()) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(data_dir, overrides).start()
    try:
        yield broker
    finally:
        broker.kill()


def wait_until(condition: object, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``condition`` (a callable) until it is true; False when ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(interval_s)
    return False


class LocalClusterBroker:
    """A 3-node :class:`LocalCluster` standing in for one :class:`BrokerProcess` in the
    interop suites: clients get every node as bootstrap; ``process`` and ``port`` are node
    1's."""

    def __init__(self, directory: Path, overrides: Sequence[str] = ()) -> None:
        self.cluster = LocalCluster.create(directory, 3, list(overrides))
        self.data_dir = directory

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def port(self) -> int:
        return self.cluster.nodes[1].kafka_port

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """Node 1 while every node runs; the first node that exited otherwise."""
        for node in self.cluster.nodes.values():
            if node.process is not None and node.process.poll() is not None:
                return node.process
        return self.cluster.nodes[1].process

    def log_text(self) -> str:
        return "\n".join(f"--- node {n}\n{self.cluster.tail(n, 200)}" for n in self.cluster.nodes)


@contextmanager
def running_local_cluster(
    directory: Path, overrides: Sequence[str] = ()
) -> Iterator[LocalClusterBroker]:
    brokers = LocalClusterBroker(directory, overrides)
    brokers.cluster.start()
    try:
        yield brokers
    finally:
        for node in brokers.cluster.nodes:
            brokers.cluster.kill(node)
