"""Which replica a consumer should read from (KIP-392, fetch from follower).

A consumer that names its rack (``client.rack``, Fetch v11's ``rack_id``)
may read from a follower in its own rack instead of crossing to the
leader's. The leader decides, per partition and per fetch, with the
selector that ``replica.selector.class`` names; an answer naming a
``preferred_read_replica`` carries no records, and the client fetches from
that replica until it fails or the client's lease on the choice ends.

Two selectors exist, as in Kafka: none (the default: always the leader) and
:data:`RACK_AWARE`, which is pure and lives here. It chooses among the
replicas that can serve the fetch at once: the leader, and the followers in
the ISR whose log already reaches the fetch offset (one that lags could keep
a consumer behind the producers for good). When the client's rack holds the
leader, or none of those replicas, the leader serves; otherwise the
follower in the rack that is furthest ahead, then the one caught up most
recently.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
SELECTORS = ("", RACK_AWARE)
"""The values ``replica.selector.class`` takes: empty for the leader only, or Kafka's
rack-aware selector's class name."""
NO_PREFERENCE = -1
"""``preferred_read_replica`` when the leader serves the fetch itself."""


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica as the leader sees it when a consumer fetches."""

    broker: int
    rack: str | None
    log_end_offset: int
    since_caught_up_ms: int = 0


def select_rack_aware(
    client_rack: str, leader: ReplicaView, followers: Iterable[ReplicaView]
) -> int:
    """The follower a consumer in ``client_rack`` should read from, or NO_PREFERENCE for
    the leader. ``followers`` are the ones able to serve the fetch (in the ISR, and at or
    past its offset)."""
    if not client_rack or leader.rack == client_rack:
        return NO_PREFERENCE
    near = [view for view in followers if view.rack == client_rack]
    if not near:
        return NO_PREFERENCE
    best = max(near, key=lambda view: (view.log_end_offset, -view.since_caught_up_ms))
    return best.broker


def parse_selector(raw: object) -> str:
    """``replica.selector.class``: empty (or absent) for the leader only, else Kafka's
    rack-aware selector. Other classes cannot be loaded into this broker."""
    value = "" if raw is None else str(raw).strip()
    if value not in SELECTORS:
        raise ValueError(f"the selectors on offer are {RACK_AWARE} and none (empty)")
    return value
