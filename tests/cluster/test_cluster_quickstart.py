"""The broker quickstart, run against ``platform cluster up`` instead of one broker.

Every step is the ``platform`` command a user types, in a subprocess:
``cluster up --detach``, ``topics create``, ``produce``, ``consume`` (plain and
with a group), ``groups list|describe``, ``cluster status`` and ``cluster down``,
and kcat's metadata listing. Every wait is bounded.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
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
