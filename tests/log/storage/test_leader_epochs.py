"""The leader-epoch cache: epochs and their start offsets, OffsetForLeaderEpoch answers,
truncation both ways, the checkpoint file, and the divergence cases of KIP-101 and KIP-279
that truncating by epoch closes and truncating by high watermark does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventplatform.log.invariants import InvariantError
from eventplatform.log.storage.leader_epochs import (
    CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    EpochCache,
    EpochCacheError,
    EpochEntry,
)


def cache(*pairs: tuple[int, int]) -> EpochCache:
    return EpochCache(None, [EpochEntry(epoch, start) for epoch, start in pairs])


def test_end_offsets_answer_for_the_largest_epoch_at_most_the_one_asked() -> None:
    epochs = cache((0, 0), (2, 5), (4, 9))
    assert epochs.end_offset_for(0, 12) == (0, 5)
    assert epochs.end_offset_for(1, 12) == (0, 5)
    assert epochs.end_offset_for(2, 12) == (2, 9)
    assert epochs.end_offset_for(7, 12) == (4, 12)
    assert cache((3, 0)).end_offset_for(2, 4) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_assign_keeps_order_and_truncation_trims_both_ends(tmp_path: Path) -> None:
    epochs = EpochCache.load(tmp_path)
    epochs.assign(0, 0)
    epochs.assign(0, 3)  # the same epoch: nothing new
    epochs.assign(2, 5)
    epochs.assign(4, 9)
    with pytest.raises(InvariantError):
        epochs.assign(3, 10)
    epochs.truncate_from_end(9)
    assert epochs.entries == [EpochEntry(0, 0), EpochEntry(2, 5)]
    epochs.truncate_from_start(7)
    assert epochs.entries == [EpochEntry(2, 7)]
    assert EpochCache.load(tmp_path).entries == [EpochEntry(2, 7)]
    (tmp_path / CHECKPOINT_FILE).write_text("0\n3\n1 2\n")
    with pytest.raises(EpochCacheError):
        EpochCache.load(tmp_path)


def test_kip_101_a_restarted_follower_keeps_what_the_leader_committed() -> None:
    # A led epoch 0 and wrote m0, m1; B fetched both but had only learned HW 1
    leader, follower = cache((0, 0)), cache((0, 0))
    hw_truncation = 1  # what truncating to the high watermark would keep on B
    epoch, end = leader.end_offset_for(follower.latest_epoch, 2)
    keep = follower.truncation_offset(epoch, end, 2)
    assert keep == 2 > hw_truncation  # m1, committed on A and B, survives A's failure


def test_kip_101_a_stale_suffix_is_dropped_where_the_logs_diverge() -> None:
    # A wrote m0, m1 in epoch 0; B had m0 only, came back first, leads epoch 1 and wrote x1
    old_leader_now_follower = cache((0, 0))
    new_leader = cache((0, 0), (1, 1))
    epoch, end = new_leader.end_offset_for(old_leader_now_follower.latest_epoch, 2)
    assert (epoch, end) == (0, 1)
    assert old_leader_now_follower.truncation_offset(epoch, end, 2) == 1  # m1 goes, x1 comes


def test_kip_279_asking_again_converges_after_a_double_failover() -> None:
    follower = cache((0, 0), (2, 5))  # log end 8
    leader = cache((0, 0), (1, 4), (3, 6))  # log end 9
    follower_end = 8
    rounds = 0
    while True:
        rounds += 1
        epoch, end = leader.end_offset_for(follower.latest_epoch, 9)
        keep = follower.truncation_offset(epoch, end, follower_end)
        if keep == follower_end:
            break
        follower_end = keep
        follower.truncate_from_end(keep)
    assert follower_end == 4 and rounds == 3  # 8 -> 5 -> 4, then they agree
    assert follower.entries == [EpochEntry(0, 0)]
