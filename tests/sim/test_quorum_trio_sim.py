"""The quorum's trio shell (the same ``QuorumServer`` that runs over TCP) on a simulated
network under a mock clock: seeded crashes, partitions, drops and duplicates never break
safety while voters snapshot and truncate their logs, the quorum recovers, and a seed
replays exactly."""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing
from quorum_network import run_quorum

SEEDS = int(os.environ.get("EVENTPLATFORM_TRIO_SIM_SEEDS", "50"))


def simulate(seed: int):  # type: ignore[no-untyped-def]
    return trio.run(run_quorum, seed, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.parametrize("seed", range(SEEDS))
def test_a_seeded_run_keeps_safety_and_recovers(seed: int) -> None:
    run = simulate(seed)
    assert run.crashes and run.partitions
    assert len(run.acknowledged) > 50 and len(run.leaders) >= 1
    assert run.snapshots > 0


def test_a_seed_replays_exactly() -> None:
    first, second = simulate(4), simulate(4)
    assert first.installs > 0, "no voter caught up by snapshot in this seed"
    assert (first.committed, first.leaders, first.acknowledged, first.installs) == (
        second.committed,
        second.leaders,
        second.acknowledged,
        second.installs,
    )
