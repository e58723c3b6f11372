"""Acceptance of entity versions under a race: worker processes send bank commands to a
few accounts at once through the repository, against one broker and against a 3-node
cluster whose leader of the accounts' partition is SIGKILLed and restarted every few
seconds meanwhile; :func:`entity_race.check_race` then checks the log (versions without
gap or repeat, no balance ever negative, every acknowledged event exactly once), and the
bank's projection, folded into SQLite, must hold the balances the log folds to.

CI runs a bounded slice; ``make entity-race`` runs the full size (16 processes, 2,000
commands each, 50 accounts) through ``ENTITY_RACE_PROCESSES``, ``ENTITY_RACE_COMMANDS``
and ``ENTITY_RACE_ACCOUNTS``."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from bank.events import TOPIC
from cluster_workload import leaders, wait_healed
from entity_race import assert_tables_equal_the_log, check_race, run_race

from eventplatform.testing import BrokerProcess, LocalCluster

PROCESSES = int(os.environ.get("ENTITY_RACE_PROCESSES", "4"))
COMMANDS = int(os.environ.get("ENTITY_RACE_COMMANDS", "120"))
CLUSTER_COMMANDS = int(os.environ.get("ENTITY_RACE_COMMANDS", "400"))
"""On the cluster the slice runs long enough for a few kills."""
ACCOUNTS = int(os.environ.get("ENTITY_RACE_ACCOUNTS", "5"))
SEED = int(os.environ.get("ENTITY_RACE_SEED", "1"))
KILL_EVERY_S = 2.0
DOWN_S = 1.0


def test_racing_tellers_on_one_broker(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        result = run_race(
            broker.bootstrap,
            tmp_path,
            processes=PROCESSES,
            commands=COMMANDS,
            accounts=ACCOUNTS,
            seed=SEED,
        )
        counted, balances = check_race(broker.bootstrap, result)
        assert_tables_equal_the_log(broker.bootstrap, tmp_path, balances)
    finally:
        broker.stop()
    print(counted)
    assert counted["unknown commands"] == 0, "a broker that stays up answers every append"


def test_racing_tellers_while_the_leader_is_killed(tmp_path: Path) -> None:
    cluster = LocalCluster.create(tmp_path / "cluster", 3, ["min.insync.replicas=2"])
    cluster.start()
    kills: list[int] = []

    def nemesis(stop: threading.Event) -> None:
        while not stop.wait(KILL_EVERY_S):
            try:
                victim = leaders(cluster.bootstrap, TOPIC)[0]
            except Exception:
                continue
            if victim < 0:
                continue
            cluster.kill(victim)
            kills.append(victim)
            time.sleep(DOWN_S)
            cluster.start([victim])

    try:
        result = run_race(
            cluster.bootstrap,
            tmp_path,
            processes=PROCESSES,
            commands=CLUSTER_COMMANDS,
            accounts=ACCOUNTS,
            seed=SEED,
            nemesis=nemesis,
        )
        wait_healed(cluster)
        counted, balances = check_race(cluster.bootstrap, result)
        assert_tables_equal_the_log(cluster.bootstrap, tmp_path, balances)
    finally:
        cluster.stop()
    print(counted, "kills", kills)
    assert len(kills) >= 2, "the leader was killed more than once"
