"""Which partitions of a coordinator's internal topic this broker leads and has loaded.

The group coordinator (``__consumer_offsets``) and the transaction coordinator
(``__transaction_state``) each serve the keys of the partitions their broker
leads. :class:`PartitionOwnership` follows those leaderships for one topic: at
each :meth:`~PartitionOwnership.changed` it drops what the broker no longer
leads (the ``unload`` callback, with the partition index) and starts a load
task for each partition it has come to lead at a new leader epoch; the task
replays the partition's batches into the coordinator's ``Replay`` (yielding to
the scheduler every ``LOAD_CHECKPOINT_RECORDS`` records, starting over after a
storage error), then installs the result (the ``install`` callback) unless the
leadership moved meanwhile. :meth:`~PartitionOwnership.status` answers, for a
key, whether the broker coordinates it now: NONE, COORDINATOR_LOAD_IN_PROGRESS
while its partition loads, NOT_COORDINATOR when another broker leads it,
COORDINATOR_NOT_AVAILABLE without the topic.

Every method runs on the broker's trio thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

import trio

from eventplatform.log.groups.records import partition_for
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.storage import StorageError

if TYPE_CHECKING:
    from eventplatform.log.groups.offsets_topic import OffsetsTopic
    from eventplatform.log.replica.partition import Partition
    from eventplatform.log.storage.record_batch import DecodedBatch

log = logging.getLogger("eventplatform.groups")

LOAD_CHECKPOINT_RECORDS = 1_000
"""Records replayed between yields to the scheduler while loading a partition."""
LOAD_RETRY_S = 0.5
"""How long a load that met a storage error waits before it starts again."""


class Replay(Protocol):
    def apply_batch(self, batch: DecodedBatch) -> None: ...


R = TypeVar("R", bound=Replay)


class PartitionOwnership:
    """See the module docstring."""

    def __init__(self, topic: OffsetsTopic) -> None:
        self.topic = topic
        self.owned: dict[int, int] = {}
        """Partition index → the leader epoch it was loaded at."""
        self.loading: dict[int, int] = {}
        """Partition index → the leader epoch it is being loaded at."""

    def changed(
        self,
        nursery: trio.Nursery,
        new_replay: Callable[[], R],
        install: Callable[[int, R], None],
        unload: Callable[[int], None],
    ) -> None:
        """Follow the broker's leaderships of the topic's partitions; see the module."""
        for index, partition in enumerate(self.topic.partitions()):
            epoch = partition.leader_epoch if partition.is_leader else None
            if index in self.owned and self.owned[index] != epoch:
                del self.owned[index]
                unload(index)
            if epoch is None:
                self.loading.pop(index, None)
            elif self.owned.get(index) != epoch and self.loading.get(index) != epoch:
                self.loading[index] = epoch
                nursery.start_soon(self._load, index, partition, epoch, new_replay, install)

    async def _load(
        self,
        index: int,
        partition: Partition,
        epoch: int,
        new_replay: Callable[[], R],
        install: Callable[[int, R], None],
    ) -> None:
        def current() -> bool:
            return (
                self.loading.get(index) == epoch
                and partition.is_leader
                and partition.leader_epoch == epoch
            )

        while current():
            replay = new_replay()
            try:
                since_checkpoint = 0
                for batch in partition.log.iter_batches(None, partition.log.log_end_offset):
                    replay.apply_batch(batch)
                    since_checkpoint += len(batch.records)
                    if since_checkpoint >= LOAD_CHECKPOINT_RECORDS:
                        since_checkpoint = 0
                        await trio.lowlevel.checkpoint()
                        if not current():
                            return
            except StorageError as exc:
                log.warning("loading %s-%d failed, retrying: %s", self.topic.name, index, exc)
                await trio.sleep(LOAD_RETRY_S)
                continue
            del self.loading[index]
            self.owned[index] = epoch
            install(index, replay)
            return

    def status(self, key: str) -> ErrorCode:
        partitions = self.topic.partitions()
        if not partitions:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        index = partition_for(key, len(partitions))
        partition = partitions[index]
        if not partition.is_leader:
            return ErrorCode.NOT_COORDINATOR
        if self.owned.get(index) != partition.leader_epoch:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def index_of(self, key: str) -> int | None:
        """The partition of ``key``, or None without the topic."""
        count = len(self.topic.partitions())
        return partition_for(key, count) if count else None
