"""A Spark rebuild of the activity app's projections equals the streaming runner's, bot
retraction included, and both equal the day worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import activity_dataset as data
import pytest
from projection_threads import apply_all
from replay_databases import ranges

from eventplatform.apps.activity_tracking import app
from eventplatform.apps.activity_tracking.events import TOPIC
from eventplatform.events import EventRef
from eventplatform.projections import migrate
from eventplatform.projections.operations import projection_rows
from eventplatform.spark_projections.replay import rebuild
from eventplatform.testing import BrokerProcess, fresh_database


def tables(url: str) -> dict[str, list[tuple[Any, ...]]]:
    return {
        name: rows
        for projection in app.projections
        for name, rows in projection_rows(url, projection).items()
    }


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_rebuild_equals_the_runner_and_the_story(
    kind: str,
    spark: Any,
    activity_broker: BrokerProcess,
    activity_day: list[EventRef],
    tmp_path: Path,
) -> None:
    broker, appended = activity_broker, activity_day
    options = {"bootstrap.servers": broker.bootstrap, "dataDir": str(broker.data_dir)}
    with fresh_database(kind, tmp_path) as streamed, fresh_database(kind, tmp_path) as rebuilt:
        for url in (streamed, rebuilt):
            migrate.upgrade(url, [app])
        for projection in app.projections:
            apply_all(projection.name, [app], streamed, broker.bootstrap, appended)
            summary = rebuild(
                spark,
                projection,
                rebuilt,
                ranges(broker.bootstrap, TOPIC, {}),
                options,
                from_start=True,
            )
            assert summary.parked == 0
        assert tables(rebuilt) == tables(streamed)
        data.check_against_the_story(rebuilt)
