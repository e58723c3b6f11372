"""The projection runner: a consumer-group member that folds events into SQL.

Exactly-once effect comes from the store, not from the group: each batch's
rows and its checkpoints commit in one SQL transaction, checkpoints move only
by compare-and-set, and on assignment the runner seeks to the stored
checkpoint rather than to the group's committed offset. A member that lost
its partitions (a long pause, a rebalance it missed) finds its next
compare-and-set failing and drops its batch. Offsets are still committed to
the group, the checkpoints on assignment and the applied offsets after each
transaction, so ``platform groups describe`` shows the lag the store has; each
offset's metadata names the projection (``GROUP_MARKER``), so tools can tell
the group is a projection's. The group is the database's (see
:func:`~.registry.register_projection`): runners writing to another database
are in another group, and read every partition too.

A runner whose definition is not the one the tables were built under (the
registry's fingerprint differs and checkpoints exist, see :mod:`.registry`)
applies nothing: it records the status ``rebuild needed`` and raises
:class:`~.errors.DefinitionChangedError`, naming ``platform projections
rebuild``. The runner does not rebuild by itself: a rebuild needs Spark, which
a runner's host need not have; the old tables stay live meanwhile.

Revocation needs no special care: confluent-kafka calls the rebalance
callbacks from inside ``consume``, between batches, so a revoked partition
never has a batch in flight.

A record the log erased is no event: the batch skips it, its offset moves the
checkpoint like any other, and the same transaction records that it contributed
nothing, for corrections that reach it later (see :mod:`.corrections`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import confluent_kafka
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, OperationalError

from eventplatform.client_config import KafkaConnection, client_config_of
from eventplatform.events import EventError, Position
from eventplatform.projections.batch import (
    BatchPlan,
    Record,
    Step,
    plan_batch,
    young_collections_rare,
)
from eventplatform.projections.caches import RecentValues
from eventplatform.projections.corrections import apply_corrections
from eventplatform.projections.errors import (
    CheckpointConflictError,
    DefinitionChangedError,
    HandlerError,
    ProjectionStoppedError,
)
from eventplatform.projections.fold import link_problem
from eventplatform.projections.kafka import KafkaEventReader
from eventplatform.projections.model import GROUP_MARKER
from eventplatform.projections.premerge import BatchDelta
from eventplatform.projections.registry import (
    RUNNER_HEARTBEAT_S,
    STATUS_REBUILD_NEEDED,
    STATUS_RUNNING,
    STATUS_STOPPED,
    definition_changed,
    rebuild_needed_message,
    register_projection,
    set_status,
)
from eventplatform.projections.store import ProjectionStore, StoreTransaction

log = logging.getLogger(__name__)

BATCH_SIZE_DEFAULT = 1000
POLL_TIMEOUT_S_DEFAULT = 0.5
"""How long a poll waits for the first record when none is there."""
BATCH_LINGER_S_DEFAULT = 0.01
"""How long a batch that is not full waits for more records, when records come often
enough that more are due within it (see :class:`ArrivalRate`)."""
BATCH_GATHER_RECORDS = 16
"""The records a lingering batch waits for: once that many more are there, it goes
(at 16 a batch, its fixed cost weighs less than its events')."""
RATE_WINDOW_S = 1.0
"""The span over which a runner counts the records it polled to know their rate."""
GROUP_COMMIT_INTERVAL_S = 1.0
"""How often applied offsets are committed to the group (the store's checkpoints, not
these, say where a runner resumes; the group's show lag)."""
RETRY_BACKOFF_S = 0.5
RETRY_BACKOFF_S_MAX = 10.0
LAG_REFRESH_INTERVAL_S = 1.0
"""How often the runner reads its partitions' log ends (for its lag) from the consumer."""
WATERMARK_TIMEOUT_S = 2.0
"""How long asking the broker for a log end may take, when the consumer has none yet."""
PROGRESS_LOG_INTERVAL_S_DEFAULT = 30.0
TopicPartition = tuple[str, int]


class ArrivalRate:
    """How many records a runner polled per second lately, to know whether a batch that
    is not full is worth holding for more.

    A batch costs the runner a fixed part (the transaction, the checkpoint, one
    statement per table, the commit) besides its events: applied one or two at a
    time, as they come at a few hundred a second, records cost the runner several
    times what they cost in batches of tens. Holding a batch for ``linger_s`` when
    at least one more record is due within it (the rate over the last
    ``window_s``, times ``linger_s``) gathers them, at the price of that much
    latency; when records are rare, holding would gather nothing, and a batch goes
    at once.
    """

    __slots__ = ("_counts", "_polled", "window_s")

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._counts: deque[tuple[float, int]] = deque()
        self._polled = 0

    def note(self, count: int, now: float) -> None:
        """``count`` records were polled at ``now`` (seconds, monotonic)."""
        if count:
            self._counts.append((now, count))
            self._polled += count
        self._forget(now)

    def per_second(self, now: float) -> float:
        self._forget(now)
        return self._polled / self.window_s

    def worth_lingering(self, linger_s: float, now: float) -> bool:
        """Whether at least one more record is due within ``linger_s``."""
        return linger_s > 0 and self.per_second(now) * linger_s >= 1.0

    def _forget(self, now: float) -> None:
        counts, start = self._counts, now - self.window_s
        while counts and counts[0][0] < start:
            self._polled -= counts.popleft()[1]


@dataclass(slots=True)
class RunnerStats:
    """Running totals. ``events`` counts every record of a committed batch, its
    corrections and parked events included; ``corrections`` counts the corrections
    applied (not parked)."""

    batches: int = 0
    events: int = 0
    parked: int = 0
    conflicts: int = 0
    retries: int = 0
    corrections: int = 0


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    """Where a runner stands in one partition it is assigned: the next offset it will
    apply (None before its first), the log end it last saw (None before it knows it;
    never below the next offset), and the log time of the last event it applied
    (epoch milliseconds, or None)."""

    next_offset: int | None
    log_end: int | None
    applied_timestamp_ms: int | None

    @property
    def lag_events(self) -> int | None:
        if self.log_end is None:
            return None
        return self.log_end - (self.next_offset or 0)


class CommitSignal:
    """Tells the threads of this process that wait for a projection's progress (the wait
    API) that a runner of this process committed, so that they look at once instead
    of at their next poll. A waiter notes :attr:`count` before it reads the
    checkpoints, so a commit between its read and its wait is not missed."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._count = 0

    @property
    def count(self) -> int:
        return self._count

    def committed(self) -> None:
        with self._condition:
            self._count += 1
            self._condition.notify_all()

    def wait_after(self, count: int, timeout_s: float) -> None:
        """Return once a commit after ``count`` was signalled, or after ``timeout_s``."""
        with self._condition:
            self._condition.wait_for(lambda: self._count != count, max(timeout_s, 0.0))


COMMITS = CommitSignal()
"""Every runner of this process signals here after each committed transaction."""


class ProjectionRunner:
    """Runs one projection as a member of its consumer group until told to stop."""

    def __init__(
        self,
        store: ProjectionStore,
        bootstrap: KafkaConnection,
        *,
        batch_size: int = BATCH_SIZE_DEFAULT,
        poll_timeout_s: float = POLL_TIMEOUT_S_DEFAULT,
        batch_linger_s: float = BATCH_LINGER_S_DEFAULT,
        consumer_config: Mapping[str, Any] | None = None,
        on_assign: Callable[[list[TopicPartition]], None] | None = None,
        on_commit: Callable[[RunnerStats], None] | None = None,
        progress_interval_s: float = PROGRESS_LOG_INTERVAL_S_DEFAULT,
    ) -> None:
        """``on_assign`` hears of each assignment (after the seek to the checkpoints),
        ``on_commit`` of each committed batch, with the running totals. Every
        ``progress_interval_s`` the runner logs one line of progress and lag."""
        self.store = store
        self.projection = store.projection
        self.batch_size = batch_size
        self.poll_timeout_s = poll_timeout_s
        self.batch_linger_s = batch_linger_s
        self.arrivals = ArrivalRate()
        self.stats = RunnerStats()
        self.expected: dict[TopicPartition, int | None] = {}
        self.log_ends: dict[TopicPartition, int] = {}
        """The log end of each assigned partition, read every LAG_REFRESH_INTERVAL_S."""
        self.applied_timestamps_ms: dict[TopicPartition, int] = {}
        """The log time of the last event applied, per partition."""
        self.progress_interval_s = progress_interval_s
        self._polled_timestamps_ms: dict[TopicPartition, int] = {}
        self._lag_read_at = -LAG_REFRESH_INTERVAL_S
        self._progress_at = time.monotonic()
        self._progress_events = 0
        self._idle_since = self._heard_at = time.monotonic()
        self._on_assign = on_assign
        self._on_commit = on_commit
        self._uncommitted: dict[TopicPartition, int] = {}
        self._group_committed_at = 0.0
        self._connection: Connection | None = None
        """The database connection the batches commit on, kept between them."""
        self._bootstrap = client_config_of(bootstrap)
        self._consumer_config = dict(consumer_config or {})
        self._log_reader = KafkaEventReader(self._bootstrap)
        self._reader = RecentValues(self._log_reader)
        self._consumer: confluent_kafka.Consumer | None = None
        self.group_id: str | None = None
        """The consumer group joined, known once :meth:`run` registered the projection."""
        self._marker = GROUP_MARKER + self.projection.name

    def run(self, stop: threading.Event | None = None, *, idle_exit_s: float | None = None) -> None:
        """Consume and apply until ``stop`` is set (or, given ``idle_exit_s``, until idle).

        Raises DefinitionChangedError, having applied nothing, when the tables were
        built under another definition."""
        self.group_id = register_projection(self.store)
        self._refuse_changed_definition()
        self._consumer = confluent_kafka.Consumer(
            {
                **self._bootstrap.librdkafka(),
                "client.id": runner_client_id(self.projection.name),
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                **self._consumer_config,
            }
        )
        with young_collections_rare():
            self._run(stop, idle_exit_s)

    def _refuse_changed_definition(self) -> None:
        with self.store.engine.connect() as connection:
            stored = definition_changed(connection, self.projection)
        if stored is None:
            return
        message = rebuild_needed_message(self.projection.name)
        set_status(self.store, STATUS_REBUILD_NEEDED, error=message)
        raise DefinitionChangedError(f"{self.projection.name}: {message}")

    def _run(self, stop: threading.Event | None, idle_exit_s: float | None) -> None:
        assert self._consumer is not None
        self._consumer.subscribe(
            list(self.projection.topics),
            on_assign=self._assigned,
            on_revoke=self._revoked,
            on_lost=self._revoked,
        )
        self._idle_since = self._heard_at = time.monotonic()
        try:
            while stop is None or not stop.is_set():
                self._heartbeat()
                records = self._poll()
                if records:
                    self._apply_with_retry(records)
                    self._idle_since = time.monotonic()
                elif idle_exit_s is not None and self._idle_for(idle_exit_s):
                    break
                self._note_progress(time.monotonic())
        except ProjectionStoppedError:
            raise  # its status ("failed", with the error) is already recorded
        except BaseException as exc:
            set_status(self.store, "failed", error=repr(exc))
            raise
        else:
            set_status(self.store, STATUS_STOPPED)
        finally:
            self.close()

    def _heartbeat(self) -> None:
        """Refresh the registry's row every RUNNER_HEARTBEAT_S, so that a status can tell a
        running runner from one that was killed; a store that fails it is retried at the
        next beat (the batches say more about the store than the beat does)."""
        now = time.monotonic()
        if now - self._heard_at < RUNNER_HEARTBEAT_S:
            return
        self._heard_at = now
        try:
            set_status(self.store, STATUS_RUNNING)
        except DBAPIError as exc:
            log.info("%s: refreshing its status: %s", self.projection.name, exc)

    def _idle_for(self, seconds: float) -> bool:
        """Idle (nothing polled) for ``seconds`` since the last batch or assignment."""
        return bool(self.expected) and time.monotonic() - self._idle_since > seconds

    def close(self) -> None:
        try:
            if self._consumer is not None:
                self._commit_to_group(force=True)
                self._consumer.close()
        finally:
            self._log_reader.close()
            self._drop_connection()

    def _kept_connection(self) -> Connection:
        if self._connection is None:
            self._connection = self.store.engine.connect()
        return self._connection

    def _drop_connection(self) -> None:
        """Give the kept connection back (after a database error, a fresh one is taken:
        the pool checks that one is alive before it hands it out)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(DBAPIError):
                connection.close()

    def _poll(self) -> list[Record]:
        # What is fetched already makes a batch: a full one when the runner is behind.
        # With nothing there, wait for a record. A batch that is not full waits for
        # more within the linger, if records come often enough that more are due.
        assert self._consumer is not None
        consume = self._consumer.consume
        messages = consume(self.batch_size, 0) or consume(1, self.poll_timeout_s)
        now = time.monotonic()
        self.arrivals.note(len(messages), now)
        missing = self.batch_size - len(messages)
        if messages and missing and self.arrivals.worth_lingering(self.batch_linger_s, now):
            later = consume(min(missing, BATCH_GATHER_RECORDS), self.batch_linger_s)
            self.arrivals.note(len(later), time.monotonic())
            messages += later
        records = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise confluent_kafka.KafkaException(error)
                log.warning("%s: consumer error: %s", self.projection.name, error)
                continue
            position = Position(message.topic(), message.partition(), message.offset())  # type: ignore[arg-type]
            self._polled_timestamps_ms[(position.topic, position.partition)] = message.timestamp()[
                1
            ]
            # A consumer's header values are bytes (or None): no conversion needed.
            records.append(Record(position, message.value(), message.headers()))  # type: ignore[arg-type]
        self._reader.remember((record.position, record.value) for record in records)
        return records

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        checkpoints = self.store.checkpoints((p.topic, p.partition) for p in partitions)
        for partition in partitions:
            checkpoint = checkpoints.get((partition.topic, partition.partition))
            self.expected[(partition.topic, partition.partition)] = checkpoint
            partition.offset = (
                confluent_kafka.OFFSET_BEGINNING if checkpoint is None else checkpoint
            )
        consumer.assign(partitions)
        # The group's offsets show the checkpoints from the start, whatever moved them
        # meanwhile (a rebuild, a reset of the group, another database's runners).
        self._uncommitted.update(checkpoints)
        self._commit_to_group(force=True)
        self._idle_since = time.monotonic()
        log.info("%s: assigned %s", self.projection.name, sorted(self.expected))
        if self._on_assign is not None:
            self._on_assign([(p.topic, p.partition) for p in partitions])

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        self._commit_to_group(force=True)
        self._reader.forget()
        for partition in partitions:
            key = (partition.topic, partition.partition)
            self.expected.pop(key, None)
            self.log_ends.pop(key, None)
            self.applied_timestamps_ms.pop(key, None)
        consumer.unassign()

    def _apply_with_retry(self, records: list[Record]) -> None:
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                self.apply(records)
                return
            except CheckpointConflictError as exc:
                self.stats.conflicts += 1
                log.info("%s: %s; re-reading checkpoints", self.projection.name, exc)
                self._reseek(records)
                return
            except (OperationalError, DBAPIError) as exc:
                self._drop_connection()
                if not _retryable(exc):
                    raise
                self.stats.retries += 1
                log.warning("%s: store error, retrying: %s", self.projection.name, exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_S_MAX)

    def apply(self, records: list[Record]) -> None:
        """Apply one polled batch in one transaction; raise ProjectionStoppedError on poison."""
        plan = self._plan(records)
        if plan.moves:
            try:
                self._commit(plan)
            except _PoisonStopError as stop:
                plan = self._plan(_before(records, stop.position))
                self._commit(plan)
                plan.stop_at = stop.step
        if plan.stop_at is not None:
            self._stop(plan.stop_at)

    def _plan(self, records: list[Record]) -> BatchPlan:
        return plan_batch(self.projection, records, self.expected, self.store.premerger)

    def _commit(self, plan: BatchPlan) -> None:
        with self.store.transaction(self._reader, self._kept_connection()) as transaction:
            transaction.advance(plan.moves)
            transaction.history.record_erased(plan.erased)
            self._run_steps(transaction, plan.steps)
        for partition, (_, next_offset) in plan.moves.items():
            self.expected[partition] = next_offset
            stamp = self._polled_timestamps_ms.get(partition)
            if stamp is not None:
                self.applied_timestamps_ms[partition] = stamp
        self.stats.batches += 1
        self.stats.events += plan.events
        self.stats.corrections += sum(
            1 for step in plan.steps if isinstance(step, Step) and step.kind == "correct"
        )
        for partition, (_, next_offset) in plan.moves.items():
            self._uncommitted[partition] = next_offset
        COMMITS.committed()
        self._commit_to_group()
        if self._on_commit is not None:
            self._on_commit(self.stats)

    def progress(self) -> dict[TopicPartition, PartitionProgress]:
        """Where the runner stands in each partition it is assigned (safe to call from
        another thread: it copies what the runner's thread writes)."""
        expected = dict(self.expected)
        ends = dict(self.log_ends)
        stamps = dict(self.applied_timestamps_ms)
        progress = {}
        for partition, next_offset in expected.items():
            end = ends.get(partition)
            if end is not None and next_offset is not None:
                end = max(end, next_offset)  # the runner applied past the end it last read
            progress[partition] = PartitionProgress(next_offset, end, stamps.get(partition))
        return progress

    def _note_progress(self, now: float) -> None:
        """Refresh the log ends every LAG_REFRESH_INTERVAL_S; log a line of progress every
        ``progress_interval_s``."""
        if now - self._lag_read_at >= LAG_REFRESH_INTERVAL_S:
            self._lag_read_at = now
            self._read_log_ends()
        if now - self._progress_at < self.progress_interval_s:
            return
        applied = self.stats.events - self._progress_events
        lags = [p.lag_events for p in self.progress().values()]
        known = [lag for lag in lags if lag is not None]
        log.info(
            "%s: applied %d events in the last %.1f s (%d in all, %d parked), lag %s events "
            "over %d partitions",
            self.projection.name,
            applied,
            now - self._progress_at,
            self.stats.events,
            self.stats.parked,
            sum(known) if len(known) == len(lags) else "unknown",
            len(lags),
        )
        self._progress_at = now
        self._progress_events = self.stats.events

    def _read_log_ends(self) -> None:
        """The high watermark of each assigned partition: the one the consumer's fetches
        brought back, else (before its first fetch) the broker's answer."""
        assert self._consumer is not None
        for partition in list(self.expected):
            place = confluent_kafka.TopicPartition(*partition)
            try:
                _, high = self._consumer.get_watermark_offsets(place, cached=True)
                if high < 0:
                    _, high = self._consumer.get_watermark_offsets(
                        place, timeout=WATERMARK_TIMEOUT_S, cached=False
                    )
            except (confluent_kafka.KafkaException, RuntimeError) as exc:
                log.debug("%s: no log end for %s: %s", self.projection.name, partition, exc)
                continue
            if high >= 0:
                self.log_ends[partition] = high

    def _commit_to_group(self, *, force: bool = False) -> None:
        """Commit the applied offsets to the group, at most every GROUP_COMMIT_INTERVAL_S."""
        now = time.monotonic()
        if (
            self._consumer is None
            or not self._uncommitted
            or (not force and now - self._group_committed_at < GROUP_COMMIT_INTERVAL_S)
        ):
            return
        offsets = [
            confluent_kafka.TopicPartition(*tp, o, metadata=self._marker)
            for tp, o in self._uncommitted.items()
        ]
        self._uncommitted = {}
        self._group_committed_at = now
        try:
            self._consumer.commit(offsets=offsets, asynchronous=True)
        except confluent_kafka.KafkaException as exc:  # lag shows later; the store is whole
            log.info("%s: committing offsets to the group: %s", self.projection.name, exc)

    def _run_steps(self, transaction: StoreTransaction, steps: list[Step | BatchDelta]) -> None:
        targets = [
            target
            for step in steps
            if isinstance(step, Step) and step.kind == "correct" and step.envelope is not None
            if link_problem(step.record.position, target := step.envelope.event.of.position) is None
        ]
        if targets:  # one pass over the log for every correction's original
            transaction.history.prefetch(targets)
        run: list[Step] = []
        for step in steps:
            if isinstance(step, Step) and step.kind == "correct":
                run.append(step)
                continue
            self._correct(transaction, run)
            run = []
            if isinstance(step, BatchDelta):
                transaction.apply_delta(step)
            else:
                self._park(transaction, step)
        self._correct(transaction, run)

    def _correct(self, transaction: StoreTransaction, run: list[Step]) -> None:
        """Apply a run of corrections together; park (or stop at) the poison ones.

        Should the writes meet a handler error (a handler that is not pure), the
        run is undone and its corrections applied one at a time instead, so the
        error is the correction's that met it."""
        if not run:
            return
        stop = self.projection.on_error == "stop"
        try:
            with transaction.savepoint():
                failed = apply_corrections(
                    transaction, [_envelope(step) for step in run], stop_at_poison=stop
                )
        except (HandlerError, EventError) as exc:
            if len(run) > 1:
                for step in run:
                    self._correct(transaction, [step])
                return
            failed = {0: exc}
        for index, error in sorted(failed.items()):
            step = run[index]
            step.kind, step.error = "poison", error
            if stop:
                raise _PoisonStopError(step) from error
            self._park(transaction, step)

    def _park(self, transaction: StoreTransaction, step: Step) -> None:
        assert step.error is not None
        log.warning("%s: parked %s: %s", self.projection.name, step.record.position, step.error)
        transaction.park(step.record.position, step.error, step.record.value, step.event_type)
        self.stats.parked += 1

    def _stop(self, step: Step) -> None:
        message = f"poison event at {step.record.position}: {step.error}"
        set_status(self.store, "failed", error=message)
        raise ProjectionStoppedError(f"{self.projection.name}: {message}") from step.error

    def _reseek(self, records: list[Record]) -> None:
        partitions = {(r.position.topic, r.position.partition) for r in records}
        checkpoints = self.store.checkpoints(partitions)
        for partition in partitions:
            if partition not in self.expected:
                continue
            checkpoint = checkpoints.get(partition)
            self.expected[partition] = checkpoint
            offset = confluent_kafka.OFFSET_BEGINNING if checkpoint is None else checkpoint
            assert self._consumer is not None
            self._consumer.seek(confluent_kafka.TopicPartition(*partition, offset))


def runner_client_id(projection: str) -> str:
    """The ``client.id`` a runner's consumer gives, so that a group's description names
    each member by projection, host and process (not librdkafka's ``rdkafka``)."""
    return f"{projection}@{socket.gethostname() or 'localhost'}:{os.getpid()}"


def _envelope(step: Step) -> Any:
    assert step.envelope is not None
    return step.envelope


class _PoisonStopError(Exception):
    def __init__(self, step: Step) -> None:
        super().__init__(str(step.record.position))
        self.step = step
        self.position = step.record.position


def _before(records: list[Record], position: Position) -> list[Record]:
    index = next(i for i, record in enumerate(records) if record.position == position)
    return records[:index]


def _retryable(exc: DBAPIError) -> bool:
    """Connection loss, lock timeouts, deadlocks and serialization failures are retried."""
    if exc.connection_invalidated or isinstance(exc, OperationalError):
        return True
    code = getattr(exc.orig, "sqlstate", None)
    return code in {"40001", "40P01", "55P03", "57P01", "08006", "08003", "08000"}
