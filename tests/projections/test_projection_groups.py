"""A projection's consumer group belongs to the database its runners write to.

Runners of one projection writing to two databases must each read every
partition (they used to share ``projection.<name>`` and split the partitions);
``groups describe`` must show the lag ``projections status`` shows for each
database; and ``groups reset-offsets`` on a projection's group must say that
it moves nothing and what does, instead of "succeeding".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import projection_test_app
import projection_threads
import pytest
from click.testing import CliRunner, Result
from projection_test_app import Tick, label_totals, tick_rows, totals, totals_projection
from sqlalchemy import select

from eventplatform.cli import main
from eventplatform.events import EventProducer
from eventplatform.projections import migrate, schema
from eventplatform.projections.apps import APPS_ENV, App
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.model import Projection, legacy_group_id
from eventplatform.projections.operations import projection_status, wait_until_applied
from eventplatform.projections.registry import is_database_group, register_projection
from eventplatform.projections.store import ProjectionStore
from eventplatform.testing import BrokerProcess, running_broker, wait_until

NAME = totals_projection.name
APPS = [projection_test_app.app]
PARTITIONS = 2
EVENTS = 12
LATE_EVENTS = 3
APPLY_TIMEOUT_S = 30.0
SHARED_GROUP_WAIT_S = 15.0
"""How long the second database may take to hold every event (it never does when the
two databases' runners share one group and split the partitions)."""
DESCRIBE_TIMEOUT_S = 10.0

custom_projection = Projection(
    "projection_tests.custom_group",
    tables=[totals, label_totals],
    group_id="custom-totals-group",
    description="The test app's handler, in a group it names.",
)
custom_projection.on(Tick)(tick_rows)
CUSTOM_APP = App("projection_tests_custom", projections=[custom_projection])


@pytest.fixture(autouse=True)
def no_apps_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(APPS_ENV, raising=False)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = [f"num.partitions={PARTITIONS}", "group.initial.rebalance.delay.ms=0"]
    with running_broker(tmp_path_factory.mktemp("broker"), overrides) as process:
        yield process


def database(tmp_path: Path, name: str) -> str:
    url = f"sqlite:///{tmp_path / name}"
    migrate.upgrade(url, APPS)
    return url


def ticks(count: int, prefix: str = "e") -> list[Tick]:
    return [Tick(entity=f"{prefix}{n % 5}", amount=n, label=f"l{n % 3}") for n in range(count)]


def registered_group(url: str, name: str = NAME) -> str:
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            table = schema.projections
            query = select(table.c.group_id).where(table.c.name == name)
            return str(connection.execute(query).scalar_one())
    finally:
        engine.dispose()


def platform(*arguments: str) -> Result:
    return CliRunner().invoke(main, list(arguments))


def described_lag(broker: BrokerProcess, group: str) -> int | None:
    """The sum of the lag column of ``groups describe``; None while a partition has none."""
    result = platform("groups", "describe", group, "--bootstrap", broker.bootstrap)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = next(index for index, line in enumerate(lines) if line.startswith("topic "))
    lags = [line.split()[4] for line in lines[header + 1 :] if line.strip()]
    if len(lags) != PARTITIONS or not all(lag.isdigit() for lag in lags):
        return None
    return sum(int(lag) for lag in lags)


def test_runners_writing_to_two_databases_each_read_every_partition(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    first, second = database(tmp_path, "first.db"), database(tmp_path, "second.db")
    with EventProducer(broker.bootstrap) as producer:
        refs = producer.append(ticks(EVENTS))
    assert len({ref.position.partition for ref in refs}) == PARTITIONS

    with projection_threads.running_projection(NAME, APPS, first, broker.bootstrap):
        wait_until_applied(first, NAME, refs, timeout_s=APPLY_TIMEOUT_S)
        # The first database's runner is still a member while the second one starts.
        with projection_threads.running_projection(NAME, APPS, second, broker.bootstrap):
            wait_until_applied(second, NAME, refs, timeout_s=SHARED_GROUP_WAIT_S)

    groups = {registered_group(first), registered_group(second)}
    assert len(groups) == 2
    assert all(is_database_group(NAME, group) for group in groups)


def test_status_and_groups_describe_agree_on_lag_for_each_database(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    first, second = database(tmp_path, "first.db"), database(tmp_path, "second.db")
    with EventProducer(broker.bootstrap) as producer:
        early = producer.append(ticks(EVENTS))
        projection_threads.apply_all(NAME, APPS, first, broker.bootstrap, early)
        late = producer.append(ticks(LATE_EVENTS, prefix="late"))
    projection_threads.apply_all(NAME, APPS, second, broker.bootstrap, late)

    for url, behind in ((first, LATE_EVENTS), (second, 0)):
        [status] = projection_status(APPS, database_url=url, bootstrap=broker.bootstrap, name=NAME)
        assert status.lag_events == behind
        assert status.group_id == registered_group(url)
        agreed = wait_until(
            lambda status=status: described_lag(broker, status.group_id) == status.lag_events,
            DESCRIBE_TIMEOUT_S,
        )
        assert agreed, (url, status.lag_events, described_lag(broker, status.group_id))


def test_reset_offsets_on_a_projection_group_explains_and_moves_nothing(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    url = database(tmp_path, "projections.db")
    with EventProducer(broker.bootstrap) as producer:
        refs = producer.append(ticks(EVENTS))
    projection_threads.apply_all(NAME, APPS, url, broker.bootstrap, refs)
    group = registered_group(url)
    assert wait_until(lambda: described_lag(broker, group) == 0, DESCRIBE_TIMEOUT_S)

    for named in (group, legacy_group_id(NAME)):
        result = platform(
            "groups", "reset-offsets", named, "--topic", Tick.event_topic, "--to-earliest",
            "--bootstrap", broker.bootstrap,
        )  # fmt: skip
        assert result.exit_code == 1, result.output
        assert f"belongs to projection {NAME}," in result.output
        assert f"platform replay --projection {NAME}" in result.output
        assert "Traceback" not in result.output
        assert len(result.output.strip().splitlines()) == 1
    assert described_lag(broker, group) == 0


def test_a_group_the_projection_names_is_kept_and_told_apart_by_its_offsets(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    url = database(tmp_path, "projections.db")
    with EventProducer(broker.bootstrap) as producer:
        refs = producer.append(ticks(EVENTS))
    projection_threads.apply_all(custom_projection.name, [CUSTOM_APP], url, broker.bootstrap, refs)
    assert registered_group(url, custom_projection.name) == custom_projection.group_id

    result = platform(
        "groups", "reset-offsets", "custom-totals-group", "--topic", Tick.event_topic,
        "--to-earliest", "--bootstrap", broker.bootstrap,
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert f"belongs to projection {custom_projection.name}," in result.output


def test_a_database_keeps_its_group_and_leaves_the_shared_one(database_url: str) -> None:
    migrate.upgrade(database_url, APPS)
    engine = create_store_engine(database_url)
    try:
        store = ProjectionStore(engine, totals_projection)
        drawn = register_projection(store)
        assert is_database_group(NAME, drawn)
        assert register_projection(store) == drawn

        with engine.begin() as connection:  # a row the shared-group days left
            table = schema.projections
            connection.execute(
                table.update().where(table.c.name == NAME).values(group_id=legacy_group_id(NAME))
            )
        moved = register_projection(store)
        assert is_database_group(NAME, moved)
        assert moved != legacy_group_id(NAME)
        assert register_projection(store) == moved
        assert register_projection(ProjectionStore(engine, custom_projection)) == (
            custom_projection.group_id
        )
    finally:
        engine.dispose()
