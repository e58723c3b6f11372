"""Client quotas as Kafka defines them: byte rates per user and client id, and a
connection creation rate per address.

Quotas are set on **entities**, as AlterClientQuotas does: a ``user`` (a principal's
name, ``User:`` left off), a ``client-id``, both together, or an ``ip``; a name of
None is the default for its type. A request is held to the first of these that has
the quota, in Kafka's order of precedence::

    user + client-id, user + default client-id, user,
    default user + client-id, default user + default client-id, default user,
    client-id, default client-id

Keys: ``producer_byte_rate`` (bytes appended per second), ``consumer_byte_rate``
(bytes fetched per second), and for an ``ip`` entity ``connection_creation_rate``
(connections accepted per second).

A :class:`Rate` keeps :data:`SAMPLES` samples of :data:`SAMPLE_S` seconds. A request that
takes a client over its rate is answered, then the client is asked to wait
``throttle_time_ms``, the time at the quota that the excess would take (Kafka's
formula), and its connection reads nothing more until the time is up.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from eventplatform.log.storage.files import write_atomically

QUOTAS_FILE = "client-quotas.json"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
USER, CLIENT_ID, IP = "user", "client-id", "ip"
KEYS_BY_TYPES = {
    frozenset({USER}): (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE),
    frozenset({CLIENT_ID}): (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE),
    frozenset({USER, CLIENT_ID}): (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE),
    frozenset({IP}): (CONNECTION_CREATION_RATE,),
}
SAMPLES = 11
SAMPLE_S = 1.0
THROTTLE_MS_MAX = 30_000
"""The longest a client is asked to wait at once, however far over its quota it went."""
ENTITIES_MAX = 100_000
TRACKED_MAX = 100_000
"""The most clients whose rates are measured at once; the least recently seen go first."""

Entity = tuple[tuple[str, str | None], ...]
"""Sorted ``(type, name)`` pairs; a name of None is the type's default."""


class QuotaError(ValueError):
    """An entity or key AlterClientQuotas cannot take (Kafka answers INVALID_REQUEST)."""


def entity_of(components: Iterable[tuple[str, str | None]]) -> Entity:
    pairs = sorted(components)
    types = frozenset(kind for kind, _ in pairs)
    if len(types) != len(pairs) or types not in KEYS_BY_TYPES:
        raise QuotaError(f"no quotas are kept for the entity {pairs}")
    return tuple(pairs)


def check_quota(entity: Entity, key: str, value: float) -> None:
    allowed = KEYS_BY_TYPES[frozenset(kind for kind, _ in entity)]
    if key not in allowed:
        raise QuotaError(f"{key} is not a quota of {[kind for kind, _ in entity]} (only {allowed})")
    if not value > 0:
        raise QuotaError(f"{key} must be above 0, not {value}")


@dataclass(frozen=True, slots=True)
class QuotaChange:
    entity: Entity
    key: str
    value: float | None
    """None removes the quota."""


class QuotaStore:
    """The quotas set, in a file of a broker on its own (``path`` None: in memory)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._quotas: dict[Entity, dict[str, float]] = {}
        if path is not None and path.exists():
            for entry in orjson.loads(path.read_bytes()).get("quotas", []):
                entity = tuple((kind, name) for kind, name in entry["entity"])
                self._quotas[entity] = {k: float(v) for k, v in entry["values"].items()}

    def entries(self) -> dict[Entity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self._quotas.items()}

    def get(self, entity: Entity, key: str) -> float | None:
        return self._quotas.get(entity, {}).get(key)

    def apply(self, changes: Iterable[QuotaChange]) -> None:
        quotas = self.entries()
        for change in changes:
            values = quotas.setdefault(change.entity, {})
            if change.value is None:
                values.pop(change.key, None)
            else:
                values[change.key] = change.value
            if not values:
                del quotas[change.entity]
        if len(quotas) > ENTITIES_MAX:
            raise QuotaError(f"a broker keeps quotas for at most {ENTITIES_MAX} entities")
        if self.path is not None:
            document = {
                "version": 1,
                "quotas": [
                    {"entity": [list(pair) for pair in entity], "values": values}
                    for entity, values in sorted(quotas.items(), key=lambda item: repr(item[0]))
                ],
            }
            write_atomically(self.path, orjson.dumps(document))
        self._quotas = quotas

    def replace_all(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        self._quotas = {entity: dict(values) for entity, values in quotas.items()}

    def byte_quota(self, user: str | None, client_id: str, key: str) -> tuple[Entity, float] | None:
        """The ``key`` quota that holds for this user and client id, and what its rate is
        measured over: a default quota is each user's (or client's) own, not shared."""
        if not self._quotas:  # the common case, on every produce and fetch
            return None
        actual = {USER: user, CLIENT_ID: client_id}
        for entity in _precedence(user, client_id):
            value = self.get(entity, key)
            if value is not None:
                return tuple((kind, actual[kind]) for kind, _ in entity), value
        return None


def _precedence(user: str | None, client_id: str) -> list[Entity]:
    client = (CLIENT_ID, client_id)
    default_client = (CLIENT_ID, None)
    order: list[Entity] = []
    if user is not None:
        named = (USER, user)
        order += [(client, named), (default_client, named), (named,)]
    default_user = (USER, None)
    order += [
        (client, default_user),
        (default_client, default_user),
        (default_user,),
        (client,),
        (default_client,),
    ]
    return order


class Rate:
    """Events per second over the last ``SAMPLES`` samples of ``SAMPLE_S`` seconds."""

    def __init__(self) -> None:
        self._samples: collections.deque[tuple[float, float]] = collections.deque()

    def record(self, amount: float, now: float) -> None:
        start = now - now % SAMPLE_S
        if self._samples and self._samples[-1][0] == start:
            self._samples[-1] = (start, self._samples[-1][1] + amount)
        else:
            self._samples.append((start, amount))
        self._expire(now)

    def _expire(self, now: float) -> None:
        while self._samples and self._samples[0][0] <= now - SAMPLES * SAMPLE_S:
            self._samples.popleft()

    def per_second(self, now: float) -> float:
        self._expire(now)
        if not self._samples:
            return 0.0
        elapsed = max(now - self._samples[0][0], (SAMPLES - 1) * SAMPLE_S)
        return sum(amount for _, amount in self._samples) / elapsed

    def throttle_ms(self, quota: float, now: float) -> int:
        """How long to wait for the rate to come back to ``quota``: (rate - quota) / quota
        times the window, as Kafka computes it; 0 within the quota."""
        rate = self.per_second(now)
        if rate <= quota:
            return 0
        window_s = SAMPLES * SAMPLE_S
        return min(THROTTLE_MS_MAX, int((rate - quota) / quota * window_s * 1000))


class Rates:
    """The rates measured per (entity, key), bounded by ``TRACKED_MAX``."""

    def __init__(self) -> None:
        self._rates: collections.OrderedDict[tuple[Entity, str], Rate] = collections.OrderedDict()

    def record(self, entity: Entity, key: str, amount: float, quota: float, now: float) -> int:
        """Count ``amount`` against ``entity``'s ``key`` quota; the throttle time owed."""
        rate = self._rates.pop((entity, key), None) or Rate()
        self._rates[(entity, key)] = rate
        while len(self._rates) > TRACKED_MAX:
            self._rates.popitem(last=False)
        rate.record(amount, now)
        return rate.throttle_ms(quota, now)
