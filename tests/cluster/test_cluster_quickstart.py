"""The broker quickstart, run against ``platform cluster up`` instead of one broker.

Every step is the ``platform`` command a user types, in a subprocess:
``cluster up --detach``, ``topics create``, ``produce``, ``consume`` (plain and
with a group), ``groups list|describe``, ``cluster status`` and ``cluster down``,
and kcat's metadata listing. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

PLATFORM = Path(sys.executable).with_name("platform")
COMMAND_TIMEOUT_S = 90
KCAT = shutil.which("kcat") or "/usr/bin/kcat"


def run(*arguments: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(PLATFORM), *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, (arguments, result.stdout, result.stderr)
    return result


def test_the_quickstart_runs_against_a_three_node_cluster(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    up = run("cluster", "up", "--brokers", "3", "--data-dir", str(data_dir), "--detach")
    try:
        match = re.search(r"bootstrap:\s+(\S+)", up.stdout)
        assert match, up.stdout
        bootstrap = match.group(1)
        assert len(bootstrap.split(",")) == 3
        on = ("--bootstrap", bootstrap)

        run("topics", "create", "greetings", "--partitions", "2", *on)
        described = run("topics", "describe", "greetings", *on).stdout
        assert "greetings" in described

        produced = run("produce", "greetings", *on, stdin="hello\nworld\n")
        assert "produced 2 records to greetings" in produced.stderr
        consumed = run(
            "consume",
            "greetings",
            "--from-beginning",
            "--max-messages",
            "2",
            "--timeout",
            "30",
            *on,
        )
        assert sorted(consumed.stdout.split()) == ["hello", "world"]

        grouped = run(
            "consume",
            "greetings",
            "--group",
            "greeters",
            "--from-beginning",
            "--max-messages",
            "2",
            "--timeout",
            "30",
            *on,
        )
        assert sorted(grouped.stdout.split()) == ["hello", "world"]
        assert "greeters" in run("groups", "list", *on).stdout
        group = run("groups", "describe", "greeters", *on).stdout
        assert "state: Empty" in group
        assert "greetings" in group

        status = json.loads(run("cluster", "status", "--data-dir", str(data_dir), "--json").stdout)
        partitions = status["topics"]["greetings"]["partitions"]
        assert len(partitions) == 2
        for partition in partitions:
            assert sorted(partition["replicas"]) == [1, 2, 3]
            assert partition["leader"] in partition["isr"]

        listing = subprocess.run(
            [KCAT, "-b", bootstrap, "-L", "-t", "greetings"],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=True,
        ).stdout
        assert "3 brokers" in listing
        assert "replicas: " in listing
    finally:
        down = run("cluster", "down", "--data-dir", str(data_dir))
        assert "stopped 3 nodes" in down.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cluster_up_starts_only_the_missing_node_and_down_stops_all(tmp_path: Path) -> None:
    """Regression: after one node was killed, cluster up started the live ones too, failed
    on their locked logs, and the cluster down that followed left the restarted node."""
    data_dir = tmp_path / "cluster"
    arguments = ("cluster", "up", "--brokers", "3", "--data-dir", str(data_dir), "--detach")
    run(*arguments)
    pids_file = data_dir / "pids.json"
    try:
        first = {int(k): v for k, v in json.loads(pids_file.read_text()).items()}
        os.kill(first[2], signal.SIGKILL)
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while _alive(first[2]) and time.monotonic() < deadline:
            time.sleep(0.05)

        again = run(*arguments)

        assert "started node(s) 2; the others ran already" in again.stdout
        second = {int(k): v for k, v in json.loads(pids_file.read_text()).items()}
        assert second[1] == first[1] and second[3] == first[3] and second[2] != first[2]
        assert all(_alive(pid) for pid in second.values())
        assert "started node(s) none" in run(*arguments).stdout
    finally:
        down = run("cluster", "down", "--data-dir", str(data_dir))
    assert "stopped 3 nodes" in down.stdout
    assert not any(_alive(pid) for pid in second.values())
