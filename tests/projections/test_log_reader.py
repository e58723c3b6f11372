"""Reading records back by position, as corrections do, from a real broker.

The reader reads every partition at once and crosses wide gaps with a seek;
it must return exactly the values at the positions asked for, leave out
those the log does not hold, and stay right when called again and again
with the same consumer.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import orjson
import pytest

from eventplatform.events import Event, EventProducer, EventRef, Position
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
