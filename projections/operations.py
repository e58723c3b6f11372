"""Application functions behind ``platform projections``: run, status, retry, wait.

Each takes plain settings (a database URL, bootstrap servers, loaded apps)
and builds its adapters, so the CLI stays a thin parser and tests and apps
can call the same functions.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import confluent_kafka
from sqlalchemy import Engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from eventplatform.client_config import KafkaConnection, client_config_of
from eventplatform.events import EventError, EventRef, Position
from eventplatform.events.erasure import ErasedRecord
from eventplatform.log.metrics_endpoint import MetricsThread, new_registry
from eventplatform.projections import schema
from eventplatform.projections.apps import App, find_projection
from eventplatform.projections.batch import Record, plan_batch
from eventplatform.projections.corrections import apply_correction
from eventplatform.projections.database import create_store_engine, reading
from eventplatform.projections.errors import ApplyTimeoutError, HandlerError
from eventplatform.projections.kafka import KafkaEventReader, log_ends
from eventplatform.projections.metrics import RunnerCollector
from eventplatform.projections.model import Projection
from eventplatform.projections.premerge import BatchDelta
from eventplatform.projections.registry import (
    checkpoints_of,
    definition_changed,
    parked_count,
    registered,
    reported_status,
    row_counts,
)
from eventplatform.projections.runner import (
    COMMITS,
    PROGRESS_LOG_INTERVAL_S_DEFAULT,
    ProjectionRunner,
)
from eventplatform.projections.store import ProjectionStore

STATUS_LOG_TIMEOUT_S = 10.0
"""How long a status waits for the log's ends, and again for the lagging partitions'
timestamps, before it reports what the database knows alone."""
WAIT_POLL_S_MIN = 0.001
WAIT_POLL_S_MAX = 0.01
WAIT_ENGINES_MAX = 8
"""Engines ``wait_until_applied`` keeps for the database URLs it was given."""
NO_GROUP_YET = "-"
"""The group a projection never run against a database shows: its first run draws it."""
_wait_engines: dict[str, Engine] = {}
_wait_engines_lock = threading.Lock()


def definition_change(database_url: str, projection: Projection) -> str | None:
    """The fingerprint ``projection``'s tables were built under, when that is another
    definition's and events were applied (they need a rebuild); else None."""
    engine = create_store_engine(database_url)
    try:
        with reading(engine) as connection:
            return definition_changed(connection, projection)
    finally:
        engine.dispose()


def run_projection(
    name: str,
    apps: Sequence[App],
    *,
    database_url: str,
    bootstrap: KafkaConnection,
    batch_size: int,
    consumer_config: Mapping[str, Any] | None = None,
    stop: threading.Event | None = None,
    idle_exit_s: float | None = None,
    metrics_socket: socket.socket | None = None,
    progress_interval_s: float = PROGRESS_LOG_INTERVAL_S_DEFAULT,
) -> ProjectionRunner:
    """Run projection ``name`` as a group member until ``stop`` (or idle, if asked).

    With a ``metrics_socket`` (bound by the caller, so that a bad address fails first),
    the runner's metrics are served on it from a thread of their own while it runs."""
    projection = find_projection(name, apps)
    engine = create_store_engine(database_url)
    endpoint = None
    try:
        runner = ProjectionRunner(
            ProjectionStore(engine, projection),
            bootstrap,
            batch_size=batch_size,
            consumer_config=consumer_config,
            progress_interval_s=progress_interval_s,
        )
        if metrics_socket is not None:
            registry = new_registry()
            registry.register(RunnerCollector(runner))
            endpoint = MetricsThread(registry, metrics_socket)
            endpoint.start()
        runner.run(stop, idle_exit_s=idle_exit_s)
        return runner
    finally:
        if endpoint is not None:
            endpoint.stop()
        engine.dispose()


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    next_offset: int | None
    end_offset: int
    lag_events: int
    lag_seconds: float | None


@dataclass(frozen=True)
class ProjectionStatus:
    name: str
    status: str
    group_id: str
    partitions: list[PartitionLag]
    rows: dict[str, int | None]
    """Rows per table; None for a table the database lacks (``platform db upgrade``)."""
    parked: int
    last_error: str | None
    last_error_at: datetime | None
    updated_at: datetime | None
    lag_error: str | None = None
    """Why the lag is unknown (the cluster did not answer), or None."""

    @property
    def lag_events(self) -> int:
        return sum(partition.lag_events for partition in self.partitions)

    @property
    def lag_seconds(self) -> float | None:
        ages = [p.lag_seconds for p in self.partitions if p.lag_seconds is not None]
        return max(ages) if ages else None


def projection_status(
    apps: Sequence[App],
    *,
    database_url: str,
    bootstrap: KafkaConnection | None,
    name: str | None = None,
) -> list[ProjectionStatus]:
    """Status of every known projection (installed or registered), or of one.

    The log's ends are asked once for every projection's topics, within
    :data:`STATUS_LOG_TIMEOUT_S`: when the cluster does not answer, each status says
    why in ``lag_error`` and the rest of it still comes from the database."""
    engine = create_store_engine(database_url)
    try:
        with reading(engine) as connection:
            known = {row.name: row for row in registered(connection)}
            declared = {p.name: p for app in apps for p in app.projections}
            names = [name] if name else sorted(set(known) | set(declared))
            for each in names:
                if each not in known and each not in declared:
                    find_projection(each, apps)  # raises, naming the known projections
            topics = {each: _topics_of(declared.get(each), known.get(each)) for each in names}
            log = _LogView.read(bootstrap, sorted({t for ts in topics.values() for t in ts}))
            return [
                _status(connection, each, declared.get(each), known.get(each), topics[each], log)
                for each in names
            ]
    finally:
        engine.dispose()


def _topics_of(projection: Projection | None, row: Any) -> list[str]:
    return list(projection.topics) if projection else list(row.topics if row else [])


@dataclass(frozen=True)
class _LogView:
    """What a status needs of the log: each partition's bounds, and the connection to ask
    timestamps on; or why the log could not be asked."""

    bootstrap: KafkaConnection | None
    ends: dict[tuple[str, int], tuple[int, int]]
    error: str | None

    @classmethod
    def read(cls, bootstrap: KafkaConnection | None, topics: list[str]) -> _LogView:
        if bootstrap is None or not topics:
            return cls(bootstrap, {}, None)
        try:
            return cls(bootstrap, log_ends(bootstrap, topics, STATUS_LOG_TIMEOUT_S), None)
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0] if exc.args else exc
            reason = error.str() if isinstance(error, confluent_kafka.KafkaError) else str(error)
            brokers = client_config_of(bootstrap).bootstrap
            return cls(bootstrap, {}, f"the cluster at {brokers} did not answer: {reason}")


def _status(
    connection: Any,
    name: str,
    projection: Projection | None,
    row: Any,
    topics: list[str],
    log: _LogView,
) -> ProjectionStatus:
    checkpoints = checkpoints_of(connection, name)
    partitions = _lags(log, topics, checkpoints) if log.error is None else []
    rows = row_counts(connection, projection.tables) if projection else {}
    return ProjectionStatus(
        name=name,
        status=reported_status(
            row,
            any(rows.values()),
            changed=projection is not None
            and definition_changed(connection, projection) is not None,
        ),
        group_id=_group_of(projection, row),
        partitions=partitions,
        rows=rows,
        parked=parked_count(connection, name),
        last_error=row.last_error if row else None,
        last_error_at=row.last_error_at if row else None,
        updated_at=row.updated_at if row else None,
        lag_error=log.error,
    )


def _group_of(projection: Projection | None, row: Any) -> str:
    """The group the runners join: declared, else the database's ("-" before a first run)."""
    if projection is not None and projection.group_id:
        return projection.group_id
    return str(row.group_id) if row else NO_GROUP_YET


def _lags(
    log: _LogView, topics: list[str], checkpoints: dict[tuple[str, int], int]
) -> list[PartitionLag]:
    ends = {tp: bounds for tp, bounds in log.ends.items() if tp[0] in topics}
    behind = {
        partition: checkpoints.get(partition, start)
        for partition, (start, end) in ends.items()
        if checkpoints.get(partition, start) < end
    }
    times: dict[tuple[str, int], int] = {}
    if behind and log.bootstrap is not None:
        reader = KafkaEventReader(log.bootstrap)
        try:
            times = reader.timestamps(behind, STATUS_LOG_TIMEOUT_S)
        finally:
            reader.close()
    now_ms = time.time() * 1000
    lags = []
    for (topic, partition), (start, end) in sorted(ends.items()):
        next_offset = checkpoints.get((topic, partition))
        lag = end - max(next_offset if next_offset is not None else start, start)
        stamp = times.get((topic, partition))
        seconds = max(0.0, (now_ms - stamp) / 1000) if stamp is not None and lag else None
        lags.append(PartitionLag(topic, partition, next_offset, end, lag, seconds))
    return lags


def wait_until_applied(
    target: Engine | str,
    projection: str,
    refs: Iterable[EventRef | Position],
    *,
    timeout_s: float = 30.0,
) -> None:
    """Block until ``projection`` has applied every given position (read-your-writes).

    The checkpoints are read again after WAIT_POLL_S_MIN, doubling up to
    WAIT_POLL_S_MAX, and at once whenever a runner in this process commits.
    """
    wanted: dict[tuple[str, int], int] = {}
    for ref in refs:
        position = ref.position if isinstance(ref, EventRef) else ref
        key = (position.topic, position.partition)
        wanted[key] = max(wanted.get(key, -1), position.offset)
    engine = _wait_engine(target) if isinstance(target, str) else target
    deadline = time.monotonic() + timeout_s
    pause = WAIT_POLL_S_MIN
    while True:
        commits = COMMITS.count
        with reading(engine) as connection:
            checkpoints = checkpoints_of(connection, projection)
        if all(checkpoints.get(key, 0) > offset for key, offset in wanted.items()):
            return
        if time.monotonic() >= deadline:
            raise ApplyTimeoutError(
                f"{projection} did not apply {len(wanted)} partition position(s) "
                f"within {timeout_s}s"
            )
        COMMITS.wait_after(commits, min(pause, deadline - time.monotonic()))
        pause = min(pause * 2, WAIT_POLL_S_MAX)


def _wait_engine(url: str) -> Engine:
    """The engine kept for ``url`` (a wait should not open a connection pool each time);
    past WAIT_ENGINES_MAX URLs the oldest is disposed of."""
    with _wait_engines_lock:
        engine = _wait_engines.pop(url, None)
        if engine is None:
            # A pooled SQLite connection keeps the file it opened, even once that file is
            # replaced at the same path (a fresh demo, a restored backup): connect anew.
            sqlite = make_url(url).get_backend_name() == "sqlite"
            engine = create_store_engine(url, **({"poolclass": NullPool} if sqlite else {}))
        _wait_engines[url] = engine
        while len(_wait_engines) > WAIT_ENGINES_MAX:
            _wait_engines.pop(next(iter(_wait_engines))).dispose()
        return engine


@dataclass(frozen=True)
class RetryOutcome:
    retried: int
    still_parked: int


def retry_dead_letters(
    name: str,
    apps: Sequence[App],
    *,
    database_url: str,
    bootstrap: KafkaConnection,
    ids: Sequence[int] = (),
) -> RetryOutcome:
    """Apply parked events again (the handler may have been fixed); mark the ones that pass."""
    projection = find_projection(name, apps)
    engine = create_store_engine(database_url)
    reader = KafkaEventReader(bootstrap)
    store = ProjectionStore(engine, projection)
    retried = still = 0
    try:
        for letter_id, position in _parked(engine, name, ids):
            if _retry_one(store, reader, letter_id, position):
                retried += 1
            else:
                still += 1
        return RetryOutcome(retried, still)
    finally:
        reader.close()
        engine.dispose()


def _retry_one(
    store: ProjectionStore, reader: KafkaEventReader, letter_id: int, position: Position
) -> bool:
    """Apply one parked event in its own transaction; False if it is poison still."""
    if _corrected_since(store, position):
        # The correction applied the event's current content; applying the
        # original as well would count it twice.
        with store.transaction(reader) as transaction:
            transaction.resolve(letter_id)
        return True
    value = reader([position]).get(position)
    if isinstance(value, ErasedRecord):
        # Erased since it was parked: it holds nothing, as the parked event did.
        with store.transaction(reader) as transaction:
            transaction.history.record_erased([position])
            transaction.resolve(letter_id)
        return True
    record = Record(position, value, None)
    plan = plan_batch(
        store.projection, [record], {(position.topic, position.partition): None}, store.premerger
    )
    try:
        with store.transaction(reader) as transaction:
            if plan.stop_at is not None:
                raise _StillPoisonError(str(plan.stop_at.error))
            for step in plan.steps:
                if isinstance(step, BatchDelta):
                    transaction.apply_delta(step)
                elif step.kind == "poison":
                    raise _StillPoisonError(str(step.error))
                else:
                    assert step.envelope is not None
                    apply_correction(transaction, step.envelope)
            transaction.resolve(letter_id)
    except (_StillPoisonError, HandlerError, EventError):
        return False
    return True


def _corrected_since(store: ProjectionStore, position: Position) -> bool:
    table = schema.corrected_events
    query = select(table.c.offset).where(
        table.c.projection == store.projection.name,
        table.c.topic == position.topic,
        table.c.partition == position.partition,
        table.c.offset == position.offset,
    )
    with reading(store.engine) as connection:
        return connection.execute(query).first() is not None


class _StillPoisonError(Exception):
    pass


def _parked(engine: Engine, name: str, ids: Sequence[int]) -> list[tuple[int, Position]]:
    table = schema.dead_letters
    query = select(table.c.id, table.c.topic, table.c.partition, table.c.offset).where(
        table.c.projection == name, table.c.status == schema.DEAD_LETTER_PARKED
    )
    if ids:
        query = query.where(table.c.id.in_(list(ids)))
    with reading(engine) as connection:
        rows = connection.execute(query.order_by(table.c.id)).all()
    return [(row.id, Position(row.topic, row.partition, row.offset)) for row in rows]


def projection_rows(url: str, projection: Projection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the projection's tables by table name, in primary-key order.

    For comparing two states of a projection (a rebuild against the runner's).
    """
    engine = create_store_engine(url)
    try:
        with reading(engine) as connection:
            return {
                str(table.name): [
                    tuple(row)
                    for row in connection.execute(select(table).order_by(*table.primary_key))
                ]
                for table in projection.tables
            }
    finally:
        engine.dispose()
