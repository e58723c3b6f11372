"""Reassignment in the metadata: the records that start, complete and cancel a move of a
partition's replicas, and the pure decisions that build them."""

from __future__ import annotations

import pytest

from eventplatform.log.cluster.metadata import (
    NO_LEADER,
    CreateTopic,
    FenceBroker,
    MetadataError,
    MetadataImage,
    PartitionAssignment,
    PartitionChange,
    PartitionState,
    RegisterBroker,
    UnfenceBroker,
    decode,
    encode,
)
from eventplatform.log.cluster.reassignment import (
    cancel_reassignment,
    complete_reassignment,
    reassignment_completions,
    reassignments,
    start_reassignment,
)


def cluster(brokers: int = 4) -> MetadataImage:
    """``orders`` has one partition on brokers 1, 2, 3, led by 1; broker 4 holds nothing."""
    image = MetadataImage()
    for broker in range(1, brokers + 1):
        image.apply(RegisterBroker(broker, 1, "127.0.0.1", 9000 + broker))
        image.apply(UnfenceBroker(broker, 1))
    image.apply(CreateTopic("orders", "id-1", (PartitionAssignment((1, 2, 3), (1, 2, 3), 1),)))
    return image


def start(image: MetadataImage, target: tuple[int, ...]) -> PartitionState:
    change = start_reassignment(image, "orders", 0, target)
    assert change is not None
    image.apply(change)
    return image.partition("orders", 0)


def test_the_new_fields_round_trip_and_old_records_still_decode() -> None:
    change = PartitionChange(
        "t", 0, replicas=(1, 2, 3, 4), adding=(4,), removing=(1,), target=(4, 2, 3)
    )
    assert decode(encode(change)) == change
    cleared = PartitionChange("t", 0, replicas=(4, 2, 3), adding=(), removing=(), target=())
    assert decode(encode(cleared)) == cleared
    # a record written before reassignment existed keeps the fields unset
    old = b'{"type": "partition_change", "topic": "t", "partition": 0, "leader": 2}'
    assert decode(old) == PartitionChange("t", 0, leader=2)
    assert PartitionState((1,), (1,), 1, 0, 0).reassigning is False


def test_starting_makes_the_replicas_the_union_with_the_new_ones_last_outside_the_isr() -> None:
    image = cluster()
    state = start(image, (4, 2, 3))
    assert state.replicas == (1, 2, 3, 4)
    assert state.isr == (1, 2, 3)
    assert state.leader == 1
    assert (state.adding, state.removing, state.target) == ((4,), (1,), (4, 2, 3))
    assert state.original_replicas == (1, 2, 3)
    assert [(t, p) for t, p, _ in reassignments(image)] == [("orders", 0)]
    # not complete while broker 4 is out of the ISR
    assert complete_reassignment(state, "orders", 0, image.live_brokers()) is None
    assert reassignment_completions(image) == []


def test_completing_takes_the_target_order_shrinks_the_isr_and_moves_the_leader() -> None:
    image = cluster()
    start(image, (4, 2, 3))
    image.apply(PartitionChange("orders", 0, isr=(1, 2, 3, 4)))
    before = image.partition("orders", 0)
    [change] = reassignment_completions(image)
    image.apply(change)
    state = image.partition("orders", 0)
    assert state.replicas == (4, 2, 3)
    assert state.isr == (4, 2, 3)
    assert state.leader == 4  # the old leader left: the target's first replica leads
    assert state.leader_epoch == before.leader_epoch + 1
    assert not state.reassigning
    assert (state.adding, state.removing, state.target) == ((), (), ())
    assert reassignments(image) == []


def test_a_leader_that_stays_keeps_leading_and_its_epoch() -> None:
    image = cluster()
    start(image, (1, 4))
    image.apply(PartitionChange("orders", 0, isr=(1, 2, 3, 4)))
    epoch = image.partition("orders", 0).leader_epoch
    [change] = reassignment_completions(image)
    image.apply(change)
    state = image.partition("orders", 0)
    assert (state.replicas, state.isr, state.leader) == ((1, 4), (1, 4), 1)
    assert state.leader_epoch == epoch


def test_a_new_leader_comes_from_the_isr_and_must_be_live() -> None:
    image = cluster()
    start(image, (4, 2, 3))
    image.apply(PartitionChange("orders", 0, isr=(1, 3, 4)))  # 2 fell behind
    state = image.partition("orders", 0)
    change = complete_reassignment(state, "orders", 0, live=[1, 3])  # 4 is not live
    assert change is not None
    assert (change.leader, change.isr, change.replicas) == (3, (4, 3), (4, 2, 3))
    assert complete_reassignment(state, "orders", 0, live=[1]) is None


def test_cancelling_returns_to_the_original_replicas() -> None:
    image = cluster()
    start(image, (4, 2, 3))
    image.apply(PartitionChange("orders", 0, isr=(1, 2, 3, 4)))
    state = image.partition("orders", 0)
    image.apply(cancel_reassignment(state, "orders", 0, image.live_brokers()))
    state = image.partition("orders", 0)
    assert (state.replicas, state.isr, state.leader) == ((1, 2, 3), (1, 2, 3), 1)
    assert not state.reassigning
    with pytest.raises(MetadataError, match="not being reassigned"):
        cancel_reassignment(state, "orders", 0, image.live_brokers())


def test_cancelling_when_only_new_replicas_are_in_sync_is_refused() -> None:
    image = cluster()
    start(image, (4, 2, 3))
    image.apply(PartitionChange("orders", 0, isr=(1, 2, 3, 4)))
    image.apply(PartitionChange("orders", 0, leader=4, isr=(4,)))
    state = image.partition("orders", 0)
    with pytest.raises(MetadataError, match="none of the original replicas"):
        cancel_reassignment(state, "orders", 0, image.live_brokers())


def test_a_leader_that_is_only_a_new_replica_hands_back_on_cancel() -> None:
    image = cluster()
    start(image, (4, 2, 3))
    image.apply(PartitionChange("orders", 0, isr=(1, 2, 3, 4)))
    image.apply(FenceBroker(1, 1))
    image.apply(PartitionChange("orders", 0, leader=4, isr=(2, 3, 4)))
    change = cancel_reassignment(image.partition("orders", 0), "orders", 0, image.live_brokers())
    assert (change.replicas, change.isr, change.leader) == ((1, 2, 3), (2, 3), 2)


@pytest.mark.parametrize(
    ("topic", "partition", "target", "message"),
    [
        ("nope", 0, (1, 2), "no partition nope/0"),
        ("orders", 5, (1, 2), "no partition orders/5"),
        ("orders", 0, (), "empty"),
        ("orders", 0, (1, 1, 2), "repeat"),
        ("orders", 0, (1, 9), r"brokers \[9\] are not registered"),
    ],
)
def test_bad_targets_are_refused(
    topic: str, partition: int, target: tuple[int, ...], message: str
) -> None:
    image = cluster()
    with pytest.raises(MetadataError, match=message):
        start_reassignment(image, topic, partition, target)


def test_a_partition_already_moving_is_refused_a_new_target() -> None:
    image = cluster()
    start(image, (4, 2, 3))
    with pytest.raises(MetadataError, match="already being reassigned to \\[4, 2, 3\\]"):
        start_reassignment(image, "orders", 0, (1, 2))


def test_the_same_replicas_change_nothing_and_a_new_order_applies_at_once() -> None:
    image = cluster()
    assert start_reassignment(image, "orders", 0, (1, 2, 3)) is None
    change = start_reassignment(image, "orders", 0, (3, 1, 2))
    assert change == PartitionChange("orders", 0, replicas=(3, 1, 2))


def test_removing_only_completes_at_once() -> None:
    image = cluster()
    start(image, (2, 3))
    [change] = reassignment_completions(image)
    image.apply(change)
    state = image.partition("orders", 0)
    assert (state.replicas, state.isr, state.leader) == ((2, 3), (2, 3), 2)


def test_the_image_refuses_inconsistent_reassignment_fields() -> None:
    image = cluster()
    with pytest.raises(MetadataError, match="no target"):
        image.apply(PartitionChange("orders", 0, adding=(3,)))
    with pytest.raises(MetadataError, match="is not the replicas"):
        image.apply(PartitionChange("orders", 0, target=(1, 2), removing=()))
    assert image.partition("orders", 0).leader != NO_LEADER
