"""The rack-aware replica selector (KIP-392) and ``replica.selector.class``."""

from __future__ import annotations

import pytest

from eventplatform.log.config import BrokerConfig, BrokerConfigError
from eventplatform.log.replica.selector import (
    NO_PREFERENCE,
    RACK_AWARE,
    ReplicaView,
    select_rack_aware,
)

LEADER = ReplicaView(1, "a", 100)


def test_a_follower_in_the_clients_rack_is_preferred() -> None:
    followers = [ReplicaView(2, "b", 100), ReplicaView(3, "c", 100)]
    assert select_rack_aware("c", LEADER, followers) == 3


def test_the_leader_serves_when_it_shares_the_rack_or_no_follower_does() -> None:
    followers = [ReplicaView(2, "a", 100), ReplicaView(3, "c", 100)]
    assert select_rack_aware("a", LEADER, followers) == NO_PREFERENCE
    assert select_rack_aware("z", LEADER, followers) == NO_PREFERENCE
    assert select_rack_aware("", LEADER, followers) == NO_PREFERENCE
    assert select_rack_aware("c", LEADER, []) == NO_PREFERENCE


def test_among_followers_in_the_rack_the_furthest_ahead_then_the_freshest_wins() -> None:
    ahead = [ReplicaView(2, "b", 90), ReplicaView(3, "b", 99), ReplicaView(4, "b", 95)]
    assert select_rack_aware("b", LEADER, ahead) == 3
    tied = [ReplicaView(2, "b", 99, since_caught_up_ms=800), ReplicaView(3, "b", 99, 20)]
    assert select_rack_aware("b", LEADER, tied) == 3


def test_a_follower_with_no_rack_is_never_chosen() -> None:
    assert select_rack_aware("b", LEADER, [ReplicaView(2, None, 100)]) == NO_PREFERENCE


def test_replica_selector_class_takes_the_rack_aware_selector_or_none() -> None:
    assert BrokerConfig().replica_selector_class == ""
    config = BrokerConfig.load(overrides=[f"replica.selector.class={RACK_AWARE}"])
    assert config.replica_selector_class == RACK_AWARE
    assert config.to_properties()["replica.selector.class"] == RACK_AWARE
    assert BrokerConfig.load(overrides=["replica.selector.class="]).replica_selector_class == ""
    with pytest.raises(BrokerConfigError, match=r"replica\.selector\.class"):
        BrokerConfig.load(overrides=["replica.selector.class=com.example.MySelector"])
