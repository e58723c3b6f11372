"""A real ``platform projections run`` process for tests: start, SIGKILL, restart, SIGTERM.

Each start is a new incarnation with its own output file (stdout and stderr)
and its own ``client.id`` (``<name>.<incarnation>`` unless the test picks
one), so a group description tells which process owns which partition. The
broker derives member ids from client ids, and assignors order members by
id, so a test can steer which process gets the low partitions. Every wait is
bounded.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PLATFORM = Path(sys.executable).with_name("platform")
SUPPORT = Path(__file__).resolve().parent
STOP_TIMEOUT_S = 30.0
KILL_TIMEOUT_S = 10.0
TAIL_LINES = 40
_STOPPED = re.compile(
    r"stopped after (\d+) events? in (\d+) batch(?:es)? "
    r"\((\d+) parked, (\d+) checkpoint conflicts?\)"
)


@dataclass(frozen=True)
class RunnerSummary:
    """What a runner prints when it stops cleanly."""

    events: int
    batches: int
    parked: int
    conflicts: int


class RunnerProcess:
    """One projection runner slot, restarted as often as a test kills it."""

    def __init__(
        self,
        name: str,
        *,
        projection: str,
        app: str,
        database_url: str,
        bootstrap: str,
        output_dir: Path,
        batch_size: int,
        consumer_settings: Mapping[str, str | int] | None = None,
        extra_arguments: Sequence[str] = (),
    ) -> None:
        """``extra_arguments`` follow the others (``--metrics-listen``, ``--progress-interval``)."""
        self.name = name
        self.projection = projection
        self.app = app
        self.database_url = database_url
        self.bootstrap = bootstrap
        self.output_dir = output_dir
        self.batch_size = batch_size
        self.consumer_settings = dict(consumer_settings or {})
        self.extra_arguments = list(extra_arguments)
        self.incarnation = 0
        self.client_id = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.outputs: list[Path] = []

    def start(self, client_id: str | None = None) -> RunnerProcess:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.incarnation += 1
        self.client_id = client_id or f"{self.name}.{self.incarnation}"
        output = self.output_dir / f"{self.client_id}.log"
        self.outputs.append(output)
        settings = {**self.consumer_settings, "client.id": self.client_id}
        command = [
            str(PLATFORM),
            "projections",
            "run",
            self.projection,
            "--app",
            self.app,
            "--database",
            self.database_url,
            "--bootstrap",
            self.bootstrap,
            "--batch-size",
            str(self.batch_size),
        ]
        for key, value in settings.items():
            command += ["-c", f"{key}={value}"]
        command += self.extra_arguments
        python_path = os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")]))
        with output.open("wb") as sink:
            self.process = subprocess.Popen(
                command,
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=self.output_dir,
                env={**os.environ, "PYTHONPATH": python_path, "PYTHONUNBUFFERED": "1"},
            )
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no LeaveGroup, a transaction possibly half done."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(KILL_TIMEOUT_S)

    def restart(self, client_id: str | None = None) -> RunnerProcess:
        self.kill()
        return self.start(client_id)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait for a clean exit; SIGKILL if it does not come in time."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def summary(self) -> RunnerSummary | None:
        """The current incarnation's closing line, if it stopped cleanly."""
        if not self.outputs:
            return None
        match = _STOPPED.search(self.outputs[-1].read_text(errors="replace"))
        if match is None:
            return None
        return RunnerSummary(*(int(group) for group in match.groups()))

    def output(self) -> str:
        """The current incarnation's output so far."""
        if not self.outputs or not self.outputs[-1].exists():
            return ""
        return self.outputs[-1].read_text(errors="replace")

    def tail(self, lines: int = TAIL_LINES) -> str:
        """The last lines of the current incarnation's output (and of the previous one)."""
        parts = []
        for output in self.outputs[-2:]:
            text = output.read_text(errors="replace") if output.exists() else ""
            last = "\n".join(text.splitlines()[-lines:])
            parts.append(f"--- {output.name} ---\n{last}")
        return "\n".join(parts)
