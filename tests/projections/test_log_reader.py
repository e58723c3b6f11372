"""Reading records back by position, as corrections do, from a real broker.

The reader reads every partition at once and crosses wide gaps with a seek;
it must return exactly the values at the positions asked for, leave out
those the log does not hold, and stay right when called again and again
with the same consumer.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from eventplatform.events import Event, EventProducer, EventRef, Position
from eventplatform.projections import kafka
from eventplatform.projections.kafka import SCAN_GAP_RECORDS, KafkaEventReader
from eventplatform.testing import running_broker

PARTITIONS = 3
EVENTS = 3 * SCAN_GAP_RECORDS


class Numbered(Event, type="readertest.numbered", version=1, key="key"):
    key: str
    number: int


@pytest.fixture(scope="module")
def appended(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[EventRef]]]:
    overrides = [f"num.partitions={PARTITIONS}"]
    with running_broker(tmp_path_factory.mktemp("broker"), overrides) as broker:
        with EventProducer(broker.bootstrap) as producer:
            refs = producer.append(
                [Numbered(key=f"k{number % 17}", number=number) for number in range(EVENTS)]
            )
        yield broker.bootstrap, refs


def number_at(value: bytes) -> int:
    number: int = orjson.loads(value)["data"]["number"]
    return number


def test_every_position_asked_for_is_read_across_partitions_and_gaps(
    appended: tuple[str, list[EventRef]],
) -> None:
    bootstrap, refs = appended
    generator = random.Random(5)
    reader = KafkaEventReader(bootstrap)
    try:
        for size in (1, 3, 40, EVENTS // 2, EVENTS):  # sparse reads seek, dense ones scan
            chosen = generator.sample(range(EVENTS), size)
            found = reader([refs[index].position for index in chosen])
            assert {number_at(found[refs[index].position]) for index in chosen} == set(chosen)
            assert len(found) == size
    finally:
        reader.close()


def test_positions_the_log_does_not_hold_are_left_out(
    appended: tuple[str, list[EventRef]],
) -> None:
    bootstrap, refs = appended
    topic = refs[0].position.topic
    beyond = max(ref.position.offset for ref in refs) + 10
    missing = [
        Position(topic, refs[0].position.partition, beyond),
        Position(topic, PARTITIONS + 4, 0),
        Position("readertest-no-such-topic", 0, 0),
    ]
    reader = KafkaEventReader(bootstrap)
    try:
        found = reader([*missing, refs[7].position])
    finally:
        reader.close()

    assert list(found) == [refs[7].position]
    assert number_at(found[refs[7].position]) == 7


class CountingConsumer:
    """The reader's consumer, its seeks counted."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self.seeks = 0

    def seek(self, partition: Any) -> None:
        self.seeks += 1
        self._consumer.seek(partition)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def test_a_read_seeks_once_per_wide_gap(
    appended: tuple[str, list[EventRef]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap, refs = appended
    monkeypatch.setattr(kafka, "SCAN_GAP_RECORDS", 20)
    partition = refs[0].position.partition
    own = sorted(
        (ref.position for ref in refs if ref.position.partition == partition),
        key=lambda position: position.offset,
    )
    wanted = [own[0], own[1], own[100], own[101], own[300]]  # two gaps wider than 20
    reader = KafkaEventReader(bootstrap)
    counting = CountingConsumer(reader._consumer)
    reader._consumer = counting  # type: ignore[assignment]
    try:
        found = reader(wanted)
    finally:
        reader.close()

    assert set(found) == set(wanted)
    # Records before a seek's target still come from fetches made before it: they
    # must not seek again.
    assert counting.seeks == 2
