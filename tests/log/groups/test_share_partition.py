"""The share-partition state machine: acquisition, acknowledgement, locks, delivery
counts, the window's bound, and the state it leaves in the store."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from eventplatform.log.groups.share_partition import (
    AckBatch,
    Acquired,
    RecordState,
    SharePartition,
    Snapshot,
    StateBatch,
)
from eventplatform.log.protocol import ErrorCode

ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0


def test_records_are_acquired_once_until_released() -> None:
    share = SharePartition(10)
    assert share.acquire("a", 10, 14, max_records=100, now_ms=0) == [Acquired(10, 14, 1)]
    assert share.acquire("b", 10, 14, max_records=100, now_ms=0) == []
    assert share.acknowledge("a", [AckBatch(10, 11, (RELEASE,))]) is ErrorCode.NONE
    assert share.acquire("b", 10, 14, max_records=100, now_ms=0) == [Acquired(10, 11, 2)]
    assert share.holder(10) == "b"


def test_accepting_a_prefix_moves_the_start_offset() -> None:
    share = SharePartition(0)
    share.acquire("a", 0, 4, max_records=100, now_ms=0)
    assert share.acknowledge("a", [AckBatch(1, 2, (ACCEPT,))]) is ErrorCode.NONE
    assert share.start_offset == 0
    assert share.acknowledge("a", [AckBatch(0, 0, (REJECT,))]) is ErrorCode.NONE
    assert share.start_offset == 3
    assert share.state_of(2) is RecordState.ARCHIVED  # settled, below the window
    assert share.state_of(3) is RecordState.ACQUIRED


def test_per_offset_types_apply_each_to_its_record() -> None:
    share = SharePartition(0)
    share.acquire("a", 0, 3, max_records=100, now_ms=0)
    batch = AckBatch(0, 3, (ACCEPT, RELEASE, GAP, REJECT))
    assert share.acknowledge("a", [batch]) is ErrorCode.NONE
    assert [share.state_of(o) for o in range(1, 4)] == [
        RecordState.AVAILABLE,
        RecordState.ARCHIVED,
        RecordState.ARCHIVED,
    ]
    assert share.start_offset == 1


def test_an_acknowledgement_of_what_the_member_does_not_hold_changes_nothing() -> None:
    share = SharePartition(0)
    share.acquire("a", 0, 3, max_records=100, now_ms=0)
    good, foreign = AckBatch(0, 1, (ACCEPT,)), AckBatch(2, 5, (ACCEPT,))
    assert share.acknowledge("a", [good, foreign]) is ErrorCode.INVALID_RECORD_STATE
    assert share.acknowledge("b", [good]) is ErrorCode.INVALID_RECORD_STATE
    assert share.start_offset == 0 and share.state_of(0) is RecordState.ACQUIRED


def test_malformed_batches_are_invalid_requests() -> None:
    share = SharePartition(0)
    share.acquire("a", 0, 3, max_records=100, now_ms=0)
    for batch in (
        AckBatch(2, 1, (ACCEPT,)),
        AckBatch(0, 3, ()),
        AckBatch(0, 3, (ACCEPT, ACCEPT)),
        AckBatch(0, 0, (9,)),
    ):
        assert share.acknowledge("a", [batch]) is ErrorCode.INVALID_REQUEST
    twice = [AckBatch(0, 1, (ACCEPT,)), AckBatch(1, 1, (ACCEPT,))]
    assert share.acknowledge("a", twice) is ErrorCode.INVALID_REQUEST
    assert share.state_of(0) is RecordState.ACQUIRED


def test_a_lock_that_runs_out_makes_the_record_available_again() -> None:
    share = SharePartition(0)
    share.acquire("a", 0, 1, max_records=100, now_ms=1_000, lock_duration_ms=500)
    assert share.next_deadline_ms() == 1_500
    assert not share.advance(1_499)
    assert share.advance(1_500)
    assert share.acquire("b", 0, 1, max_records=100, now_ms=2_000) == [Acquired(0, 1, 2)]
    assert share.acknowledge("a", [AckBatch(0, 0, (ACCEPT,))]) is ErrorCode.INVALID_RECORD_STATE


def test_a_record_delivered_the_limit_of_times_is_archived_when_released() -> None:
    share = SharePartition(0, delivery_count_limit=3)
    for delivery in range(1, 4):
        assert share.acquire("a", 0, 0, max_records=1, now_ms=0) == [Acquired(0, 0, delivery)]
        share.acknowledge("a", [AckBatch(0, 0, (RELEASE,))])
    assert share.state_of(0) is RecordState.ARCHIVED
    assert share.start_offset == 1


def test_a_member_that_leaves_releases_what_it_holds() -> None:
    share = SharePartition(0)
    share.acquire("a", 0, 1, max_records=100, now_ms=0)
    share.acquire("b", 2, 3, max_records=100, now_ms=0)
    assert share.release_member("a")
    assert [share.state_of(o) for o in range(4)] == [RecordState.AVAILABLE] * 2 + [
        RecordState.ACQUIRED
    ] * 2


def test_max_records_and_the_window_bound_limit_acquisition() -> None:
    share = SharePartition(0, max_in_flight=5)
    assert share.acquire("a", 0, 9, max_records=3, now_ms=0) == [Acquired(0, 2, 1)]
    assert share.acquire("a", 0, 9, max_records=10, now_ms=0) == [Acquired(3, 4, 1)]
    assert share.next_acquirable(log_end=10) is None  # full
    share.acknowledge("a", [AckBatch(0, 1, (ACCEPT,))])
    assert share.next_acquirable(log_end=10) == 5


def test_new_records_are_taken_only_in_order() -> None:
    share = SharePartition(0)
    assert share.acquire("a", 3, 5, max_records=10, now_ms=0) == []  # 0-2 never seen
    assert share.next_acquirable(log_end=6) == 0


def test_records_the_log_no_longer_holds_are_settled() -> None:
    share = SharePartition(0)
    share.acquire("a", 0, 4, max_records=10, now_ms=0)
    share.move_log_start(3)
    assert share.start_offset == 3 and share.end_offset == 5
    share.move_log_start(8)
    assert share.start_offset == share.end_offset == 8


def test_the_snapshot_keeps_settled_runs_and_acquired_records_as_available() -> None:
    share = SharePartition(0, state_epoch=4)
    share.acquire("a", 0, 5, max_records=10, now_ms=0)
    share.acknowledge("a", [AckBatch(1, 2, (ACCEPT,)), AckBatch(4, 4, (REJECT,))])
    assert share.snapshot() == Snapshot(
        4,
        0,
        (
            StateBatch(0, 0, RecordState.AVAILABLE, 1),
            StateBatch(1, 2, RecordState.ACKNOWLEDGED, 1),
            StateBatch(3, 3, RecordState.AVAILABLE, 1),
            StateBatch(4, 4, RecordState.ARCHIVED, 1),
            StateBatch(5, 5, RecordState.AVAILABLE, 1),
        ),
    )
    restored = SharePartition.restore(share.snapshot())
    assert restored.start_offset == 0 and restored.end_offset == 6
    assert restored.acquire("b", 0, 5, max_records=10, now_ms=0) == [
        Acquired(0, 0, 2),
        Acquired(3, 3, 2),
        Acquired(5, 5, 2),
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["acquire", "ack", "expire", "leave", "restore"]),
            st.sampled_from(["a", "b"]),
            st.integers(0, 30),
            st.integers(0, 5),
            st.sampled_from([ACCEPT, RELEASE, REJECT, GAP]),
        ),
        max_size=60,
    )
)
def test_no_record_is_held_twice_and_nothing_settled_comes_back(steps: list) -> None:
    """Whatever happens, a record is held by at most one member, a settled record is
    never handed out again, and the start offset never moves back."""
    share = SharePartition(0, delivery_count_limit=3, max_in_flight=20)
    settled: set[int] = set()
    now = 0
    for action, member, offset, span, kind in steps:
        now += 100
        start = share.start_offset
        if action == "acquire":
            for run in share.acquire(
                member, offset, offset + span, max_records=8, now_ms=now, lock_duration_ms=500
            ):
                for o in range(run.first_offset, run.last_offset + 1):
                    assert o not in settled
        elif action == "ack":
            held = [o for o in range(offset, offset + span + 1) if share.holder(o) == member]
            if held:
                batch = AckBatch(held[0], held[0], (kind,))
                assert share.acknowledge(member, [batch]) is ErrorCode.NONE
        elif action == "expire":
            share.advance(now)
        elif action == "leave":
            share.release_member(member)
        else:
            share = SharePartition.restore(
                share.snapshot(), delivery_count_limit=3, max_in_flight=20
            )
        assert share.start_offset >= start
        for o in range(share.start_offset, share.end_offset):
            if share.state_of(o) is RecordState.ACQUIRED:
                assert share.holder(o) in ("a", "b")
        settled |= {
            o
            for o in range(share.start_offset, share.end_offset)
            if share.state_of(o) in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
        }
