"""The verdict of a fault-injection run: what the log did with what it acknowledged.

A run (:mod:`fault_run`) writes unique values ``<producer>-<sequence>`` with
idempotent acks=all producers, each producer's sequence rising, and keeps a
:class:`History`: every acknowledgement, what a consumer group read and
committed, the log read back from offset 0 after healing, and each
replica's copy read from its node's files after a clean stop. :func:`check`
is pure: it turns a history into a :class:`Verdict` that counts each kind
of anomaly, in the spirit of Jepsen's Kafka checker:

lost
    an acknowledged value that is not in the log;
rewritten
    an acknowledged value found elsewhere than the offset it was acknowledged
    at, or an offset holding a value no producer sent;
duplicated
    a value present more than once (each extra copy counts);
reordered
    a value whose producer had already written a later sequence number
    earlier in the same partition;
gaps
    offsets missing between a partition's log start and its end;
divergent
    an offset where a replica's copy differs from the log (a different
    value, or missing below the log end, or extra beyond it);
dirty_reads
    a value a group consumer read at an offset that holds another value in
    the final log (it read something the log later took back);
commits_backwards
    a committed offset, confirmed or reported, below one confirmed or reported
    before it (one consumer commits, so its offsets only grow);
commits_past_end
    a committed offset beyond the partition's log end;
spurious_fences
    a broker fenced by the controller although the nemesis had not touched it;
unhealed
    rounds after which the cluster did not heal in time.

Values sent but never acknowledged (a delivery error, or a run that ended)
are indeterminate: present or absent, neither counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

Records = list[tuple[int, bytes]]
"""One partition's records in log order: (offset, value)."""

EXAMPLES_MAX = 5
"""Examples kept per anomaly kind, for the failure message."""


@dataclass
class History:
    """What a run observed; see the module docstring."""

    acknowledged: list[tuple[int, int, bytes]] = field(default_factory=list)
    """(partition, offset, value) per acknowledgement, in the order they arrived."""
    sent: set[bytes] = field(default_factory=set)
    """Every value a producer handed to its client."""
    log: dict[int, Records] = field(default_factory=dict)
    """Each partition read from offset 0 to its end after healing."""
    log_start: dict[int, int] = field(default_factory=dict)
    """Each partition's log start offset when it was read (0 unless records were deleted)."""
    replicas: dict[int, dict[int, Records]] = field(default_factory=dict)
    """node id → partition → that node's copy, read from its files after a clean stop."""
    group_reads: list[tuple[int, int, bytes]] = field(default_factory=list)
    """(partition, offset, value) per record a group consumer was given."""
    commits: list[tuple[str, int, int]] = field(default_factory=list)
    """("confirmed" or "reported", partition, offset) in time order: each commit the
    coordinator confirmed, and each committed offset it reported when asked."""
    spurious_fences: list[str] = field(default_factory=list)
    """One line per broker fenced although untouched by the nemesis."""
    unhealed_rounds: list[str] = field(default_factory=list)
    """One line per round after which the cluster did not heal."""


@dataclass
class Verdict:
    """Anomaly counts (all zero for a log that kept its promises) with a few examples each."""

    lost: int = 0
    rewritten: int = 0
    duplicated: int = 0
    reordered: int = 0
    gaps: int = 0
    divergent: int = 0
    dirty_reads: int = 0
    commits_backwards: int = 0
    commits_past_end: int = 0
    spurious_fences: int = 0
    unhealed: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.counts().values())

    def counts(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "examples"}

    def add(self, kind: str, example: str, count: int = 1) -> None:
        setattr(self, kind, getattr(self, kind) + count)
        kept = self.examples.setdefault(kind, [])
        if len(kept) < EXAMPLES_MAX:
            kept.append(example)

    def merge(self, other: Verdict) -> None:
        for kind, count in other.counts().items():
            setattr(self, kind, getattr(self, kind) + count)
        for kind, examples in other.examples.items():
            kept = self.examples.setdefault(kind, [])
            kept.extend(examples[: EXAMPLES_MAX - len(kept)])

    def describe(self) -> str:
        counts = ", ".join(
            f"{count} {kind.replace('_', ' ')}" for kind, count in self.counts().items()
        )
        lines = [counts]
        for kind, examples in sorted(self.examples.items()):
            lines += [f"  {kind}: {example}" for example in examples]
        return "\n".join(lines)


def check(history: History) -> Verdict:
    """The verdict on ``history``; see the module docstring for each count."""
    verdict = Verdict()
    at = {(p, offset): value for p, records in history.log.items() for offset, value in records}
    _check_acknowledged(history, at, verdict)
    _check_log(history, verdict)
    _check_replicas(history, verdict)
    _check_group(history, at, verdict)
    for line in history.spurious_fences:
        verdict.add("spurious_fences", line)
    for line in history.unhealed_rounds:
        verdict.add("unhealed", line)
    return verdict


def _check_acknowledged(
    history: History, at: Mapping[tuple[int, int], bytes], verdict: Verdict
) -> None:
    where: dict[bytes, list[tuple[int, int]]] = {}
    for partition, records in history.log.items():
        for offset, value in records:
            where.setdefault(value, []).append((partition, offset))
    for partition, offset, value in history.acknowledged:
        found = where.get(value)
        if not found:
            verdict.add("lost", f"{value!r} acknowledged at {partition}/{offset}")
        elif (partition, offset) not in found:
            held = at.get((partition, offset))
            verdict.add(
                "rewritten",
                f"{value!r} acknowledged at {partition}/{offset}, found at {found}; "
                f"that offset holds {held!r}",
            )
    for (partition, offset), value in at.items():
        if value not in history.sent:
            verdict.add("rewritten", f"{partition}/{offset} holds {value!r}, which nobody sent")


def _check_log(history: History, verdict: Verdict) -> None:
    copies = Counter(value for records in history.log.values() for _, value in records)
    for value, count in copies.items():
        if count > 1:
            verdict.add("duplicated", f"{value!r} appears {count} times", count - 1)
    for partition, records in sorted(history.log.items()):
        _check_order(partition, records, verdict)
        _check_gaps(partition, records, history.log_start.get(partition, 0), verdict)


def _check_order(partition: int, records: Records, verdict: Verdict) -> None:
    latest: dict[bytes, int] = {}
    for offset, value in records:
        producer, sequence = split_value(value)
        if producer is None:
            continue
        before = latest.get(producer, -1)
        if sequence <= before:
            verdict.add(
                "reordered",
                f"{value!r} at {partition}/{offset} after sequence {before} of the same producer",
            )
        latest[producer] = max(before, sequence)


def _check_gaps(partition: int, records: Records, start: int, verdict: Verdict) -> None:
    expected = start
    for offset, _ in records:
        if offset > expected:
            verdict.add(
                "gaps", f"{partition}: offsets {expected}-{offset - 1} missing", offset - expected
            )
        elif offset < expected:
            verdict.add("gaps", f"{partition}: offset {offset} read again after {expected - 1}")
        expected = max(expected, offset + 1)


def _check_replicas(history: History, verdict: Verdict) -> None:
    for node, partitions in sorted(history.replicas.items()):
        for partition, copy in sorted(partitions.items()):
            log = dict(history.log.get(partition, []))
            start = history.log_start.get(partition, 0)
            end = max(log, default=start - 1) + 1
            held = dict(copy)
            for offset, value in log.items():
                if held.get(offset) != value:
                    verdict.add(
                        "divergent",
                        f"node {node} {partition}/{offset}: {held.get(offset)!r}, log {value!r}",
                    )
            for offset, value in held.items():
                if offset >= end:
                    verdict.add(
                        "divergent",
                        f"node {node} {partition}/{offset}: {value!r} past the end {end}",
                    )


def _check_group(history: History, at: Mapping[tuple[int, int], bytes], verdict: Verdict) -> None:
    for partition, offset, value in history.group_reads:
        if at.get((partition, offset)) != value:
            held = at.get((partition, offset))
            verdict.add(
                "dirty_reads", f"read {value!r} at {partition}/{offset}; the log holds {held!r}"
            )
    ends = {p: max((o for o, _ in records), default=-1) + 1 for p, records in history.log.items()}
    highest: dict[int, int] = {}
    for kind, partition, offset in history.commits:
        end = ends.get(partition, 0)
        if offset > end:
            verdict.add("commits_past_end", f"{partition}: {kind} {offset}, log end {end}")
        before = highest.get(partition, -1)
        if offset < before:
            verdict.add("commits_backwards", f"{partition}: {kind} {offset} after {before}")
        highest[partition] = max(before, offset)


def split_value(value: bytes) -> tuple[bytes | None, int]:
    """``b"<producer>-<sequence>"`` → (producer, sequence); (None, -1) for anything else."""
    producer, _, number = value.rpartition(b"-")
    if not producer or not number.isdigit():
        return None, -1
    return producer, int(number)
