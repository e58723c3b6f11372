"""The broker's erasure task: it carries out on this broker's logs the erasures
committed for the partitions it holds.

Each partition's :class:`~eventplatform.log.replica.erasures.ErasureLedger` says which
offsets are committed and not yet erased here; while any is, the partition serves no
read past it. The task wakes on :class:`~eventplatform.log.replica.erasures.ErasureWork`
(new erasures from the metadata, records fetched again by a follower), and for each
partition with pending offsets that its log holds, runs
:func:`~eventplatform.log.storage.erasure.erase_records`'s three steps: prepared and
swapped in on the event loop, the one thread that changes a log's segments, with the
segments rewritten in a worker thread meanwhile, as compaction does; all of it holding
the broker's ``log_rewrites`` lock, so a compaction never installs segments read before
the erasure. A storage error takes the
partition offline; a batch that cannot be rewritten (:class:`ErasureError`) is logged
and stays pending, so its records are never served until a restart tries again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from eventplatform.log.storage import KafkaStorageError
from eventplatform.log.storage.erasure import (
    ErasureError,
    install_erasure,
    prepare_erasure,
    run_erasure,
)

if TYPE_CHECKING:
    from eventplatform.log.broker.broker import Broker
    from eventplatform.log.replica.partition import Partition

log = logging.getLogger("eventplatform.broker")

PASSES_MAX = 5
"""Erasure passes of one partition in one round, when the log keeps changing under them."""


async def run_erasures(broker: Broker) -> None:
    """See the module docstring. Runs until cancelled."""
    failed: set[tuple[str, int, int]] = set()
    while True:
        await broker.erasure_work.wait()
        for partition in list(broker.topics.partitions()):
            if partition.erasures.pending and not partition.closed and not partition.offline:
                async with broker.log_rewrites:
                    await _erase_pending(broker, partition, failed)


async def _erase_pending(
    broker: Broker, partition: Partition, failed: set[tuple[str, int, int]]
) -> None:
    """One partition's pending erasures: prepared here, the segments rewritten in a
    worker thread while requests go on, swapped in here; prepared again when the log
    changed meanwhile (a truncation, retention), at most ``PASSES_MAX`` times a round."""
    log_ = partition.log
    for _ in range(PASSES_MAX):
        if partition.closed or log_.offline:
            return
        due = partition.erasures.due(log_.log_start_offset, log_.log_end_offset)
        due = [o for o in due if (partition.topic, partition.index, o) not in failed]
        if not due:
            return
        try:
            job = prepare_erasure(log_, due)
            erased: int | None = 0
            if job is not None:
                await broker.off_loop(run_erasure, broker.cleaner, job)
                erased = install_erasure(broker.cleaner, log_, job)
        except ErasureError as exc:
            failed.update((partition.topic, partition.index, o) for o in due)
            log.error(
                "%s-%d: cannot erase offsets %d to %d; they are not served: %s",
                partition.topic,
                partition.index,
                due[0],
                due[-1],
                exc,
            )
            return
        except (OSError, KafkaStorageError) as exc:
            log_.take_offline(exc)
            return
        if erased is None:
            continue  # the log changed while the segments were rewritten
        partition.erasures.done(due)
        partition.wake_all()
        if erased:
            log.info("%s-%d: erased %d records", partition.topic, partition.index, erased)
        return
    broker.erasure_work.wake()  # it kept changing: the next round tries again
