"""``platform erase``: empty records of a topic in place, on every replica.

An erased record keeps its offset, timestamp and key; its value becomes null and its
headers the one ``eventplatform.erased``, so every reader from then on (consumers,
projection runners, Spark replays) finds nothing of what it held. The erasure goes
through this log's own EraseRecords API, with the SDK's wire client
(:class:`eventplatform.events.log_client.LogClient`), so it needs DELETE on the topic
and a cluster of this platform's brokers.

Before anything is erased, the topic, its partitions and every offset are checked
against the partitions' high watermarks, so a mistyped offset erases nothing. Reading
the offsets to erase (:func:`parse_offset_lines`, :func:`offsets_by_partition`) is
pure; the shell only asks the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from eventplatform.tools.arguments import ClusterSettings
from eventplatform.tools.errors import InvalidInputError, KafkaRequestError
from eventplatform.tools.kafka_clients import (
    LATEST,
    admin_client,
    partition_offsets,
    topic_partition_ids,
)

Echo = Callable[[str], Any]
OFFSETS_SHOWN_MAX = 5
"""Offsets past the end named in an error, before the rest is counted."""


def parse_offset_lines(lines: Iterable[str], source: str) -> list[tuple[int, int]]:
    """``PARTITION OFFSET`` pairs, one a line; blank lines and ``#`` comments are skipped.

    A line of any other shape is refused with its number, so a file that is not a list
    of positions erases nothing.
    """
    pairs = []
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        if len(fields) != 2 or not all(field.isdigit() for field in fields):
            raise InvalidInputError(
                f"{source}, line {number}: {line.strip()!r} is not 'PARTITION OFFSET'"
            )
        pairs.append((int(fields[0]), int(fields[1])))
    return pairs


def offsets_by_partition(
    partition: int | None, offsets: Sequence[int], pairs: Sequence[tuple[int, int]]
) -> dict[int, list[int]]:
    """The offsets to erase of each partition, sorted and without repeats: ``offsets``
    of ``partition`` and the ``(partition, offset)`` pairs of a file together."""
    if offsets and partition is None:
        raise InvalidInputError("--offset needs --partition")
    if partition is not None and not offsets:
        raise InvalidInputError("--partition needs at least one --offset")
    named = [(partition, offset) for offset in offsets if partition is not None]
    wanted: dict[int, set[int]] = {}
    for index, offset in [*named, *pairs]:
        wanted.setdefault(index, set()).add(offset)
    if not wanted:
        raise InvalidInputError("name the records: --partition P --offset O, or --offsets-from")
    return {index: sorted(found) for index, found in sorted(wanted.items())}


def past_the_end(
    topic: str, wanted: Mapping[int, Sequence[int]], ends: Mapping[int, int]
) -> str | None:
    """Why some offsets cannot be erased (they are at or past their partition's high
    watermark), or None when all lie in the log."""
    beyond = [
        (index, offset)
        for index, offsets in wanted.items()
        for offset in offsets
        if offset >= ends[index]
    ]
    if not beyond:
        return None
    shown = ", ".join(
        f"{topic}[{index}] offset {offset}" for index, offset in beyond[:OFFSETS_SHOWN_MAX]
    )
    more = len(beyond) - OFFSETS_SHOWN_MAX
    rest = f" and {more} more" if more > 0 else ""
    limits = ", ".join(f"{topic}[{index}] ends at {ends[index]}" for index in sorted(wanted))
    return f"{shown}{rest} past the end of the log ({limits}); nothing was erased"


def erase_records(
    cluster: ClusterSettings,
    topic: str,
    wanted: Mapping[int, Sequence[int]],
    *,
    timeout_s: float,
    echo: Echo,
) -> int:
    """Erase ``wanted`` offsets of ``topic`` partition by partition, printing each
    partition's count; the total erased.

    Raises ToolError, before erasing anything, for a topic that does not exist, a
    partition it does not have and offsets past a partition's end; and for the broker's
    refusals (KafkaRequestError), after which the partitions printed before are erased.
    """
    from eventplatform.events.log_client import ERASE_ATTEMPTS, LogClient, LogClientError

    admin = admin_client(cluster)
    partitions = topic_partition_ids(admin, cluster, topic)
    unknown = sorted(set(wanted).difference(partitions))
    if unknown:
        raise InvalidInputError(
            f"topic {topic!r} has {len(partitions)} partitions: no partition "
            f"{', '.join(map(str, unknown))}; nothing was erased"
        )
    ends = partition_offsets(admin, cluster, topic, sorted(wanted), LATEST)
    problem = past_the_end(topic, wanted, ends)
    if problem is not None:
        raise InvalidInputError(problem)
    connection = cluster.bootstrap if cluster.client is None else cluster.client
    total = 0
    with LogClient(
        connection,
        client_id="eventplatform-cli",
        request_timeout_s=cluster.request_timeout_s,
        attempts=ERASE_ATTEMPTS,
    ) as client:
        for index, offsets in wanted.items():
            try:
                answer = client.erase_records(
                    topic, index, offsets, timeout_ms=round(timeout_s * 1000)
                )
            except LogClientError as exc:
                name = exc.error.name if exc.error is not None else None
                raise KafkaRequestError(f"cannot erase records: {exc}", code=name) from exc
            erased = int(answer.body["erased"])
            total += erased
            echo(_erased_line(topic, index, erased, len(offsets)))
    return total


def _erased_line(topic: str, partition: int, erased: int, named: int) -> str:
    line = f"erased {erased} record{'' if erased == 1 else 's'} from {topic}[{partition}]"
    if erased < named:
        line += f" ({named - erased} of the offsets lie below the log start: deleted already)"
    return line
