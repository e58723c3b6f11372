"""Client quotas: which entity's quota holds, how rates and throttle times are measured,
and the store's file."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventplatform.log.security.quotas import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    QUOTAS_FILE,
    SAMPLE_S,
    SAMPLES,
    THROTTLE_MS_MAX,
    USER,
    QuotaChange,
    QuotaError,
    QuotaStore,
    Rate,
    check_quota,
    entity_of,
)


def store_with(*quotas: tuple[tuple[tuple[str, str | None], ...], float]) -> QuotaStore:
    store = QuotaStore(None)
    store.apply(
        QuotaChange(entity_of(entity), PRODUCER_BYTE_RATE, value) for entity, value in quotas
    )
    return store


def test_the_most_specific_quota_holds_in_kafkas_order() -> None:
    store = store_with(
        (((USER, "alice"), (CLIENT_ID, "app")), 1.0),
        (((USER, "alice"),), 2.0),
        (((USER, None),), 3.0),
        (((CLIENT_ID, "app"),), 4.0),
        (((CLIENT_ID, None),), 5.0),
    )
    assert store.byte_quota("alice", "app", PRODUCER_BYTE_RATE) == (
        ((CLIENT_ID, "app"), (USER, "alice")),
        1.0,
    )
    assert store.byte_quota("alice", "other", PRODUCER_BYTE_RATE) == (((USER, "alice"),), 2.0)
    # A default quota is measured per user, not shared by every user.
    assert store.byte_quota("bob", "app", PRODUCER_BYTE_RATE) == (((USER, "bob"),), 3.0)
    assert store.byte_quota("alice", "app", CONSUMER_BYTE_RATE) is None
    clients_only = store_with((((CLIENT_ID, "app"),), 4.0), (((CLIENT_ID, None),), 5.0))
    assert clients_only.byte_quota("carol", "app", PRODUCER_BYTE_RATE) == (
        ((CLIENT_ID, "app"),),
        4.0,
    )
    assert clients_only.byte_quota("carol", "x", PRODUCER_BYTE_RATE) == (((CLIENT_ID, "x"),), 5.0)


def test_a_rate_over_its_quota_owes_the_time_the_excess_takes_at_the_quota() -> None:
    rate = Rate()
    for second in range(SAMPLES):
        rate.record(1000, float(second))
    now = SAMPLES - 0.5
    assert rate.per_second(now) == pytest.approx(SAMPLES * 1000 / (SAMPLES - 0.5))
    assert rate.throttle_ms(2000, now) == 0
    owed = rate.throttle_ms(500, now)
    expected = (rate.per_second(now) - 500) / 500 * SAMPLES * SAMPLE_S * 1000
    assert owed == int(expected)
    rate.record(10**12, now)
    assert rate.throttle_ms(1, now) == THROTTLE_MS_MAX


def test_old_samples_leave_the_window() -> None:
    rate = Rate()
    rate.record(10_000, 0.0)
    assert rate.throttle_ms(100, 1.0) > 0
    assert rate.per_second(SAMPLES * SAMPLE_S + 1) == 0.0


@pytest.mark.parametrize(
    ("entity", "key", "value", "reason"),
    [
        (((USER, "a"), (IP, "1.2.3.4")), PRODUCER_BYTE_RATE, 1.0, "no quotas are kept"),
        (((USER, "a"), (USER, "b")), PRODUCER_BYTE_RATE, 1.0, "no quotas are kept"),
        (((IP, "1.2.3.4"),), PRODUCER_BYTE_RATE, 1.0, "is not a quota"),
        (((USER, "a"),), CONNECTION_CREATION_RATE, 1.0, "is not a quota"),
        (((USER, "a"),), "request_percentage", 1.0, "is not a quota"),
        (((USER, "a"),), PRODUCER_BYTE_RATE, 0.0, "above 0"),
    ],
)
def test_quotas_the_broker_cannot_enforce_are_refused(
    entity: tuple[tuple[str, str | None], ...], key: str, value: float, reason: str
) -> None:
    with pytest.raises(QuotaError, match=reason):
        check_quota(entity_of(entity), key, value)


def test_the_store_file_survives_a_reopen_and_a_removal(tmp_path: Path) -> None:
    path = tmp_path / QUOTAS_FILE
    store = QuotaStore(path)
    alice = entity_of([(USER, "alice")])
    default_ip = entity_of([(IP, None)])
    store.apply(
        [
            QuotaChange(alice, PRODUCER_BYTE_RATE, 1024.0),
            QuotaChange(default_ip, CONNECTION_CREATION_RATE, 5.0),
        ]
    )
    reopened = QuotaStore(path)
    assert reopened.entries() == {
        alice: {PRODUCER_BYTE_RATE: 1024.0},
        default_ip: {CONNECTION_CREATION_RATE: 5.0},
    }
    reopened.apply([QuotaChange(alice, PRODUCER_BYTE_RATE, None)])
    assert QuotaStore(path).entries() == {default_ip: {CONNECTION_CREATION_RATE: 5.0}}
