"""Topics of one broker: names, ids, partitions, per-topic configs, and their files.

Layout of the data directory::

    meta.properties            cluster.id and node.id, written once
    topics.json                every topic: id, partition count, config overrides, and
                               which partitions this broker holds
    <topic>-<partition>/       one PartitionLog per partition held (Kafka's naming)

A standalone broker holds every partition. In a cluster a broker holds only
the partitions it is a replica of: the others are ``None`` in
:attr:`Topic.partitions`, and :meth:`TopicRegistry.host` and
:meth:`TopicRegistry.drop` add and remove one as replicas move.

``topics.json`` is replaced atomically after every change, so a crash leaves
either the old or the new topic list. At start, partition directories that
``topics.json`` does not name (a crash between the two writes) are removed.

Only the broker's trio thread calls the registry.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.partition import Partition
from eventplatform.log.storage import InvalidConfigError, LogConfig
from eventplatform.log.storage.files import write_atomically

TOPIC_NAME_BYTES_MAX = 249
PARTITIONS_MAX = 10_000
TOPICS_FILE = "topics.json"
META_FILE = "meta.properties"
DELETED_DIRECTORY_SUFFIX = "-delete"
RESERVED_DIRECTORY_PREFIX = "__cluster_metadata"
"""The controller quorum's own log lives beside the topics; it is no topic."""
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION_DIRECTORY = re.compile(r"(.+)-(\d+)")


class TopicError(Exception):
    """A topic operation the broker refuses; ``code`` is the Kafka error to answer with."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class Topic:
    name: str
    topic_id: bytes
    configs: dict[str, str]
    log_config: LogConfig
    internal: bool = False
    partitions: list[Partition | None] = field(default_factory=list)
    """By index; None for a partition this broker does not hold."""


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name {name!r} is not allowed")
    if len(name) > TOPIC_NAME_BYTES_MAX:
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name is longer than {TOPIC_NAME_BYTES_MAX} characters",
        )
    if not _LEGAL_NAME.fullmatch(name):
        raise TopicError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name {name!r} may only hold ASCII letters, digits, '.', '_' and '-'",
        )


class TopicRegistry:
    """See the module docstring."""

    def __init__(self, data_dir: Path, defaults: LogConfig, clock_ms: Callable[[], int]) -> None:
        self.data_dir = data_dir
        self.defaults = defaults
        self.clock_ms = clock_ms
        self.topics: dict[str, Topic] = {}

    @classmethod
    def open(
        cls, data_dir: Path, defaults: LogConfig, clock_ms: Callable[[], int]
    ) -> TopicRegistry:
        """Load ``topics.json`` and open (recovering as needed) every partition."""
        registry = cls(data_dir, defaults, clock_ms)
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / TOPICS_FILE
        document = orjson.loads(path.read_bytes()) if path.exists() else {}
        try:
            for name, entry in document.items():
                topic = Topic(
                    name,
                    bytes.fromhex(entry["id"]),
                    dict(entry["configs"]),
                    LogConfig.from_properties(entry["configs"], defaults),
                    bool(entry.get("internal", False)),
                )
                held = entry.get("hosted")
                for index in range(int(entry["partitions"])):
                    topic.partitions.append(
                        registry._open_if_held(name, index, topic.log_config, held)
                    )
                registry.topics[name] = topic
        except BaseException:
            registry.close()
            raise
        registry._remove_orphans()
        return registry

    def _open_partition(self, topic: str, index: int, config: LogConfig) -> Partition:
        directory = self.data_dir / f"{topic}-{index}"
        return Partition.open(topic, index, directory, config, self.clock_ms)

    def _open_if_held(
        self, topic: str, index: int, config: LogConfig, hosted: Collection[int] | None
    ) -> Partition | None:
        """The partition opened when this broker holds it (``hosted`` None: every one)."""
        if hosted is None or index in hosted:
            return self._open_partition(topic, index, config)
        return None

    def _remove_orphans(self) -> None:
        for entry in self.data_dir.iterdir():
            if not entry.is_dir():
                continue
            if entry.name.startswith(RESERVED_DIRECTORY_PREFIX):
                continue
            if entry.name.endswith(DELETED_DIRECTORY_SUFFIX):
                shutil.rmtree(entry, ignore_errors=True)
                continue
            match = _PARTITION_DIRECTORY.fullmatch(entry.name)
            if match is None:
                continue
            topic = self.topics.get(match.group(1))
            index = int(match.group(2))
            if topic is None or index >= len(topic.partitions) or topic.partitions[index] is None:
                shutil.rmtree(entry, ignore_errors=True)

    def _save(self) -> None:
        document = {
            topic.name: {
                "id": topic.topic_id.hex(),
                "partitions": len(topic.partitions),
                "configs": topic.configs,
                "internal": topic.internal,
                "hosted": [i for i, p in enumerate(topic.partitions) if p is not None],
            }
            for topic in self.topics.values()
        }
        write_atomically(self.data_dir / TOPICS_FILE, orjson.dumps(document))

    # ------------------------------------------------------------ queries

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def by_id(self, topic_id: bytes) -> Topic | None:
        """The topic with this id: a topic deleted and re-created under its name has a
        new one, which is how clients tell the two apart (Metadata v10+)."""
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def partition(self, name: str, index: int) -> Partition | None:
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def exists(self, name: str, index: int) -> bool:
        """Whether the partition is one of the cluster's, held here or on another broker.

        Every broker knows every topic and its partition count (a cluster member mirrors
        the controller's metadata here), so this is the one question to ask before
        answering UNKNOWN_TOPIC_OR_PARTITION: committed offsets, for one, are kept for any
        partition that exists, wherever its replicas live."""
        topic = self.topics.get(name)
        return topic is not None and 0 <= index < len(topic.partitions)

    def absence_error(self, name: str, index: int) -> ErrorCode:
        """Why :meth:`partition` found nothing: the partition exists but another broker
        holds it (NOT_LEADER_OR_FOLLOWER, so clients look for its leader), or it does not
        exist at all."""
        if self.exists(name, index):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def partitions_of(self, name: str, *, first: int = 0) -> Iterator[Partition]:
        """The partitions of topic ``name`` this broker holds, from index ``first`` on."""
        topic = self.topics.get(name)
        if topic is not None:
            yield from (p for p in topic.partitions[first:] if p is not None)

    def partitions(self) -> Iterator[Partition]:
        """Every partition this broker holds."""
        for topic in self.topics.values():
            yield from (partition for partition in topic.partitions if partition is not None)

    # ------------------------------------------------------------ changes

    def check_new_topic(self, name: str, partitions: int, configs: Mapping[str, str]) -> LogConfig:
        """Validate a CreateTopics entry; returns the resulting log config."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if not 1 <= partitions <= PARTITIONS_MAX:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"partition count must be between 1 and {PARTITIONS_MAX}, got {partitions}",
            )
        return self._log_config(configs)

    def _log_config(self, configs: Mapping[str, str]) -> LogConfig:
        try:
            return LogConfig.from_properties(configs, self.defaults)
        except InvalidConfigError as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from exc

    def create(
        self, name: str, partitions: int, configs: Mapping[str, str], **options: Any
    ) -> Topic:
        """Create the topic (:meth:`prepare`, whose keyword options it takes, then
        :meth:`register`)."""
        topic = self.prepare(name, partitions, configs, **options)
        self.register(topic)
        return topic

    def prepare(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str],
        *,
        internal: bool = False,
        topic_id: bytes | None = None,
        hosted: Collection[int] | None = None,
    ) -> Topic:
        """The new topic with its logs created, holding the partitions ``hosted`` (None:
        all of them), not yet registered: :meth:`register` it.

        Only the new partitions' directories are touched, so a broker runs this in a
        worker thread while its event loop serves everyone else (creating a log's files
        is several metadata operations on the file system, each about a millisecond when
        the disk is busy)."""
        log_config = self.check_new_topic(name, partitions, configs)
        topic_id = uuid.uuid4().bytes if topic_id is None else topic_id
        topic = Topic(name, topic_id, dict(configs), log_config, internal)
        topic.partitions = self._open_new(name, range(partitions), log_config, hosted)
        return topic

    def register(self, topic: Topic) -> None:
        """Add a topic made by :meth:`prepare` and save the topic list."""
        if topic.name in self.topics:
            _close_all(topic.partitions)
            raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists")
        self.topics[topic.name] = topic
        self._save()

    def _open_new(
        self,
        name: str,
        indexes: range,
        config: LogConfig,
        hosted: Collection[int] | None,
    ) -> list[Partition | None]:
        opened: list[Partition | None] = []
        try:
            for index in indexes:
                opened.append(self._open_if_held(name, index, config, hosted))
        except BaseException:
            _close_all(opened)
            raise
        return opened

    def delete(self, name: str) -> None:
        """Forget the topic, close its partitions and remove their files."""
        topic = self.topics.pop(name, None)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        self._save()
        for partition in topic.partitions:
            if partition is not None:
                _remove(partition)

    def host(self, name: str, index: int) -> Partition:
        """Hold the partition ``index`` of ``name`` from now on (it starts empty); this
        broker became one of its replicas."""
        topic = self.topics[name]
        partition = topic.partitions[index]
        if partition is None:
            partition = self._open_partition(name, index, topic.log_config)
            topic.partitions[index] = partition
            self._save()
        return partition

    def drop(self, name: str, index: int) -> None:
        """Stop holding the partition ``index`` of ``name``: close it and remove its files
        (this broker is no longer one of its replicas)."""
        topic = self.topics[name]
        partition = topic.partitions[index]
        if partition is None:
            return
        topic.partitions[index] = None
        self._save()
        _remove(partition)

    def check_partition_count(self, name: str, count: int) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if count <= current:
            raise TopicError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic {name!r} has {current} partitions; the new count must be larger",
            )
        if count > PARTITIONS_MAX:
            raise TopicError(ErrorCode.INVALID_PARTITIONS, f"at most {PARTITIONS_MAX} partitions")
        return topic

    def add_partitions(self, name: str, count: int, hosted: Collection[int] | None = None) -> None:
        """Grow the topic to ``count`` partitions, holding the new ones in ``hosted``
        (None: all of them)."""
        self.extend(name, self.prepare_partitions(name, count, hosted))

    def prepare_partitions(
        self, name: str, count: int, hosted: Collection[int] | None = None
    ) -> list[Partition | None]:
        """The logs of the partitions that grow the topic to ``count``, created but not
        yet added: :meth:`extend` the topic with them. Like :meth:`prepare`, this may run
        in a worker thread."""
        topic = self.check_partition_count(name, count)
        return self._open_new(name, range(len(topic.partitions), count), topic.log_config, hosted)

    def extend(self, name: str, partitions: list[Partition | None]) -> None:
        """Add partitions made by :meth:`prepare_partitions` and save the topic list."""
        topic = self.topics.get(name)
        if topic is None:
            _close_all(partitions)
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        topic.partitions.extend(partitions)
        self._save()

    def check_configs(self, name: str, configs: Mapping[str, str]) -> LogConfig:
        if name not in self.topics:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return self._log_config(configs)

    def set_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace the topic's overrides; they apply to its logs from the next append."""
        log_config = self.check_configs(name, configs)
        topic = self.topics[name]
        topic.configs = dict(configs)
        topic.log_config = log_config
        for partition in topic.partitions:
            if partition is not None:
                partition.log.update_config(log_config)
        self._save()

    def close(self) -> None:
        for partition in self.partitions():
            partition.close()


def _close_all(partitions: list[Partition | None]) -> None:
    for partition in partitions:
        if partition is not None:
            partition.close()


def _remove(partition: Partition) -> None:
    """Close ``partition`` and remove its directory (renamed first, so a crash midway
    leaves a directory that the next start removes)."""
    partition.close()
    suffix = f".{uuid.uuid4().hex}{DELETED_DIRECTORY_SUFFIX}"
    doomed = partition.directory.with_name(partition.directory.name + suffix)
    partition.directory.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)
