"""The cluster's metadata: the records the controller quorum commits, and what they build.

The active controller decides; the quorum's log (:mod:`.raft`) orders its
decisions as **records**; every controller and broker applies the committed
records in order to a :class:`MetadataImage`. The records:

* :class:`RegisterBroker`: a broker joined, or came back (a new epoch);
* :class:`FenceBroker` / :class:`UnfenceBroker`: it missed its heartbeats,
  or is back;
* :class:`CreateTopic`: a topic with its partitions' replicas, ISR and
  first leaders, and its configs;
* :class:`PartitionChange`: a partition's new leader, ISR or replicas, and
  the replicas a reassignment is adding and removing; each change bumps the
  partition epoch, a new leader the leader epoch too;
* :class:`AddPartitions`, :class:`TopicConfigs`, :class:`DeleteTopic`: a
  topic grows, changes its config overrides, or goes;
* :class:`ProducerIds`: a block of producer ids handed to a broker, so no
  two idempotent producers in the cluster ever share an id.

Records are JSON objects with a ``type`` (:func:`encode` / :func:`decode`).
A whole image is a JSON object too (:func:`encode_image` / :func:`decode_image`),
for the quorum's snapshots and for brokers too far behind for records. It is
written from the dataclasses' own fields, so a field added to
:class:`BrokerState`, :class:`PartitionState` or :class:`TopicState` (with a
default, for images written before it) is carried without a change here.
Applying one that contradicts the image (a leader outside the ISR, an ISR
outside the replicas, an unknown topic) raises :class:`MetadataError`: the
controller must never commit it.

The decisions themselves are pure functions here too: round-robin replica
placement (:func:`place_replicas`), leader election from the ISR
(:func:`elect_leader`, unclean only when allowed), what fencing a broker
changes (:func:`fence_changes`), and the steps of a reassignment.
Reassignment's decisions are in :mod:`.reassignment`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

NO_LEADER = -1
INTERNAL_TOPIC_PREFIX = "__"


def is_internal_topic(name: str) -> bool:
    """Whether ``name`` is one of the cluster's own topics (``__consumer_offsets``): every
    broker holds all of its partitions, and its replicas are not moved."""
    return name.startswith(INTERNAL_TOPIC_PREFIX)


class MetadataError(Exception):
    """A record that contradicts the metadata it would apply to."""


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class RegisterBroker:
    broker: int
    epoch: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()
    """Every listener's advertised address (name, host, port); ``host:port`` is the
    inter-broker listener's."""


@dataclass(frozen=True)
class FenceBroker:
    broker: int
    epoch: int


@dataclass(frozen=True)
class UnfenceBroker:
    broker: int
    epoch: int


@dataclass(frozen=True)
class PartitionAssignment:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int


@dataclass(frozen=True)
class CreateTopic:
    name: str
    topic_id: str
    partitions: tuple[PartitionAssignment, ...]
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionChange:
    topic: str
    partition: int
    leader: int | None = None
    """The new leader (``NO_LEADER`` for none); ``None`` keeps the current one."""
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    adding: tuple[int, ...] | None = None
    """The replicas a reassignment is adding; ``None`` keeps the current ones."""
    removing: tuple[int, ...] | None = None
    """The replicas a reassignment is removing; ``None`` keeps the current ones."""
    target: tuple[int, ...] | None = None
    """A reassignment's target replicas in order (``()`` for none); ``None`` keeps them."""


@dataclass(frozen=True)
class AddPartitions:
    name: str
    partitions: tuple[PartitionAssignment, ...]


@dataclass(frozen=True)
class TopicConfigs:
    name: str
    configs: Mapping[str, str]


@dataclass(frozen=True)
class DeleteTopic:
    name: str


@dataclass(frozen=True)
class GroupConfigs:
    """A group's config overrides, all of them (none: back to the defaults)."""

    group: str
    configs: Mapping[str, str]


@dataclass(frozen=True)
class ProducerIds:
    """``broker`` holds producer ids ``[start, start + size)``; the next block starts after."""

    broker: int
    start: int
    size: int


@dataclass(frozen=True)
class StoredScram:
    """One user's SCRAM credential for one mechanism (name as SASL spells it), its bytes
    base64-encoded: what a broker checks proofs against, never a password."""

    user: str
    mechanism: str
    salt: str
    iterations: int
    stored_key: str
    server_key: str


@dataclass(frozen=True)
class ScramChange:
    """Credentials stored (``upserted``) and removed (``deleted``: user, mechanism)."""

    upserted: tuple[StoredScram, ...] = ()
    deleted: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, order=True)
class AclEntry:
    """One ACL binding, its enums as Kafka's codes."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True)
class AclChange:
    added: tuple[AclEntry, ...] = ()
    removed: tuple[AclEntry, ...] = ()


@dataclass(frozen=True, order=True)
class QuotaEntry:
    """One quota: its entity (``[type, name]`` pairs, a null name the default), key and
    value; a value of None removes it."""

    entity: tuple[tuple[str, str | None], ...]
    key: str
    value: float | None


@dataclass(frozen=True)
class QuotaChangeRecord:
    changes: tuple[QuotaEntry, ...] = ()


@dataclass(frozen=True)
class Erasure:
    """Records of one partition to erase on every replica, by offset."""

    topic: str
    partition: int
    offsets: tuple[int, ...]


MetadataRecord = (
    RegisterBroker
    | FenceBroker
    | UnfenceBroker
    | CreateTopic
    | PartitionChange
    | AddPartitions
    | TopicConfigs
    | DeleteTopic
    | GroupConfigs
    | ProducerIds
    | ScramChange
    | AclChange
    | QuotaChangeRecord
    | Erasure
)
RECORD_TYPES: dict[str, type[Any]] = {
    "register_broker": RegisterBroker,
    "fence_broker": FenceBroker,
    "unfence_broker": UnfenceBroker,
    "create_topic": CreateTopic,
    "partition_change": PartitionChange,
    "add_partitions": AddPartitions,
    "topic_configs": TopicConfigs,
    "delete_topic": DeleteTopic,
    "group_configs": GroupConfigs,
    "producer_ids": ProducerIds,
    "scram_change": ScramChange,
    "acl_change": AclChange,
    "quota_change": QuotaChangeRecord,
    "erasure": Erasure,
}
TYPE_NAMES = {record_type: name for name, record_type in RECORD_TYPES.items()}


def encode(record: MetadataRecord) -> bytes:
    return orjson.dumps({"type": TYPE_NAMES[type(record)], **asdict(record)})


def decode(payload: bytes) -> MetadataRecord:
    return decode_document(_load_json(payload, "a metadata record"))


def _load_json(payload: bytes, what: str) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise MetadataError(f"not {what}: {payload[:80]!r}") from exc


def decode_document(document: Any) -> MetadataRecord:
    """A record from its decoded JSON object (as :func:`encode` wrote it)."""
    try:
        document = dict(document)
        record_type = RECORD_TYPES[document.pop("type")]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MetadataError(f"not a metadata record: {str(document)[:80]}") from exc
    if record_type in (ScramChange, AclChange, QuotaChangeRecord, Erasure):
        try:
            decoded: MetadataRecord = _from_json(record_type, document)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MetadataError(f"a {record_type.__name__} with wrong fields: {exc}") from exc
        return decoded
    try:
        if record_type in (CreateTopic, AddPartitions):
            document["partitions"] = tuple(
                PartitionAssignment(tuple(p["replicas"]), tuple(p["isr"]), p["leader"])
                for p in document["partitions"]
            )
        for name in ("isr", "replicas", "adding", "removing", "target"):
            if document.get(name) is not None:
                document[name] = tuple(document[name])
        if document.get("endpoints") is not None:
            document["endpoints"] = tuple(
                (str(name), str(host), int(port)) for name, host, port in document["endpoints"]
            )
        record: MetadataRecord = record_type(**document)
    except (KeyError, TypeError) as exc:
        raise MetadataError(f"a {record_type.__name__} with wrong fields: {exc}") from exc
    return record


# ---------------------------------------------------------------- the image


@dataclass(frozen=True)
class BrokerState:
    broker: int
    epoch: int
    host: str
    port: int
    rack: str | None
    fenced: bool
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where clients of ``listener`` reach this broker; its one address when it
        registered none by listener, None when it has no such listener."""
        if not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True)
class PartitionState:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    adding: tuple[int, ...] = ()
    """Replicas a reassignment in progress is adding (they are last in ``replicas``)."""
    removing: tuple[int, ...] = ()
    """Replicas a reassignment in progress will remove once the adding ones are in sync."""
    target: tuple[int, ...] = ()
    """The replicas, in order, once the reassignment in progress completes; ``()``: none."""

    @property
    def reassigning(self) -> bool:
        return bool(self.target)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment in progress (all of them when none is)."""
        return tuple(r for r in self.replicas if r not in self.adding)


@dataclass
class TopicState:
    name: str
    topic_id: str
    partitions: list[PartitionState]
    configs: dict[str, str]
    erasures: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """The offsets erased in each partition (sorted), for every replica to apply."""


@dataclass
class MetadataImage:
    """The cluster as the committed records describe it, up to ``offset``."""

    brokers: dict[int, BrokerState] = field(default_factory=dict)
    topics: dict[str, TopicState] = field(default_factory=dict)
    offset: int = 0
    next_producer_id: int = 0
    scram: dict[str, StoredScram] = field(default_factory=dict)
    """Credentials by ``mechanism:user``."""
    acls: list[AclEntry] = field(default_factory=list)
    quotas: list[QuotaEntry] = field(default_factory=list)
    """Every quota set (entries with a value)."""
    security_version: int = 0
    """Counts the committed credential and ACL changes, so a broker knows when to reload."""
    erasure_version: int = 0
    """Counts the committed erasures, so a broker knows when to look for new ones."""
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    """Every group's config overrides, by group."""

    def apply(self, record: MetadataRecord) -> None:
        """Apply the next committed record; raises MetadataError on a contradiction."""
        if isinstance(record, RegisterBroker):
            self.brokers[record.broker] = BrokerState(
                record.broker,
                record.epoch,
                record.host,
                record.port,
                record.rack,
                fenced=True,
                endpoints=record.endpoints,
            )
        elif isinstance(record, FenceBroker | UnfenceBroker):
            broker = self._broker(record.broker, record.epoch)
            self.brokers[record.broker] = replace(broker, fenced=isinstance(record, FenceBroker))
        elif isinstance(record, CreateTopic):
            self._create(record)
        elif isinstance(record, AddPartitions):
            topic = self._topic(record.name)
            for new in record.partitions:
                _check_partition(record.name, new.replicas, new.isr, new.leader)
                topic.partitions.append(PartitionState(new.replicas, new.isr, new.leader, 0, 0))
        elif isinstance(record, TopicConfigs):
            self._topic(record.name).configs = dict(record.configs)
        elif isinstance(record, DeleteTopic):
            self._topic(record.name)
            del self.topics[record.name]
        elif isinstance(record, GroupConfigs):
            if record.configs:
                self.group_configs[record.group] = dict(record.configs)
            else:
                self.group_configs.pop(record.group, None)
        elif isinstance(record, ScramChange):
            self._change_scram(record)
        elif isinstance(record, AclChange):
            self._change_acls(record)
        elif isinstance(record, QuotaChangeRecord):
            self._change_quotas(record)
        elif isinstance(record, Erasure):
            self._erase(record)
        elif isinstance(record, ProducerIds):
            if record.start != self.next_producer_id or record.size <= 0:
                raise MetadataError(
                    f"producer ids from {record.start} do not follow {self.next_producer_id}"
                )
            self.next_producer_id = record.start + record.size
        else:
            self._change(record)
        self.offset += 1

    def live_brokers(self) -> list[int]:
        return sorted(b.broker for b in self.brokers.values() if not b.fenced)

    def partition(self, topic: str, partition: int) -> PartitionState:
        state = self.topics.get(topic)
        if state is None or not 0 <= partition < len(state.partitions):
            raise MetadataError(f"no partition {topic}/{partition}")
        return state.partitions[partition]

    def _topic(self, name: str) -> TopicState:
        topic = self.topics.get(name)
        if topic is None:
            raise MetadataError(f"no topic {name}")
        return topic

    def _broker(self, broker: int, epoch: int) -> BrokerState:
        state = self.brokers.get(broker)
        if state is None or state.epoch != epoch:
            raise MetadataError(f"broker {broker} epoch {epoch} is not registered")
        return state

    def _change_scram(self, record: ScramChange) -> None:
        for user, mechanism in record.deleted:
            if self.scram.pop(scram_key(mechanism, user), None) is None:
                raise MetadataError(f"no {mechanism} credential of {user!r} to delete")
        for stored in record.upserted:
            self.scram[scram_key(stored.mechanism, stored.user)] = stored
        self.security_version += 1

    def _change_acls(self, record: AclChange) -> None:
        entries = (set(self.acls) - set(record.removed)) | set(record.added)
        self.acls = sorted(entries)
        self.security_version += 1

    def _change_quotas(self, record: QuotaChangeRecord) -> None:
        quotas = {(entry.entity, entry.key): entry for entry in self.quotas}
        for change in record.changes:
            if change.value is None:
                quotas.pop((change.entity, change.key), None)
            else:
                quotas[(change.entity, change.key)] = change
        self.quotas = sorted(quotas.values(), key=repr)
        self.security_version += 1

    def _erase(self, record: Erasure) -> None:
        topic = self._topic(record.topic)
        self.partition(record.topic, record.partition)
        if any(offset < 0 for offset in record.offsets):
            raise MetadataError(f"{record.topic}-{record.partition}: a negative offset to erase")
        erased = topic.erasures.get(record.partition, ())
        topic.erasures[record.partition] = tuple(sorted(set(erased) | set(record.offsets)))
        self.erasure_version += 1

    def _create(self, record: CreateTopic) -> None:
        if record.name in self.topics:
            raise MetadataError(f"topic {record.name} exists")
        partitions = []
        for assignment in record.partitions:
            _check_partition(record.name, assignment.replicas, assignment.isr, assignment.leader)
            state = PartitionState(assignment.replicas, assignment.isr, assignment.leader, 0, 0)
            partitions.append(state)
        self.topics[record.name] = TopicState(
            record.name, record.topic_id, partitions, dict(record.configs)
        )

    def _change(self, record: PartitionChange) -> None:
        current = self.partition(record.topic, record.partition)
        replicas = record.replicas if record.replicas is not None else current.replicas
        isr = record.isr if record.isr is not None else current.isr
        leader = record.leader if record.leader is not None else current.leader
        adding = record.adding if record.adding is not None else current.adding
        removing = record.removing if record.removing is not None else current.removing
        target = record.target if record.target is not None else current.target
        _check_partition(record.topic, replicas, isr, leader)
        _check_reassignment(record.topic, replicas, adding, removing, target)
        new_leader = leader != current.leader
        self.topics[record.topic].partitions[record.partition] = PartitionState(
            replicas,
            isr,
            leader,
            current.leader_epoch + 1 if new_leader else current.leader_epoch,
            current.partition_epoch + 1,
            adding,
            removing,
            target,
        )


def scram_key(mechanism: str, user: str) -> str:
    return f"{mechanism}:{user}"


def encode_image(image: MetadataImage) -> bytes:
    """``image`` as JSON, field by field (see the module)."""
    return orjson.dumps(asdict(image), option=orjson.OPT_NON_STR_KEYS)


def image_document(image: MetadataImage) -> dict[str, Any]:
    """``image`` as a JSON object (its keys strings, as JSON has them)."""
    document: dict[str, Any] = orjson.loads(encode_image(image))
    return document


def decode_image(payload: bytes) -> MetadataImage:
    """The image :func:`encode_image` wrote; raises MetadataError for anything else."""
    return image_from_document(_load_json(payload, "a metadata image"))


def image_from_document(document: Any) -> MetadataImage:
    try:
        image: MetadataImage = _from_json(MetadataImage, document)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MetadataError(f"not a metadata image: {exc}") from exc
    return image


def _from_json(hint: Any, value: Any) -> Any:
    """``value``, decoded from JSON, as the type ``hint`` names: dataclasses by their
    fields (those missing take their defaults), tuples, lists, dicts (JSON keys are
    strings; int keys are converted back) and optional values."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        hints = typing.get_type_hints(hint)
        known = {f.name for f in dataclasses.fields(hint) if f.init}
        return hint(**{n: _from_json(hints[n], v) for n, v in value.items() if n in known})
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        return _from_json(next(a for a in arguments if a is not type(None)), value)
    if origin is tuple:
        if len(arguments) == 2 and arguments[1] is Ellipsis:
            return tuple(_from_json(arguments[0], item) for item in value)
        return tuple(_from_json(kind, item) for kind, item in zip(arguments, value, strict=True))
    if origin is list:
        return [_from_json(arguments[0], item) for item in value]
    if origin in (dict, Mapping):
        key, item = arguments
        return {_from_json(key, k): _from_json(item, v) for k, v in value.items()}
    if hint in (int, float, str, bool):
        return hint(value)
    return value


def _check_partition(topic: str, replicas: Sequence[int], isr: Sequence[int], leader: int) -> None:
    if not replicas or len(set(replicas)) != len(replicas):
        raise MetadataError(f"{topic}: replicas {list(replicas)} are empty or repeat")
    if not isr or not set(isr) <= set(replicas):
        raise MetadataError(f"{topic}: ISR {list(isr)} is empty or not within {list(replicas)}")
    if leader != NO_LEADER and leader not in isr:
        raise MetadataError(f"{topic}: leader {leader} is not in the ISR {list(isr)}")


def _check_reassignment(
    topic: str,
    replicas: Sequence[int],
    adding: Sequence[int],
    removing: Sequence[int],
    target: Sequence[int],
) -> None:
    if not target:
        if adding or removing:
            raise MetadataError(f"{topic}: replicas are adding or removing with no target")
        return
    if not set(adding) <= set(target) or not set(removing) <= set(replicas):
        raise MetadataError(
            f"{topic}: adding {list(adding)} must be in the target {list(target)}, and "
            f"removing {list(removing)} among the replicas {list(replicas)}"
        )
    if set(target) != set(replicas) - set(removing) or len(set(target)) != len(target):
        raise MetadataError(
            f"{topic}: the target {list(target)} is not the replicas {list(replicas)} "
            f"without those removing {list(removing)}"
        )


# ---------------------------------------------------------------- decisions


def place_replicas(
    brokers: Sequence[int], partitions: int, replication_factor: int, start: int = 0
) -> list[tuple[int, ...]]:
    """Round-robin: partition ``p``'s replicas are the brokers from ``start + p`` on, so
    leaders (the first replica) spread evenly."""
    ordered = sorted(brokers)
    if replication_factor > len(ordered):
        raise MetadataError(
            f"replication factor {replication_factor} is more than the {len(ordered)} live brokers"
        )
    return [
        tuple(ordered[(start + p + r) % len(ordered)] for r in range(replication_factor))
        for p in range(partitions)
    ]


def check_replica_list(label: str, replicas: Sequence[int], brokers: Collection[int]) -> None:
    """Refuse (MetadataError) a replica list no partition can have: empty, naming a broker
    twice, or naming a broker that is not one of ``brokers`` (the registered ones)."""
    if not replicas:
        raise MetadataError(f"{label}: the replica list is empty")
    if len(set(replicas)) != len(replicas):
        raise MetadataError(f"{label}: the replicas {list(replicas)} repeat a broker")
    unknown = sorted(set(replicas) - set(brokers))
    if unknown:
        raise MetadataError(f"{label}: brokers {unknown} are not registered")


def check_replica_assignment(
    assignment: Sequence[Sequence[int]],
    brokers: Collection[int],
    *,
    replicas_per_partition: int | None = None,
    first: int = 0,
) -> None:
    """Refuse (MetadataError) an explicit assignment of partitions ``first``, ``first`` + 1,
    ... to replicas, as Kafka refuses one: a bad replica list (:func:`check_replica_list`),
    or partitions with different replica counts. ``replicas_per_partition`` is the count
    the topic's partitions have already, when it is being grown."""
    expected = replicas_per_partition
    for offset, replicas in enumerate(assignment):
        label = f"partition {first + offset}"
        check_replica_list(label, replicas, brokers)
        if expected is None:
            expected = len(replicas)
        elif len(replicas) != expected:
            raise MetadataError(
                f"{label} has {len(replicas)} replicas, the topic's other partitions {expected}"
            )


def assign_replicas(
    assignment: Sequence[Sequence[int]], live: Collection[int], *, first: int = 0
) -> tuple[PartitionAssignment, ...]:
    """The partitions of a checked assignment (:func:`check_replica_assignment`): the ISR is
    the live replicas and the leader the first of them, the preferred replica when it is
    live. A partition none of whose replicas is live is refused (MetadataError): it could
    have no leader."""
    assigned = []
    for offset, replicas in enumerate(assignment):
        isr = tuple(r for r in replicas if r in live)
        if not isr:
            raise MetadataError(
                f"partition {first + offset}: none of the brokers {list(replicas)} is live"
            )
        assigned.append(PartitionAssignment(tuple(replicas), isr, isr[0]))
    return tuple(assigned)


def elect_leader(state: PartitionState, live: Iterable[int], *, unclean: bool = False) -> int:
    """The first live replica in the ISR, in replica order (the preferred leader first); with
    ``unclean``, any live replica when none of the ISR is; else ``NO_LEADER``."""
    alive = set(live)
    for replica in state.replicas:
        if replica in state.isr and replica in alive:
            return replica
    if unclean:
        for replica in state.replicas:
            if replica in alive:
                return replica
    return NO_LEADER


def fence_changes(image: MetadataImage, broker: int) -> list[PartitionChange]:
    """What fencing ``broker`` changes: it leaves every ISR (but the last member stays, so
    only it can lead again: no unclean election), and the partitions it led get new
    leaders. A partition it only followed keeps its leader: moving a live leader would
    refuse its in-flight writes for nothing."""
    live = [b for b in image.live_brokers() if b != broker]
    changes = []
    for topic in image.topics.values():
        unclean = topic.configs.get("unclean.leader.election.enable", "false") == "true"
        for number, state in enumerate(topic.partitions):
            if broker not in state.isr and state.leader != broker:
                continue
            isr = tuple(b for b in state.isr if b != broker) or state.isr
            shrunk = replace(state, isr=isr)
            if state.leader != broker and state.leader in isr and state.leader in live:
                leader = state.leader
            else:
                leader = elect_leader(shrunk, live, unclean=unclean)
            if leader != NO_LEADER and leader not in isr:  # unclean: the leader is the ISR
                isr = (leader,)
            if isr != state.isr or leader != state.leader:
                changes.append(PartitionChange(topic.name, number, leader=leader, isr=isr))
    return changes
