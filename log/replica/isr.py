"""A partition leader's view of its followers: the ISR, the high watermark, acks=all.

:class:`LeaderReplicas` is pure: the partition's owner feeds it the
followers' fetches (:meth:`~LeaderReplicas.on_fetch`) and the time, and asks
it what follows, as Kafka's ``Partition`` does:

* a follower's log end offset is the offset it fetches from: it has
  everything before;
* a follower is **caught up** at a fetch whose offset reaches the leader's
  log end offset; if it also reached the end as it stood at its previous
  fetch, it was caught up then (Kafka's ``lastCaughtUpTimeMs``). One not
  caught up for ``replica_lag_time_max_ms`` leaves the ISR
  (:meth:`~LeaderReplicas.to_shrink`);
* a follower out of the ISR comes back once it has fetched from this leader
  and its log end offset reaches the high watermark and the start of the
  leader's epoch (:meth:`~LeaderReplicas.to_expand`); one that never fetched
  (a new replica, or a broker that is down) is not caught up, even when the
  log is empty;
* the **high watermark** is the smallest log end offset in the ISR (the
  leader's included), and never goes back;
* an acks=all produce completes once the high watermark passes its last
  offset, and is refused (NOT_ENOUGH_REPLICAS) when the ISR is smaller than
  ``min_insync_replicas``.

ISR changes are proposed to the controller, which commits them; the
partition adopts the committed ISR with :meth:`~LeaderReplicas.set_isr`.
While a change is in flight (:meth:`~LeaderReplicas.propose`) the high
watermark counts the larger of the two sets (Kafka's "maximal ISR"): a
follower being added must already have what the high watermark covers, or
it could be elected without it, and a follower being removed still counts
until the removal is committed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class FollowerState:
    log_end_offset: int = 0
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = 0
    fetched: bool = False
    """Whether the follower has fetched since this leader (or its last ISR change) knew it."""


class LeaderReplicas:
    """See the module docstring."""

    def __init__(
        self,
        leader: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        *,
        high_watermark: int,
        epoch_start_offset: int,
        now_ms: int,
        replica_lag_time_max_ms: int = 30_000,
        min_insync_replicas: int = 1,
    ) -> None:
        self.leader = leader
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.pending: frozenset[int] | None = None
        self.high_watermark = high_watermark
        self.epoch_start_offset = epoch_start_offset
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        # a new leader gives every follower a full lag window (Kafka resets them too)
        self.followers = {
            replica: FollowerState(last_caught_up_ms=now_ms)
            for replica in self.replicas
            if replica != leader
        }

    def on_fetch(self, replica: int, fetch_offset: int, leader_end: int, now_ms: int) -> bool:
        """A follower fetched from ``fetch_offset`` while the leader's log ended at
        ``leader_end``; True if the high watermark moved."""
        state = self.followers.get(replica)
        if state is None:
            return False
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = now_ms
        elif fetch_offset >= state.leader_end_at_last_fetch:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.fetched = True
        state.last_fetch_ms = now_ms
        state.leader_end_at_last_fetch = leader_end
        return self.advance(leader_end)

    def advance(self, leader_end: int) -> bool:
        """Recompute the high watermark (after an append or a fetch); True if it moved."""
        counted = self.isr | self.pending if self.pending is not None else self.isr
        ends = [leader_end]
        ends += [self.followers[r].log_end_offset for r in counted if r in self.followers]
        candidate = min(ends)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def to_shrink(self, now_ms: int) -> frozenset[int]:
        """The followers the ISR should lose now."""
        lag = self.replica_lag_time_max_ms
        return frozenset(
            replica
            for replica in self.isr
            if replica in self.followers
            and now_ms - self.followers[replica].last_caught_up_ms > lag
        )

    def to_expand(self) -> frozenset[int]:
        """The followers out of the ISR that have caught up enough to come back."""
        floor = max(self.high_watermark, self.epoch_start_offset)
        return frozenset(
            replica
            for replica, state in self.followers.items()
            if replica not in self.isr and state.fetched and state.log_end_offset >= floor
        )

    def propose(self, isr: Iterable[int] | None) -> None:
        """An ISR change is in flight (None: it failed, or there is none)."""
        self.pending = None if isr is None else frozenset(isr)

    def set_isr(self, isr: Iterable[int], leader_end: int) -> None:
        """Adopt the ISR the controller committed. A follower it dropped (it lagged, or its
        broker was fenced) must fetch again before it can come back."""
        new = frozenset(isr)
        for replica in self.isr - new:
            state = self.followers.get(replica)
            if state is not None:
                self.followers[replica] = FollowerState(last_caught_up_ms=state.last_caught_up_ms)
        self.isr = new
        self.pending = None
        self.advance(leader_end)

    def enough_replicas(self) -> bool:
        """Whether acks=all may append: the ISR has at least ``min_insync_replicas``."""
        return len(self.isr) >= self.min_insync_replicas

    def held_by_enough(self, last_offset: int) -> bool:
        """Whether at least ``min_insync_replicas`` replicas, the leader included, are known
        to hold everything to ``last_offset``: the leader, and every follower that fetched
        past it since this leader (or the ISR change that dropped it) knew it, in the ISR
        or not."""
        holders = 1 + sum(
            1
            for state in self.followers.values()
            if state.fetched and state.log_end_offset > last_offset
        )
        return holders >= self.min_insync_replicas

    def acknowledged(self, last_offset: int) -> bool:
        """Whether an acks=all append ending at ``last_offset`` is replicated to the ISR."""
        return self.high_watermark > last_offset
