"""A bounded fault-injection run on a real 3-node cluster: the seeded nemesis kills and
pauses leaders, the active controller and two nodes at once while idempotent acks=all
producers write and a group consumer reads and commits (:mod:`fault_run`). Nothing
acknowledged may be lost, rewritten, duplicated or reordered; replicas agree; no broker
the nemesis left alone is fenced; every round heals.

``make faults`` runs hundreds of rounds over several seeds; CI runs this slice. The
seed and round count can be set with ``EVENTPLATFORM_FAULT_SEED`` and
``EVENTPLATFORM_FAULT_ROUNDS``."""

from __future__ import annotations

import os
from pathlib import Path

import fault_run

SEED = int(os.environ.get("EVENTPLATFORM_FAULT_SEED", "7"))
ROUNDS = int(os.environ.get("EVENTPLATFORM_FAULT_ROUNDS", "6"))


def test_a_seeded_nemesis_leaves_every_acknowledged_record_once_and_in_order(
    tmp_path: Path,
) -> None:
    result = fault_run.run(SEED, ROUNDS, tmp_path)
    print(fault_run.summary([result]))
    assert result.acknowledged > 1000
    assert result.verdict.ok, result.verdict.describe()
