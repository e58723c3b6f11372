"""A standalone Spark cluster for tests: one master and one worker on 127.0.0.1.

Both run ``bin/spark-class`` from the pyspark package, each in its own
process group (so executors the worker launches go down with it), with
their output in log files under the cluster's directory. Ports are chosen by
the processes themselves (``0``) and read from their logs; readiness is the
master's JSON status listing the worker as ALIVE. :class:`GroupProcess` runs
a driver (such as ``platform replay``) the same way, so a timeout or a failing
test ends it and everything it started. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
POLL_S = 0.2
HTTP_TIMEOUT_S = 5.0
LOG_TAIL_LINES = 40
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI_PORT = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")


class SparkClusterError(RuntimeError):
    """The cluster did not come up (the message carries the logs' tails)."""


@dataclass
class _Daemon:
    """One ``spark-class`` process, leading its own process group."""

    name: str
    log_path: Path
    process: subprocess.Popen[bytes]

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self) -> str:
        lines = self.log_text().splitlines()[-LOG_TAIL_LINES:]
        return f"--- {self.name} ({self.log_path}) ---\n" + "\n".join(lines)

    def stop(self) -> None:
        """SIGTERM to the whole group, then SIGKILL to whatever is left."""
        stop_group(self.process, STOP_TIMEOUT_S)


@dataclass
class SparkCluster:
    master_url: str
    """``spark://127.0.0.1:<port>``: what drivers pass as the master."""
    web_url: str
    """The master's web UI; its status is at ``<web_url>/json/``."""
    work_dir: Path
    """The worker's directory: one subdirectory per application, one per executor inside."""
    daemons: list[_Daemon] = field(default_factory=list)

    def status(self) -> dict[str, Any]:
        """The master's JSON status (workers, active and completed applications)."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=HTTP_TIMEOUT_S) as response:
            status: dict[str, Any] = json.load(response)
        return status

    def applications(self, name: str) -> list[dict[str, Any]]:
        """The master's active and completed applications called ``name``."""
        status = self.status()
        listed = [*status.get("activeapps", []), *status.get("completedapps", [])]
        return [app for app in listed if app.get("name") == name]

    def wait_for_finished(self, name: str, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """The completed application called ``name``, once the master lists it as FINISHED."""
        deadline = time.monotonic() + timeout_s
        seen: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            seen = self.applications(name)
            for app in seen:
                if app.get("state") == "FINISHED":
                    return app
            time.sleep(POLL_S)
        raise SparkClusterError(f"no finished application {name!r} on the master; it lists {seen}")

    def executor_dirs(self, app_id: str) -> list[Path]:
        """The directories of the executors the worker launched for ``app_id``."""
        app_dir = self.work_dir / app_id
        return (
            sorted(path for path in app_dir.iterdir() if path.is_dir()) if app_dir.exists() else []
        )

    def log_tails(self) -> str:
        return "\n".join(daemon.tail() for daemon in self.daemons)


def stop_group(process: subprocess.Popen[Any], timeout_s: float) -> None:
    """End the process group ``process`` leads (it was started with ``start_new_session``).

    SIGTERM, wait for the group to empty, then SIGKILL if anything is left.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        if _group_gone(process, timeout_s):
            break
    process.poll()


def _group_gone(process: subprocess.Popen[Any], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        process.poll()  # reap the leader, or its zombie keeps the group alive
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(POLL_S)
    return False


class GroupProcess:
    """A command running in its own process group, its output in a file.

    :meth:`finish` waits for it (bounded), ending the whole group on timeout;
    use it as a context manager so the group ends even if the caller fails first.
    """

    def __init__(
        self, command: Sequence[str], *, env: Mapping[str, str], cwd: Path, output: Path
    ) -> None:
        self.command = list(command)
        self.output_path = output
        with open(output, "wb") as sink:
            self.process = subprocess.Popen(
                self.command,
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def finish(self, timeout_s: float) -> int:
        """The exit status; past ``timeout_s``, end the group and raise AssertionError."""
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(self.process, STOP_TIMEOUT_S)
            raise AssertionError(
                f"{' '.join(self.command)} did not finish within {timeout_s:.0f} s:\n"
                f"{self.output()[-8000:]}"
            ) from None

    def __enter__(self) -> GroupProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        stop_group(self.process, STOP_TIMEOUT_S)


def _spawn(name: str, directory: Path, arguments: Sequence[str], env: Mapping[str, str]) -> _Daemon:
    log_path = directory / f"{name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(SPARK_CLASS), *arguments],
            env=dict(env),
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return _Daemon(name, log_path, process)


def _wait(what: str, check: Any, daemons: Sequence[_Daemon], deadline: float) -> Any:
    """Poll ``check()`` until it returns something truthy; fail with the logs' tails."""
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        for daemon in daemons:
            if daemon.process.poll() is not None:
                tails = "\n".join(d.tail() for d in daemons)
                raise SparkClusterError(
                    f"{daemon.name} exited ({daemon.process.returncode}) before {what}:\n{tails}"
                )
        time.sleep(POLL_S)
    tails = "\n".join(d.tail() for d in daemons)
    raise SparkClusterError(f"timed out after {START_TIMEOUT_S:.0f} s waiting for {what}:\n{tails}")


@contextmanager
def standalone_cluster(
    directory: Path,
    *,
    worker_env: Mapping[str, str],
    cores: int = 2,
    memory: str = "2g",
) -> Iterator[SparkCluster]:
    """Start a master and one worker, yield the cluster once the worker is ALIVE, stop both.

    ``worker_env`` is added to the worker's environment, which its executors
    (and their Python workers) inherit: ``PYSPARK_PYTHON``, ``PYTHONPATH``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    work_dir = directory / "work"
    work_dir.mkdir(exist_ok=True)
    base_env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": HOST}
    deadline = time.monotonic() + START_TIMEOUT_S
    with ExitStack() as stack:
        master = _spawn(
            "master",
            directory,
            [MASTER_CLASS, "--host", HOST, "--port", "0", "--webui-port", "0"],
            base_env,
        )
        stack.callback(master.stop)
        daemons = [master]

        def master_ports() -> tuple[str, int] | None:
            text = master.log_text()
            url, ui_port = _MASTER_URL.search(text), _MASTER_UI_PORT.search(text)
            return (url.group(1), int(ui_port.group(1))) if url and ui_port else None

        master_url, ui_port = _wait("the master's ports", master_ports, daemons, deadline)
        cluster = SparkCluster(master_url, f"http://{HOST}:{ui_port}", work_dir, daemons)
        worker = _spawn(
            "worker",
            directory,
            [
                WORKER_CLASS,
                master_url,
                "--host",
                HOST,
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--webui-port",
                "0",
                "--work-dir",
                str(work_dir),
            ],
            {**base_env, **worker_env},
        )
        stack.callback(worker.stop)
        daemons.append(worker)

        def worker_alive() -> bool:
            try:
                status = cluster.status()
            except (urllib.error.URLError, OSError, ValueError):
                return False
            workers = status.get("workers", [])
            return status.get("status") == "ALIVE" and any(
                w.get("state") == "ALIVE" for w in workers
            )

        _wait("an ALIVE worker on the master", worker_alive, daemons, deadline)
        yield cluster
