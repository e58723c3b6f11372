"""The active controller's process is stopped (SIGSTOP) for twice the session of a
`platform cluster up` cluster, then continued. Another voter takes over; the two brokers
that went on running must find it and keep their sessions: neither is ever fenced, and no
partition they lead changes its leader or leader epoch. (The brokers once kept waiting on
the stopped controller for 5.25 s per heartbeat, and the new one fenced all of them.)"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cluster_workload import create_topic

from eventplatform.testing import LocalCluster
from eventplatform.tools.cluster_status import call_controller, wait_healthy
from eventplatform.tools.errors import ToolError

TOPIC = "steady"
PARTITIONS = 6
PAUSE_S = 6.0
POLL_S = 0.1
ASK_TIMEOUT_S = 1.0
HEAL_TIMEOUT_S = 30.0


def describe(cluster: LocalCluster, voters: set[int]) -> dict[str, Any] | None:
    """The active controller's view, asking only ``voters``; None when none answers."""
    try:
        return call_controller(
            {n: cluster.controllers[n] for n in voters}, "describe", {}, timeout_s=ASK_TIMEOUT_S
        )
    except ToolError:
        return None


def test_a_paused_active_controller_fences_no_broker_that_keeps_heartbeating(
    tmp_path: Path,
) -> None:
    cluster = LocalCluster.create(tmp_path, 3, ["min.insync.replicas=2"])
    cluster.start()
    try:
        create_topic(cluster.bootstrap, TOPIC, PARTITIONS, 3)
        assert wait_healthy(cluster, HEAL_TIMEOUT_S)
        before = describe(cluster, set(cluster.broker_ids))
        assert before is not None
        paused = before["controller"]
        running = set(cluster.broker_ids) - {paused}
        led = {
            number: (state["leader"], state["leader_epoch"])
            for number, state in enumerate(before["topics"][TOPIC]["partitions"])
            if state["leader"] in running
        }
        fenced: set[int] = set()
        successors: set[int] = set()
        cluster.pause(paused)
        try:
            deadline = time.monotonic() + PAUSE_S
            while time.monotonic() < deadline:
                status = describe(cluster, running)
                if status is not None:
                    successors.add(status["controller"])
                    fenced |= {
                        b["broker"]
                        for b in status["brokers"]
                        if b["fenced"] and b["broker"] in running
                    }
                time.sleep(POLL_S)
        finally:
            cluster.resume(paused)
        assert wait_healthy(cluster, HEAL_TIMEOUT_S)
        after = describe(cluster, set(cluster.broker_ids))
        assert after is not None
        assert successors and successors <= running, "no other controller took over"
        assert fenced == set(), f"brokers {fenced} were fenced though they kept heartbeating"
        moved = {
            number: (state["leader"], state["leader_epoch"])
            for number, state in enumerate(after["topics"][TOPIC]["partitions"])
            if number in led and (state["leader"], state["leader_epoch"]) != led[number]
        }
        assert moved == {}, f"partitions led by running brokers changed hands: {moved}"
    finally:
        cluster.stop()
