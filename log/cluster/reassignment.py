"""Reassigning a partition: the decisions on the metadata image.

**Reassignment** moves a partition to a target replica set in three
committed steps. :func:`start_reassignment` makes the replicas the union of
the current ones and the target (the new ones last) and records which
replicas are ``adding`` and which ``removing``; the adding replicas start
outside the ISR and join it as they catch up, like any follower.
:func:`complete_reassignment` is decided once every adding replica is in
the ISR: the replicas become the target (in its order), the ISR shrinks to
the target, and a leader outside the target hands over to the first target
replica in the ISR. :func:`cancel_reassignment` goes back to the original
replicas instead. A partition already being reassigned is refused a new
target until the current one completes or is cancelled. Because the state
is in the committed partition, any active controller can finish the work.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from eventplatform.log.cluster.metadata import (
    NO_LEADER,
    MetadataError,
    MetadataImage,
    PartitionChange,
    PartitionState,
    check_replica_list,
)


def start_reassignment(
    image: MetadataImage, topic: str, partition: int, target: Sequence[int]
) -> PartitionChange | None:
    """The change that starts moving ``topic``/``partition`` to the replicas ``target``;
    None when they already are. Raises MetadataError for a target that cannot be: an
    unknown partition, empty or repeated replicas, a broker never registered, or a
    partition already being reassigned (cancel that first).

    A target that only reorders the replicas takes effect at once; otherwise the replicas
    become the current ones followed by the new ones, recorded as adding."""
    state = image.partition(topic, partition)
    wanted = tuple(target)
    label = f"{topic}/{partition}"
    check_replica_list(label, wanted, image.brokers)
    if state.reassigning:
        raise MetadataError(
            f"{label} is already being reassigned to {list(state.target)}; "
            "wait for it or cancel it first"
        )
    if wanted == state.replicas:
        return None
    adding = tuple(r for r in wanted if r not in state.replicas)
    removing = tuple(r for r in state.replicas if r not in wanted)
    if not adding and not removing:
        return PartitionChange(topic, partition, replicas=wanted)
    return PartitionChange(
        topic,
        partition,
        replicas=state.replicas + adding,
        adding=adding,
        removing=removing,
        target=wanted,
    )


def complete_reassignment(
    state: PartitionState, topic: str, partition: int, live: Iterable[int]
) -> PartitionChange | None:
    """The change that completes the partition's reassignment, once every adding replica is
    in the ISR: the replicas become the target, the ISR what of it is in the target, and a
    leader outside the target hands over to the first live target replica in the ISR.
    None while that cannot be yet (or no reassignment is in progress)."""
    if not state.reassigning or not set(state.adding) <= set(state.isr):
        return None
    target = state.target
    isr = tuple(r for r in target if r in state.isr)
    leader = state.leader
    if leader not in target:
        alive = set(live)
        leader = next((r for r in isr if r in alive), NO_LEADER)
        if leader == NO_LEADER:
            return None
    return PartitionChange(
        topic, partition, leader=leader, isr=isr, replicas=target, adding=(), removing=(), target=()
    )


def cancel_reassignment(
    state: PartitionState, topic: str, partition: int, live: Iterable[int]
) -> PartitionChange:
    """The change that returns the partition to its replicas before the reassignment;
    the adding replicas leave. Raises MetadataError when none is in progress, or when no
    original replica is in the ISR (cancelling would lose acknowledged records)."""
    label = f"{topic}/{partition}"
    if not state.reassigning:
        raise MetadataError(f"{label} is not being reassigned")
    original = state.original_replicas
    isr = tuple(r for r in original if r in state.isr)
    if not isr:
        raise MetadataError(
            f"{label}: none of the original replicas {list(original)} is in the ISR "
            f"{list(state.isr)}; cancelling now would lose records"
        )
    leader = state.leader
    if leader not in original:
        alive = set(live)
        leader = next((r for r in isr if r in alive), NO_LEADER)
    return PartitionChange(
        topic,
        partition,
        leader=leader,
        isr=isr,
        replicas=original,
        adding=(),
        removing=(),
        target=(),
    )


def reassignments(image: MetadataImage) -> list[tuple[str, int, PartitionState]]:
    """Every partition being reassigned, by topic and partition."""
    return [
        (name, number, state)
        for name, topic in sorted(image.topics.items())
        for number, state in enumerate(topic.partitions)
        if state.reassigning
    ]


def reassignment_completions(image: MetadataImage) -> list[PartitionChange]:
    """The reassignments that can complete now (:func:`complete_reassignment`)."""
    live = image.live_brokers()
    changes = []
    for name, number, state in reassignments(image):
        change = complete_reassignment(state, name, number, live)
        if change is not None:
            changes.append(change)
    return changes
