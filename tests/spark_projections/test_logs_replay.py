"""The log app under Spark: a rebuild after a redaction reads as if the leaking lines had
never been sent, equals the streaming runner's tables, and its search index (FTS5 or
tsvector) finds none of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import logs_reference as reference
import pytest
from projection_threads import apply_all
from replay_databases import ranges

from eventplatform.apps.log_aggregation import app
from eventplatform.apps.log_aggregation.events import TOPIC, LogLine
from eventplatform.apps.log_aggregation.projections import lines
from eventplatform.apps.log_aggregation.redaction import redact
from eventplatform.apps.log_aggregation.retention import ensure_topic
from eventplatform.apps.log_aggregation.simulator import LogShape, LogSimulator
from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.projections.operations import projection_rows
from eventplatform.spark_projections.replay import rebuild
from eventplatform.testing import fresh_database, running_broker

APPLY_TIMEOUT_S = 180.0


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_rebuild_after_a_redaction_has_no_trace_of_the_lines(
    kind: str, spark: Any, tmp_path: Path
) -> None:
    begin = datetime(2026, 11, 20, 14, 0, tzinfo=UTC)
    shape = LogShape(lines_per_second=2.0, leak_share=0.05)
    simulation = LogSimulator(shape, seed=5).run(begin, begin + timedelta(minutes=10))
    assert simulation.leaking > 3
    with (
        running_broker(tmp_path / "broker", ["num.partitions=3"]) as broker,
        fresh_database(kind, tmp_path) as streamed,
        fresh_database(kind, tmp_path) as rebuilt,
    ):
        ensure_topic(broker.bootstrap)
        with EventProducer(broker.bootstrap) as producer:
            refs = producer.append(simulation.lines)
        for url in (streamed, rebuilt):
            migrate.upgrade(url, [app])
        apply_all(lines.name, [app], streamed, broker.bootstrap, refs, APPLY_TIMEOUT_S)
        done = redact(streamed, broker.bootstrap, simulation.leaked, "leaked password")
        assert done.lines == simulation.leaking
        apply_all(lines.name, [app], streamed, broker.bootstrap, list(done.appended))

        options = {"bootstrap.servers": broker.bootstrap, "dataDir": str(broker.data_dir)}
        summary = rebuild(
            spark, lines, rebuilt, ranges(broker.bootstrap, TOPIC, {}), options, from_start=True
        )

        assert summary.parked == 0 and summary.corrections == simulation.leaking
        assert projection_rows(rebuilt, lines) == projection_rows(streamed, lines)
        clean = [line for line in simulation.lines if simulation.leaked not in line.message]
        assert reference.read_views(rebuilt) == reference.expected(clean)
        assert reference.search(rebuilt, simulation.leaked) == []
        assert (
            len(reference.search(rebuilt, "login ok"))
            == len(reference.search(streamed, "login ok"))
            > 0
        )

        # the rebuilt tables keep their search index current as the runner goes on
        marker = LogLine(
            service="api",
            host="api-1",
            level="info",
            message="zebra crossing",
            at=begin + timedelta(minutes=11),
        )
        with EventProducer(broker.bootstrap) as producer:
            more = producer.append([marker])
        apply_all(lines.name, [app], rebuilt, broker.bootstrap, more)
        found = reference.search(rebuilt, "zebra crossing")
        assert [row[4] for row in found] == ["zebra crossing"]
