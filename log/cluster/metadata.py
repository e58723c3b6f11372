"""The cluster's metadata: the records the controller quorum commits, and what they build.

The active controller decides; the quorum's log (:mod:`.raft`) orders its
decisions as **records**; every controller and broker applies the committed
records in order to a :class:`MetadataImage`. The records:

* :class:`RegisterBroker`: a broker joined, or came back (a new epoch);
* :class:`FenceBroker` / :class:`UnfenceBroker`: it missed its heartbeats,
  or is back;
* :class:`CreateTopic`: a topic with its partitions' replicas, ISR and
  first leaders, and its configs;
* :class:`PartitionChange`: a partition's new leader, ISR or replicas; each
  change bumps the partition epoch, a new leader the leader epoch too;
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
(:func:`elect_leader`, unclean only when allowed), and what fencing a
broker changes (:func:`fence_changes`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

NO_LEADER = -1


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
class ProducerIds:
    """``broker`` holds producer ids ``[start, start + size)``; the next block starts after."""

    broker: int
    start: int
    size: int


MetadataRecord = (
    RegisterBroker
    | FenceBroker
    | UnfenceBroker
    | CreateTopic
    | PartitionChange
    | AddPartitions
    | TopicConfigs
    | DeleteTopic
    | ProducerIds
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
    "producer_ids": ProducerIds,
}
TYPE_NAMES = {record_type: name for name, record_type in RECORD_TYPES.items()}


def encode(record: MetadataRecord) -> bytes:
    return orjson.dumps({"type": TYPE_NAMES[type(record)], **asdict(record)})


def decode(payload: bytes) -> MetadataRecord:
    try:
        document = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise MetadataError(f"not a metadata record: {payload[:80]!r}") from exc
    return decode_document(document)


def decode_document(document: Any) -> MetadataRecord:
    """A record from its decoded JSON object (as :func:`encode` wrote it)."""
    try:
        document = dict(document)
        record_type = RECORD_TYPES[document.pop("type")]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MetadataError(f"not a metadata record: {str(document)[:80]}") from exc
    try:
        if record_type in (CreateTopic, AddPartitions):
            document["partitions"] = tuple(
                PartitionAssignment(tuple(p["replicas"]), tuple(p["isr"]), p["leader"])
                for p in document["partitions"]
            )
        for name in ("isr", "replicas"):
            if document.get(name) is not None:
                document[name] = tuple(document[name])
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


@dataclass(frozen=True)
class PartitionState:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass
class TopicState:
    name: str
    topic_id: str
    partitions: list[PartitionState]
    configs: dict[str, str]


@dataclass
class MetadataImage:
    """The cluster as the committed records describe it, up to ``offset``."""

    brokers: dict[int, BrokerState] = field(default_factory=dict)
    topics: dict[str, TopicState] = field(default_factory=dict)
    offset: int = 0
    next_producer_id: int = 0

    def apply(self, record: MetadataRecord) -> None:
        """Apply the next committed record; raises MetadataError on a contradiction."""
        if isinstance(record, RegisterBroker):
            self.brokers[record.broker] = BrokerState(
                record.broker, record.epoch, record.host, record.port, record.rack, fenced=True
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
        _check_partition(record.topic, replicas, isr, leader)
        new_leader = leader != current.leader
        self.topics[record.topic].partitions[record.partition] = PartitionState(
            replicas,
            isr,
            leader,
            current.leader_epoch + 1 if new_leader else current.leader_epoch,
            current.partition_epoch + 1,
        )


def encode_image(image: MetadataImage) -> bytes:
    """``image`` as JSON, field by field (see the module)."""
    return orjson.dumps(asdict(image), option=orjson.OPT_NON_STR_KEYS)


def image_document(image: MetadataImage) -> dict[str, Any]:
    """``image`` as a JSON object (its keys strings, as JSON has them)."""
    document: dict[str, Any] = orjson.loads(encode_image(image))
    return document


def decode_image(payload: bytes) -> MetadataImage:
    """The image :func:`encode_image` wrote; raises MetadataError for anything else."""
    try:
        document = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise MetadataError(f"not a metadata image: {payload[:80]!r}") from exc
    return image_from_document(document)


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
        return tuple(_from_json(arguments[0], item) for item in value)
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
    only it can lead again: no unclean election), and its partitions get new leaders."""
    live = [b for b in image.live_brokers() if b != broker]
    changes = []
    for topic in image.topics.values():
        unclean = topic.configs.get("unclean.leader.election.enable", "false") == "true"
        for number, state in enumerate(topic.partitions):
            if broker not in state.isr and state.leader != broker:
                continue
            isr = tuple(b for b in state.isr if b != broker) or state.isr
            shrunk = replace(state, isr=isr)
            leader = elect_leader(shrunk, live, unclean=unclean)
            if leader != NO_LEADER and leader not in isr:  # unclean: the leader is the ISR
                isr = (leader,)
            if isr != state.isr or leader != state.leader:
                changes.append(PartitionChange(topic.name, number, leader=leader, isr=isr))
    return changes
