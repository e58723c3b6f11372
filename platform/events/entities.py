"""Entity streams: read one entity's events, append a decision's events at the version
they were decided on, and a repository that does both for a decider.

An entity is a key of an event topic: its events are the records with that key, in the
partition the key hashes to (the partitioner librdkafka uses, so events appended by the
:class:`~eventplatform.events.EventProducer` are the same entity's). Its *version* is how
many such records the partition holds. The topic must keep entity versions
(``eventplatform.entity.versions.enable=true``, as the SDK creates event topics); the
store refuses one that does not, rather than append without the check.

- :meth:`EntityStore.load` reads the entity through EntityRead, page by page, from the
  partition's entity index: the cost grows with the entity's events, not its
  partition's. Upcasters apply as the catalog decodes, and the history comes with its
  corrections applied too (:class:`~eventplatform.events.history.EntityHistory`).
- :meth:`EntityStore.append` sends a decision's events as one batch whose records carry
  ``eventplatform.expected.version`` (the version the decision saw, plus the records
  ahead in the batch): the log appends all of them or none. A refusal for the version
  raises :class:`VersionConflictError`.
- :class:`Repository` loads, decides (:func:`~eventplatform.events.deciders.decide_on`)
  and appends; on a conflict it loads and decides again, at most ``attempts`` times,
  then raises :class:`~eventplatform.events.deciders.ConcurrencyError`. A command's id
  travels as the causation id of its events, so a command sent again after a lost
  answer finds its events in the history and returns them instead of deciding twice.

An append is not retried blindly after a lost answer: the log may hold it. Sending it
again is safe all the same, since the expected versions refuse a second copy, and the
repository then finds the command's events in the reloaded history.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Generic, TypeVar

from eventplatform.client_config import KafkaConnection, client_config_of
from eventplatform.events.codec import TYPE_HEADER, EventCatalog, encode
from eventplatform.events.deciders import (
    Command,
    ConcurrencyError,
    Decider,
    Decision,
    decide_on,
)
from eventplatform.events.erasure import ERASED_HEADER, ErasedRecord
from eventplatform.events.errors import AppendError, EventError
from eventplatform.events.history import EntityHistory
from eventplatform.events.log_client import REQUEST_TIMEOUT_S_DEFAULT, LogClient
from eventplatform.events.model import Envelope, Event, EventRef, Position, envelope_for
from eventplatform.events.partitioner import partition_for_key
from eventplatform.events.snapshots import CommandMark, Snapshot, SnapshotStore
from eventplatform.events.topics import create_event_topics
from eventplatform.log.extensions import ENTITY_VERSIONS_CONFIG, EXPECTED_VERSION_HEADER
from eventplatform.log.protocol import ErrorCode
from eventplatform.log.storage.errors import CorruptRecordError
from eventplatform.log.storage.record_batch import (
    BatchHeader,
    Record,
    decode_batch,
    encode_batch,
    keyed_records,
    named_headers,
    record_value,
    split_batches,
)

READ_BYTES = 1 << 20
"""How many bytes of an entity's batches one EntityRead asks for."""
READ_PAGES_MAX = 100_000
"""Pages one load may take (1 MB each: 100 GB), so a load always ends."""
_TYPE_HEADER = TYPE_HEADER.encode()
_ERASED_HEADER = ERASED_HEADER.encode()
APPEND_EVENTS_MAX = 10_000
"""Events one append may carry: one decision is one batch."""
ATTEMPTS_DEFAULT = 5
"""How many times a repository decides a command before it gives up on a busy entity."""
SNAPSHOT_EVERY_DEFAULT = 100
"""Events between an entity's snapshots, when the repository has a snapshot store."""
COMMAND_WINDOW_DEFAULT = 1_000
"""Commands a snapshot remembers, so that one sent again is still recognised."""
PRODUCE_TIMEOUT_MS = 30_000

S = TypeVar("S")
C = TypeVar("C", bound=Command)


class EntityStoreError(EventError):
    """The log cannot serve an entity: its topic keeps no versions, or its history does
    not start where the topic does."""


class VersionConflictError(EventError):
    """An append expected ``expected`` events of the entity, and the log holds another
    number (``message`` is the log's, naming both)."""

    def __init__(self, topic: str, key: str, expected: int, message: str) -> None:
        super().__init__(f"{topic}/{key}: {message}")
        self.topic = topic
        self.key = key
        self.expected = expected


class EntityStore:
    """See the module docstring. Thread-safe; close it (or use ``with``) when done."""

    def __init__(
        self,
        bootstrap: KafkaConnection,
        catalog: EventCatalog | Iterable[type[Event]],
        *,
        request_timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT,
        client: LogClient | None = None,
    ) -> None:
        self.client_config = client_config_of(bootstrap)
        self.bootstrap = self.client_config.bootstrap
        self.catalog = catalog if isinstance(catalog, EventCatalog) else EventCatalog(catalog)
        self.request_timeout_s = request_timeout_s
        self.client = client or LogClient(self.client_config, request_timeout_s=request_timeout_s)
        self._topics_ready: set[str] = set()
        self._topics_lock = threading.Lock()

    def __enter__(self) -> EntityStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    def partition_of(self, topic: str, key: str) -> int:
        return partition_for_key(key.encode(), self.client.partition_count(topic))

    # ------------------------------------------------------------ read

    def load(
        self, topic: str, key: str, *, from_offset: int = 0, first_version: int = 0
    ) -> EntityHistory:
        """Every event of entity ``key`` in ``topic``, in log order, below the high
        watermark; raises EntityStoreError when the topic keeps no entity versions.

        From a snapshot on: the events at ``from_offset`` or after, ``first_version``
        records having come before them."""
        self._ensure_topic(topic)
        raw_key = key.encode()
        partition = self.partition_of(topic, key)
        envelopes: list[Envelope[Any]] = []
        erased: list[ErasedRecord] = []
        offset = from_offset
        for _ in range(READ_PAGES_MAX):
            answer = self.client.entity_read(topic, partition, raw_key, offset, READ_BYTES)
            if answer.error is ErrorCode.INVALID_REQUEST:
                raise EntityStoreError(f"{topic}: {answer.message}")
            if answer.error is not ErrorCode.NONE:
                raise EntityStoreError(f"{topic}/{key}: {answer.error.name}: {answer.message}")
            body = answer.body
            if body["log_start_offset"] > from_offset:
                raise EntityStoreError(
                    f"{topic}-{partition} starts at offset {body['log_start_offset']}: the "
                    f"history of {key!r} may have lost its first events"
                )
            page, page_erased = self._decode_entity(topic, partition, raw_key, offset, body)
            envelopes.extend(page)
            erased.extend(page_erased)
            if body["next_offset"] >= body["high_watermark"]:
                return EntityHistory.of(
                    topic,
                    partition,
                    key,
                    envelopes,
                    self.catalog,
                    first_version=first_version,
                    from_offset=from_offset,
                    erased=erased,
                )
            offset = body["next_offset"]
        raise EntityStoreError(f"{topic}/{key}: more than {READ_PAGES_MAX} pages of events")

    def _decode_entity(
        self, topic: str, partition: int, key: bytes, from_offset: int, body: dict[str, Any]
    ) -> tuple[list[Envelope[Any]], list[ErasedRecord]]:
        """The events of ``key`` at ``from_offset`` or after in an EntityRead answer's
        batches (which may hold other keys' records too), reading of each record only
        what an event needs: its key, its value and its type header; and the records of
        ``key`` there that the log erased."""
        data = bytes(body["records"] or b"")
        records: list[tuple[bytes | None, int, str | None]] = []  # value, offset, type
        erased: list[ErasedRecord] = []
        try:
            for header in split_batches(data, check_crc=True):
                base = header.base_offset
                erased_offsets = set()
                for _, delta, record_key, record, at, end in keyed_records(data, header.position):
                    if record_key != key or base + delta < from_offset:
                        continue
                    value, at = record_value(record, at, end)
                    if value is None and named_headers(record, at, end, _ERASED_HEADER):
                        erased_offsets.add(base + delta)
                        continue
                    types = [
                        t for t in named_headers(record, at, end, _TYPE_HEADER) if t is not None
                    ]
                    event_type = types[0].decode("utf-8", "replace") if types else None
                    records.append((value, base + delta, event_type))
                if erased_offsets:
                    erased.extend(_erased_records(topic, partition, data, header, erased_offsets))
        except CorruptRecordError as exc:
            raise EntityStoreError(f"{topic}-{partition}: a batch does not read: {exc}") from exc
        found: list[Envelope[Any]] = []
        for value, offset, event_type in records:
            position = Position(topic, partition, offset)
            found.append(self.catalog.decode(value, position, event_type))
        return found, erased

    # ------------------------------------------------------------ append

    def append(
        self,
        topic: str,
        key: str,
        items: Sequence[Event | Envelope[Any]],
        *,
        expected_version: int,
        correlation_id: uuid.UUID | None = None,
        causation_id: uuid.UUID | None = None,
    ) -> list[EventRef]:
        """Append ``items``, events of entity ``key``, as one batch, only if the entity
        has ``expected_version`` events; raises VersionConflictError when it has not,
        AppendError when the log refuses otherwise."""
        if not items:
            return []
        if len(items) > APPEND_EVENTS_MAX:
            raise AppendError(f"{len(items)} events exceed {APPEND_EVENTS_MAX} in one append", [])
        if expected_version < 0:
            raise ValueError(f"expected_version {expected_version} < 0")
        envelopes = [
            envelope_for(item, correlation_id=correlation_id, causation_id=causation_id)
            for item in items
        ]
        records = []
        for index, envelope in enumerate(envelopes):
            encoded = encode(envelope)
            if envelope.key != key or encoded.topic != topic:
                raise AppendError(
                    f"event {index} belongs to {encoded.topic}/{envelope.key}, not {topic}/{key}",
                    [],
                )
            version = str(expected_version + index).encode()
            headers = (*encoded.headers, (EXPECTED_VERSION_HEADER, version))
            records.append(Record(index, encoded.timestamp_ms, encoded.key, encoded.value, headers))
        self._ensure_topic(topic)
        partition = self.partition_of(topic, key)
        answer = self.client.produce(
            topic, partition, encode_batch(records), timeout_ms=PRODUCE_TIMEOUT_MS
        )
        if answer.error is ErrorCode.INVALID_RECORD:
            raise VersionConflictError(topic, key, expected_version, answer.message or "refused")
        if answer.error is not ErrorCode.NONE:
            raise AppendError(
                f"{topic}/{key}: the log refused the events: {answer.error.name}: {answer.message}",
                [None] * len(envelopes),
            )
        base = answer.body["base_offset"]
        return [
            EventRef(envelope.event_id, key, Position(topic, partition, base + index))
            for index, envelope in enumerate(envelopes)
        ]

    def _ensure_topic(self, topic: str) -> None:
        """Create ``topic`` as an event topic once, if it is missing; then make sure it
        keeps entity versions (an empty read that the log refuses when it does not)."""
        if topic in self._topics_ready:
            return
        with self._topics_lock:
            if topic in self._topics_ready:
                return
            settings = self.client_config.librdkafka()
            create_event_topics(settings, [topic], timeout_s=self.request_timeout_s)
            partition = self.partition_of(topic, "")
            answer = self.client.entity_read(topic, partition, b"", 0, 0)
            if answer.error is ErrorCode.INVALID_REQUEST:
                raise EntityStoreError(
                    f"{topic} does not keep entity versions ({ENTITY_VERSIONS_CONFIG}), so "
                    f"an append could not be checked against its entity's version: "
                    f"{answer.message}"
                )
            self._topics_ready.add(topic)


def _erased_records(
    topic: str, partition: int, data: bytes, header: BatchHeader, offsets: set[int]
) -> list[ErasedRecord]:
    """The erased records at ``offsets`` in the batch ``header`` heads, with their
    timestamps (decoded in full: erased records are few)."""
    batch = decode_batch(data, header.position, check_crc=False)
    return [
        ErasedRecord.of(Position(topic, partition, record.offset), record.key, record.timestamp)
        for record in batch.records
        if record.offset in offsets
    ]


class Repository(Generic[C, S]):
    """Handles commands for the entities of one topic with one decider (see the module
    docstring). ``entity_of`` names a command's entity key.

    With ``snapshots`` (a :class:`~eventplatform.events.snapshots.SnapshotStore`) it
    takes a snapshot of an entity every ``snapshot_every`` events and then folds only
    the events after it; ``fingerprint`` names the state's shape, so snapshots of
    another shape are ignored (change it when the state or the decider changes)."""

    def __init__(
        self,
        store: EntityStore,
        topic: str,
        decider: Decider[C, S],
        entity_of: Callable[[C], str],
        *,
        attempts: int = ATTEMPTS_DEFAULT,
        snapshots: SnapshotStore | None = None,
        snapshot_every: int = SNAPSHOT_EVERY_DEFAULT,
        command_window: int = COMMAND_WINDOW_DEFAULT,
        fingerprint: str = "1",
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {attempts}")
        if snapshot_every < 1 or command_window < 0:
            raise ValueError("snapshot_every must be at least 1, command_window at least 0")
        self.store = store
        self.topic = topic
        self.decider = decider
        self.entity_of = entity_of
        self.attempts = attempts
        self.snapshots = snapshots
        self.snapshot_every = snapshot_every
        self.command_window = command_window
        self.fingerprint = fingerprint
        self.conflicts = 0
        """Conflicts met so far (each cost one more load and decision)."""

    def load(self, key: str) -> tuple[S, EntityHistory]:
        """The entity's state (its corrected history folded) and its history (from its
        snapshot on, when there is a usable one)."""
        base, history, _ = self._load(key)
        return self.decider.fold((e.event for e in history.corrected), base), history

    def _load(self, key: str) -> tuple[S | None, EntityHistory, Snapshot[S] | None]:
        """The state before the history (a snapshot's, or None: the initial one), the
        history, and the snapshot it starts from."""
        snapshot = self.snapshots.get(self.topic, key) if self.snapshots is not None else None
        if snapshot is not None and snapshot.fingerprint == self.fingerprint:
            history = self.store.load(
                self.topic, key, from_offset=snapshot.offset, first_version=snapshot.version
            )
            if not history.amends_earlier_events:
                return snapshot.state, history, snapshot
        return None, self.store.load(self.topic, key), None

    def handle(self, command: C, *, correlation_id: uuid.UUID | None = None) -> Decision[S]:
        """Decide ``command`` on its entity and append the events; raises
        CommandRejectedError from the decider, ConcurrencyError after ``attempts``
        conflicts in a row."""
        key = self.entity_of(command)
        conflict: VersionConflictError | None = None
        for _ in range(self.attempts):
            base, history, snapshot = self._load(key)
            mark = snapshot.mark_of(command.command_id) if snapshot is not None else None
            if mark is not None:
                return self._repeated(key, command, mark, base, history)
            decision = decide_on(self.decider, history, command, state=base)
            if decision.repeated or not decision.events:
                return decision
            try:
                refs = self.store.append(
                    self.topic,
                    key,
                    decision.events,
                    expected_version=decision.expected_version,
                    correlation_id=correlation_id,
                    causation_id=command.command_id,
                )
            except VersionConflictError as exc:
                conflict = exc
                self.conflicts += 1
                continue
            self._maybe_snapshot(key, command, decision, refs, history, snapshot)
            return decision
        assert conflict is not None
        actual = self.store.load(self.topic, key).version
        raise ConcurrencyError(key, conflict.expected, actual, self.attempts)

    def _repeated(
        self, key: str, command: C, mark: CommandMark, base: S | None, history: EntityHistory
    ) -> Decision[S]:
        """The first answer of a command whose events lie before the snapshot."""
        then = self.store.load(self.topic, key, from_offset=mark.offset, first_version=mark.version)
        events = [
            e.event for e in then.envelopes[: mark.count] if e.causation_id == command.command_id
        ]
        state = self.decider.fold((e.event for e in history.corrected), base)
        return Decision(events, mark.version, state, repeated=True)

    def _maybe_snapshot(
        self,
        key: str,
        command: C,
        decision: Decision[S],
        refs: Sequence[EventRef],
        history: EntityHistory,
        snapshot: Snapshot[S] | None,
    ) -> None:
        if self.snapshots is None:
            return
        version = decision.expected_version + len(refs)
        if version - (snapshot.version if snapshot is not None else 0) < self.snapshot_every:
            return
        marks = list(snapshot.commands) if snapshot is not None else []
        seen: dict[uuid.UUID, CommandMark] = {}
        for number, envelope in enumerate(history.envelopes):
            cause, position = envelope.causation_id, envelope.position
            if cause is None or position is None:
                continue
            known = seen.get(cause)
            if known is None:
                seen[cause] = CommandMark(cause, position.offset, history.version_before(number), 1)
            else:
                seen[cause] = replace(known, count=known.count + 1)
        marks.extend(seen.values())
        first = refs[0].position.offset
        marks.append(CommandMark(command.command_id, first, decision.expected_version, len(refs)))
        kept = tuple(marks[-self.command_window :]) if self.command_window else ()
        offset = refs[-1].position.offset + 1
        self.snapshots.put(
            Snapshot(self.topic, key, version, offset, decision.state, kept, self.fingerprint)
        )
