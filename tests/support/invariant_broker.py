"""``platform`` with one broken invariant planted: a produce to :data:`PROBE_TOPIC` breaks it.

Run as ``python invariant_broker.py serve ...``. Everything else is the real
command line and the real broker, so a test can check what a broken invariant
inside a request does to the whole process.
"""

from __future__ import annotations

import sys
from typing import Any

from eventplatform.cli import main
from eventplatform.log.broker.partition import Partition, ProduceResult
from eventplatform.log.invariants import require

PROBE_TOPIC = "invariant-probe"
PLANTED_MESSAGE = "planted: a produce to invariant-probe breaks an invariant"


def plant() -> None:
    real_append = Partition.append

    def append(self: Partition, record_set: Any, *, acks: int = 1) -> ProduceResult:
        require(self.topic != PROBE_TOPIC, PLANTED_MESSAGE)
        return real_append(self, record_set, acks=acks)

    Partition.append = append  # type: ignore[method-assign]


if __name__ == "__main__":
    plant()
    sys.exit(main())
