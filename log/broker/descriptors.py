"""The broker's file-descriptor budget: new partitions may not take what connections need.

Every partition a broker holds keeps files open for as long as it is held
(see :data:`DESCRIPTORS_PER_NEW_PARTITION`), and every client connection is
one more descriptor. A process over its ``RLIMIT_NOFILE`` can neither accept
a connection nor roll a segment, so a CreateTopics or CreatePartitions that
would leave too little for connections is refused before anything is created
(POLICY_VIOLATION, with the figures in the error message).

The budget is the soft open-file limit, minus the descriptors open now
(counted, not estimated), minus a reserve: :data:`DESCRIPTORS_RESERVED_MIN`
for the broker's own short-lived files (checkpoints, flushes, sendfile
duplicates, directory fsyncs) plus one per connection ``max.connections``
allows, but at most a quarter of the limit.
"""

from __future__ import annotations

import errno
import math
import resource
from dataclasses import dataclass
from pathlib import Path

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.topics import TopicError

DESCRIPTORS_PER_NEW_PARTITION = 4
"""What one new partition (one segment) holds open: its ``.lock``, the ``.log``,
and the memory maps of the ``.index`` and ``.timeindex`` (each keeps a duplicate
descriptor of its file)."""
DESCRIPTORS_FOR_ENTITY_VERSIONS = 2
"""What a partition of a topic with entity versions holds open besides: the versions'
database and its write-ahead log."""
DESCRIPTORS_RESERVED_MIN = 128
CONNECTION_RESERVE_SHARE_MAX = 4
"""At most ``limit // 4`` descriptors are set aside for future connections."""
_DESCRIPTOR_DIRECTORIES = ("/proc/self/fd", "/dev/fd")


@dataclass(frozen=True, slots=True)
class DescriptorBudget:
    """The figures behind a decision, in descriptors."""

    limit: int
    in_use: int
    reserved: int

    @property
    def free(self) -> int:
        return max(0, self.limit - self.in_use - self.reserved)

    def partitions_free(self, each: int = DESCRIPTORS_PER_NEW_PARTITION) -> int:
        return self.free // each


def open_files_limit() -> int:
    """The soft ``RLIMIT_NOFILE`` (an unlimited one counts as the largest int32)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 2**31 - 1 if soft == resource.RLIM_INFINITY else soft


def descriptors_in_use() -> int:
    """How many descriptors the process has open now (the listing's own excluded). A
    process with no descriptor left to list them with has its whole limit open."""
    for directory in _DESCRIPTOR_DIRECTORIES:
        try:
            return sum(1 for _ in Path(directory).iterdir()) - 1
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                return open_files_limit()
            continue
    raise RuntimeError("this platform lists its open descriptors in neither /proc nor /dev/fd")


def current_budget(max_connections: int) -> DescriptorBudget:
    limit = open_files_limit()
    connections = min(max_connections, limit // CONNECTION_RESERVE_SHARE_MAX)
    reserved = DESCRIPTORS_RESERVED_MIN + connections
    return DescriptorBudget(limit, descriptors_in_use(), reserved)


def check_new_partitions(
    count: int, *, max_connections: int, each: int = DESCRIPTORS_PER_NEW_PARTITION
) -> None:
    """Raise TopicError (POLICY_VIOLATION) when ``count`` more partitions held here, of
    ``each`` descriptors, would leave fewer descriptors than the reserve."""
    budget = current_budget(max_connections)
    if count <= budget.partitions_free(each):
        return
    raise TopicError(
        ErrorCode.POLICY_VIOLATION,
        f"{count} new partitions on this broker need about "
        f"{count * each} file descriptors "
        f"({each} each), but of its open-file limit of {budget.limit} "
        f"{budget.in_use} are in use and {budget.reserved} are kept for connections and "
        f"its own files: at most {budget.partitions_free(each)} more partitions fit. "
        "Raise the broker's open-file limit (ulimit -n) or ask for fewer partitions",
    )


def partitions_held_here(partitions: int, replication_factor: int, brokers: int) -> int:
    """How many of ``partitions`` new partitions one of ``brokers`` brokers holds when the
    controller spreads ``replication_factor`` replicas of each round-robin."""
    brokers = max(1, brokers)
    replicas = min(max(1, replication_factor), brokers)
    return math.ceil(partitions * replicas / brokers)
