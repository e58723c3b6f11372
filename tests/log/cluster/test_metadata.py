"""Cluster metadata: records round-trip, apply in order to an image that refuses
contradictions, and the controller's decisions (placement, election, fencing)."""

from __future__ import annotations

import re

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
    assign_replicas,
    check_replica_assignment,
    decode,
    elect_leader,
    encode,
    fence_changes,
    place_replicas,
)


def cluster(brokers: int = 3, unclean: bool = False) -> MetadataImage:
    image = MetadataImage()
    for broker in range(1, brokers + 1):
        image.apply(RegisterBroker(broker, 1, "127.0.0.1", 9000 + broker))
        image.apply(UnfenceBroker(broker, 1))
    placed = place_replicas(image.live_brokers(), 3, 3)
    configs = {"unclean.leader.election.enable": "true"} if unclean else {}
    assignments = tuple(PartitionAssignment(r, r, r[0]) for r in placed)
    image.apply(CreateTopic("orders", "id-1", assignments, configs))
    return image


def test_records_round_trip_through_their_encoding() -> None:
    records = [
        RegisterBroker(1, 7, "h", 9092, rack="a"),
        FenceBroker(1, 7),
        UnfenceBroker(1, 7),
        CreateTopic("t", "x", (PartitionAssignment((1, 2), (1, 2), 1),), {"retention.ms": "5"}),
        PartitionChange("t", 0, leader=2, isr=(2,)),
        PartitionChange("t", 0),
    ]
    for record in records:
        assert decode(encode(record)) == record


@pytest.mark.parametrize("payload", [b"", b"{}", b'{"type": "nope"}', b'{"type": "fence_broker"}'])
def test_garbage_is_not_a_record(payload: bytes) -> None:
    with pytest.raises(MetadataError):
        decode(payload)


def test_placement_is_round_robin_and_leaders_spread() -> None:
    assert place_replicas([3, 1, 2], 4, 2) == [(1, 2), (2, 3), (3, 1), (1, 2)]
    with pytest.raises(MetadataError, match="replication factor 4"):
        place_replicas([1, 2, 3], 1, 4)


def test_changes_bump_the_epochs_and_contradictions_are_refused() -> None:
    image = cluster()
    image.apply(PartitionChange("orders", 0, isr=(1, 2)))
    state = image.partition("orders", 0)
    assert (state.leader, state.leader_epoch, state.partition_epoch) == (1, 0, 1)
    image.apply(PartitionChange("orders", 0, leader=2))
    state = image.partition("orders", 0)
    assert (state.leader, state.leader_epoch, state.partition_epoch) == (2, 1, 2)
    for bad in (
        PartitionChange("orders", 0, leader=3),  # not in the ISR
        PartitionChange("orders", 0, isr=(1, 4)),  # not a replica
        PartitionChange("orders", 0, isr=()),
        PartitionChange("nope", 0, leader=1),
        PartitionChange("orders", 9, leader=1),
    ):
        with pytest.raises(MetadataError):
            image.apply(bad)
    with pytest.raises(MetadataError, match="exists"):
        image.apply(CreateTopic("orders", "id-2", ()))
    with pytest.raises(MetadataError, match="epoch 2 is not registered"):
        image.apply(FenceBroker(1, 2))


def test_election_prefers_the_isr_in_replica_order() -> None:
    state = PartitionState((1, 2, 3), (2, 3), NO_LEADER, 4, 9)
    assert elect_leader(state, [1, 2, 3]) == 2
    assert elect_leader(state, [1, 3]) == 3
    assert elect_leader(state, [1]) == NO_LEADER
    assert elect_leader(state, [1], unclean=True) == 1


def test_fencing_moves_leaders_and_shrinks_isrs_but_keeps_the_last_member() -> None:
    image = cluster()
    changes = fence_changes(image, 1)
    assert changes == [
        PartitionChange("orders", 0, leader=2, isr=(2, 3)),
        PartitionChange("orders", 1, leader=2, isr=(2, 3)),
        PartitionChange("orders", 2, leader=3, isr=(3, 2)),
    ]
    image.apply(FenceBroker(1, 1))
    for change in changes:
        image.apply(change)
    image.apply(PartitionChange("orders", 0, isr=(2,)))
    image.apply(FenceBroker(2, 1))
    for change in fence_changes(image, 2):
        image.apply(change)
    # partition 0's ISR was 2 alone: it keeps it and has no leader (no unclean election)
    state = image.partition("orders", 0)
    assert (state.isr, state.leader) == ((2,), NO_LEADER)
    assert image.partition("orders", 1).leader == 3


def test_fencing_a_follower_leaves_its_live_leader_leading() -> None:
    image = cluster()
    image.apply(PartitionChange("orders", 0, leader=2))  # not the preferred leader, 1
    before = image.partition("orders", 0)
    assert before.replicas[0] == 1 and 3 in before.isr

    changes = [c for c in fence_changes(image, 3) if c.partition == 0]

    assert changes == [
        PartitionChange("orders", 0, leader=2, isr=tuple(b for b in before.isr if b != 3))
    ]


def test_an_unclean_election_makes_the_new_leader_the_isr() -> None:
    image = cluster(unclean=True)
    image.apply(PartitionChange("orders", 0, isr=(1,)))
    image.apply(FenceBroker(1, 1))
    [change, *_] = fence_changes(image, 1)
    assert change == PartitionChange("orders", 0, leader=2, isr=(2,))


# ---------------------------------------------------------------- explicit replica assignments


@pytest.mark.parametrize(
    ("assignment", "refusal"),
    [
        ([[1], []], "replica list is empty"),
        ([[1, 1]], "repeat a broker"),
        ([[1, 9]], "brokers [9] are not registered"),
        ([[1, 2], [3]], "partition 1 has 1 replicas"),
    ],
)
def test_an_explicit_assignment_kafka_refuses_is_refused(
    assignment: list[list[int]], refusal: str
) -> None:
    with pytest.raises(MetadataError, match=re.escape(refusal)):
        check_replica_assignment(assignment, [1, 2, 3])


def test_new_partitions_must_have_as_many_replicas_as_the_topic_has() -> None:
    check_replica_assignment([[3, 1]], [1, 2, 3], replicas_per_partition=2, first=4)
    with pytest.raises(MetadataError, match=re.escape("partition 4 has 1 replicas")):
        check_replica_assignment([[3]], [1, 2, 3], replicas_per_partition=2, first=4)


def test_an_assignment_leads_with_its_first_live_replica_and_refuses_one_with_none_live() -> None:
    assigned = assign_replicas([[2, 1, 3], [3, 2]], live={1, 3})
    assert assigned == (
        PartitionAssignment((2, 1, 3), (1, 3), 1),
        PartitionAssignment((3, 2), (3,), 3),
    )
    with pytest.raises(MetadataError, match="none of the brokers"):
        assign_replicas([[2]], live={1, 3})
