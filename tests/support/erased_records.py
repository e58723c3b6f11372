"""Histories with erased records, for the erasure tests of the runner and of Spark replay.

An erased record keeps its offset, timestamp and key; its value is null and its one
header ``eventplatform.erased``. A plain producer sends exactly such a record, so
:class:`ErasureLog` appends a subject's events with the SDK and erased records with
confluent-kafka, to one partition of the subject's topic, and keeps the history in log
order, where :func:`folded` computes the tables the history gives (an erased record
holds nothing; a correction of one stands at its place).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Producer
from correction_streams import CONTRIBUTIONS, Subject
from sqlalchemy import Engine, select

from eventplatform.events import (
    ERASED_HEADER,
    Correction,
    Envelope,
    ErasedRecord,
    Event,
    EventProducer,
    EventRef,
    Position,
)
from eventplatform.projections import schema
from eventplatform.projections.errors import ApplyTimeoutError
from eventplatform.projections.fold import fold, visible
from eventplatform.projections.operations import wait_until_applied
from eventplatform.projections.runner import ProjectionRunner
from eventplatform.projections.store import ProjectionStore

DELIVERY_TIMEOUT_S = 10.0
APPLY_TIMEOUT_S = 60.0
APPLY_POLL_S = 0.5
STOP_TIMEOUT_S = 30.0
RUNNER_POLL_TIMEOUT_S = 0.1

Logged = Envelope[Any] | ErasedRecord


class ErasureLog:
    """Appends one subject's events and erased records to partition 0 of its topic."""

    def __init__(self, bootstrap: str, subject: Subject) -> None:
        self.subject = subject
        self.topic = subject.event_class.event_topic
        self.events = EventProducer(bootstrap)
        self.raw = Producer({"bootstrap.servers": bootstrap})
        self.history: list[Logged] = []

    def close(self) -> None:
        self.events.close()

    @property
    def last(self) -> Position:
        return position_of(self.history[-1])

    def tick(self, entity: str, amount: int | None, label: str) -> Envelope[Any]:
        return self.append(self.subject.event_class(entity=entity, amount=amount, label=label))

    def append(self, event: Event) -> Envelope[Any]:
        envelope = Envelope(event)
        [ref] = self.events.append([envelope])
        assert ref.position.partition == 0, "the tests' topics have one partition"
        placed = envelope.at(ref.position)
        self.history.append(placed)
        return placed

    def erased(self, key: str) -> ErasedRecord:
        """Append a record as the log leaves one it erased: key, timestamp, null value, and
        the one header."""
        delivered: list[Any] = []
        timestamp_ms = int(time.time() * 1000)
        self.raw.produce(
            self.topic,
            key=key.encode(),
            value=None,
            headers=[(ERASED_HEADER, b"")],
            partition=0,
            timestamp=timestamp_ms,
            on_delivery=lambda error, message: delivered.append((error, message)),
        )
        assert self.raw.flush(DELIVERY_TIMEOUT_S) == 0
        [(error, message)] = delivered
        assert error is None, error
        record = ErasedRecord(Position(self.topic, 0, message.offset()), key, timestamp_ms)
        self.history.append(record)
        return record

    def correct(self, target: Logged, **content: Any) -> Envelope[Any]:
        """Append a correction of ``target``; an erased record is named as the event it
        held when the correction was decided."""
        if isinstance(target, ErasedRecord):
            named: EventRef | Envelope[Any] = EventRef(uuid.uuid4(), target.key, target.position)
        else:
            named = target
        return self.append(Correction(of=named, **content))

    def replace(self, target: Logged, entity: str, amount: int | None, label: str) -> Any:
        replacement = self.subject.event_class(entity=entity, amount=amount, label=label)
        return self.correct(target, replacement=replacement)


def position_of(logged: Logged) -> Position:
    assert logged.position is not None
    return logged.position


def folded(subject: Subject, history: Sequence[Logged]) -> dict[str, Any]:
    """Each table's rows as ``correction_streams.stored_tables`` reads them, from the
    in-memory fold of ``history``."""
    tables = fold(subject.projection, history)
    return {
        name: {
            key: {**visible(plan, state), CONTRIBUTIONS: state[CONTRIBUTIONS]}
            for key, state in tables[name].items()
        }
        for name, plan in subject.projection.plans.items()
    }


def parked_errors(engine: Engine, subject: Subject) -> list[str]:
    table = schema.dead_letters
    query = select(table.c.error).where(table.c.projection == subject.projection.name)
    with engine.connect() as connection:
        return list(connection.execute(query).scalars())


def corrected_events(engine: Engine, subject: Subject) -> list[tuple[Any, ...]]:
    """The projection's corrected-event records, as a runner or a replay left them."""
    table = schema.corrected_events
    query = (
        select(table)
        .where(table.c.projection == subject.projection.name)
        .order_by(table.c.topic, table.c.partition, table.c.offset)
    )
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(query)]


def checkpoint(engine: Engine, subject: Subject, topic: str) -> int | None:
    store = ProjectionStore(engine, subject.projection)
    return store.checkpoints([(topic, 0)]).get((topic, 0))


def run_until_applied(
    engine: Engine, subject: Subject, bootstrap: str, through: Position, batch_size: int = 1000
) -> ProjectionRunner:
    """Run a runner in a thread until it has applied the log up to ``through``."""
    runner = ProjectionRunner(
        ProjectionStore(engine, subject.projection),
        bootstrap,
        batch_size=batch_size,
        poll_timeout_s=RUNNER_POLL_TIMEOUT_S,
    )
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            runner.run(stop)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, name="projection-runner", daemon=True)
    thread.start()
    deadline = time.monotonic() + APPLY_TIMEOUT_S
    try:
        while True:
            try:
                wait_until_applied(
                    engine, subject.projection.name, [through], timeout_s=APPLY_POLL_S
                )
                break
            except ApplyTimeoutError:
                if failures or not thread.is_alive() or time.monotonic() > deadline:
                    raise
    finally:
        stop.set()
        thread.join(STOP_TIMEOUT_S)
    assert not thread.is_alive(), "the runner did not stop"
    if failures:
        raise failures[0]
    return runner
