"""The whole cluster (three nodes, each broker and controller) in one ``trio.run`` under a
mock clock, on a seeded faulty network and a disk that forgets unflushed writes: acks=all
idempotent producers and consumers run through kills, power cuts, pauses and partitions,
and the checker holds every run to the log's promises (see ``cluster_simulation``).

``EVENTPLATFORM_CLUSTER_SIM_SEEDS`` sets how many seeds run (``make sim`` runs 10,000)
and ``EVENTPLATFORM_CLUSTER_SIM_FIRST`` the first. A failing seed replays exactly::

    EVENTPLATFORM_CLUSTER_SIM_FIRST=<seed> EVENTPLATFORM_CLUSTER_SIM_SEEDS=1 \\
        .venv/bin/python -m pytest tests/sim/test_cluster_sim.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
import trio.testing
from cluster_scenarios import (
    double_failover,
    epochs_at_the_edge,
    full_disk_on_the_leader,
    paused_controller,
    reassign_off_the_leader,
    restart_before_high_watermark,
    spoofed_replica,
)
from cluster_simulation import History, run_cluster

from eventplatform.log.protocol import ErrorCode

FIRST = int(os.environ.get("EVENTPLATFORM_CLUSTER_SIM_FIRST", "0"))
SEEDS = int(os.environ.get("EVENTPLATFORM_CLUSTER_SIM_SEEDS", "200"))
FAULTY_S = float(os.environ.get("EVENTPLATFORM_CLUSTER_SIM_FAULTY_S", "6"))


def simulate(seed: int, root: Path) -> History:
    return trio.run(
        lambda: run_cluster(seed, root, faulty_s=FAULTY_S),
        clock=trio.testing.MockClock(autojump_threshold=0),
    )


@pytest.mark.parametrize("seed", range(FIRST, FIRST + SEEDS))
def test_a_seeded_cluster_run_keeps_every_promise(seed: int, tmp_path: Path) -> None:
    run = simulate(seed, tmp_path / "cluster")
    assert run.faults, "the run injected no fault"
    # a seed may kill a node three times in its 6 s of faults (139: power, kill, kill)
    assert len(run.acked) > 10, "too little was acknowledged to check anything"
    assert all(run.reads.values()), "a consumer read nothing"


def test_a_cluster_seed_replays_exactly(tmp_path: Path) -> None:
    first = simulate(3, tmp_path / "first")
    second = simulate(3, tmp_path / "second")
    assert first.outcome() == second.outcome()


def scripted(scenario, root: Path):  # type: ignore[no-untyped-def]
    return trio.run(lambda: scenario(1, root), clock=trio.testing.MockClock(autojump_threshold=0))


def test_kip_101_a_follower_restarted_before_its_high_watermark_keeps_the_record(
    tmp_path: Path,
) -> None:
    sim = scripted(restart_before_high_watermark, tmp_path / "cluster")
    assert sim.history.final[0] == [(0, b"m1"), (1, b"m2")]


def test_kip_279_after_a_double_failover_the_returning_replica_truncates_by_epoch(
    tmp_path: Path,
) -> None:
    sim = scripted(double_failover, tmp_path / "cluster")
    # m3 was written only by the second leader, whose epoch the third leader never had
    assert sim.history.final[0] == [(0, b"m1"), (1, b"m2"), (2, b"m4")]


def test_a_partition_moves_off_its_leader_and_back_across_a_controller_failover(
    tmp_path: Path,
) -> None:
    sim = scripted(reassign_off_the_leader, tmp_path / "cluster")
    assert len(sim.history.acked) >= 40
    # the checker found every acknowledged record once on the final replicas
    assert {value for _, value in sim.history.final[0]} >= set(sim.history.acked)


def test_a_paused_active_controller_fences_no_broker_that_keeps_heartbeating(
    tmp_path: Path,
) -> None:
    sim, watch = scripted(paused_controller, tmp_path / "cluster")
    assert watch.successor not in (-1, watch.paused), "no other controller took over"
    assert watch.fenced == set(), f"brokers {watch.fenced} were fenced though they heartbeat"
    assert watch.shrunk == set(), f"(partition, broker) left the ISR: {watch.shrunk}"
    assert len(sim.history.acked) >= 20


def test_a_spoofed_replica_fetch_does_not_acknowledge_what_no_follower_has(
    tmp_path: Path,
) -> None:
    sim, codes = scripted(spoofed_replica, tmp_path / "cluster")
    assert codes == {ErrorCode.STALE_BROKER_EPOCH}
    # m2 was never acknowledged: the checker holds every acknowledged record to the log
    assert b"m2" not in sim.history.acked
    assert [value for _, value in sim.history.final[0]][:1] == [b"m1"]


def test_epochs_at_the_edge_of_their_range_are_refused_and_the_cluster_goes_on(
    tmp_path: Path,
) -> None:
    sim, epochs = scripted(epochs_at_the_edge, tmp_path / "cluster")
    assert epochs and all(0 < epoch < 100 for epoch in epochs.values()), epochs
    assert len(sim.history.acked) >= 20


def test_a_full_disk_on_the_leader_moves_leadership_and_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    sim = scripted(full_disk_on_the_leader, tmp_path / "cluster")
    assert len(sim.history.acked) >= 40
    # the checker found every acknowledged record on every replica, the healed one too
    assert {value for _, value in sim.history.final[0]} >= set(sim.history.acked)
