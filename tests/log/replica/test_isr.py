"""The leader's view of its followers: caught-up tracking, ISR shrink and expand, the high
watermark, acks=all and min.insync.replicas."""

from __future__ import annotations

from eventplatform.log.replica.isr import LeaderReplicas

LAG_MS = 1_000


def leader(isr: tuple[int, ...] = (1, 2, 3), min_insync: int = 2) -> LeaderReplicas:
    return LeaderReplicas(
        1,
        (1, 2, 3),
        isr,
        high_watermark=0,
        epoch_start_offset=0,
        now_ms=0,
        replica_lag_time_max_ms=LAG_MS,
        min_insync_replicas=min_insync,
    )


def test_the_high_watermark_is_the_slowest_isr_member_and_never_goes_back() -> None:
    replicas = leader()
    assert not replicas.on_fetch(2, 10, 10, 100)
    assert replicas.on_fetch(3, 7, 10, 100)
    assert replicas.high_watermark == 7
    assert not replicas.acknowledged(7) and replicas.acknowledged(6)
    replicas.on_fetch(3, 5, 10, 200)  # a stale fetch
    assert replicas.high_watermark == 7


def test_a_follower_that_does_not_catch_up_leaves_the_isr_and_comes_back() -> None:
    replicas = leader()
    replicas.on_fetch(2, 10, 10, 500)
    replicas.on_fetch(3, 4, 10, 500)
    assert replicas.to_shrink(900) == frozenset()  # the new leader gave everyone a window
    replicas.on_fetch(2, 12, 12, 1_400)
    replicas.on_fetch(3, 6, 12, 1_400)  # still behind the end it saw last time: not caught up
    assert replicas.to_shrink(1_600) == frozenset({3})
    replicas.set_isr({1, 2}, 12)
    assert replicas.high_watermark == 12  # the lagging follower no longer holds it back
    assert replicas.to_expand() == frozenset()
    replicas.on_fetch(3, 12, 12, 1_700)
    assert replicas.to_expand() == frozenset({3})


def test_caught_up_at_the_previous_fetch_counts() -> None:
    replicas = leader()
    replicas.on_fetch(3, 10, 10, 100)  # caught up at 100
    replicas.on_fetch(3, 10, 15, 900)  # reached the end it saw at 100: caught up then
    assert replicas.followers[3].last_caught_up_ms == 100
    replicas.on_fetch(3, 15, 20, 1_000)  # reached the end seen at 900: caught up at 900
    assert replicas.followers[3].last_caught_up_ms == 900
    assert 3 not in replicas.to_shrink(1_800)  # (2, which never fetched, is out)


def test_acks_all_needs_min_insync_replicas() -> None:
    assert leader((1, 2)).enough_replicas()
    assert not leader((1,)).enough_replicas()
    assert leader((1,), min_insync=1).enough_replicas()


def test_a_follower_that_never_fetched_is_not_caught_up_even_on_an_empty_log() -> None:
    # a new replica (a reassignment adding it), or a broker that is down: the log is empty,
    # so offset 0 "reaches" the high watermark, but only a fetch shows the follower is there
    replicas = leader(isr=(1, 2))
    assert replicas.to_expand() == frozenset()
    replicas.on_fetch(3, 0, 0, 100)
    assert replicas.to_expand() == frozenset({3})
    replicas.set_isr((1, 2, 3), 0)
    replicas.set_isr((1, 2), 0)  # dropped again: it must fetch again to come back
    assert replicas.to_expand() == frozenset()


def test_replicas_known_to_hold_a_batch_count_whether_or_not_they_are_in_the_isr() -> None:
    replicas = leader((1, 2))
    replicas.on_fetch(2, 10, 10, 100)
    assert replicas.held_by_enough(9) and not replicas.held_by_enough(10)
    replicas.set_isr({1}, 10)  # dropped: what it held is forgotten until it fetches again
    assert not replicas.held_by_enough(9)
    replicas.on_fetch(3, 10, 10, 200)  # out of the ISR, and it has the batch
    assert replicas.held_by_enough(9)
    assert leader((1,), min_insync=1).held_by_enough(9)
