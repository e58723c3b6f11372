"""``platform apps logs redact`` on a 3-broker cluster, with a leader killed while the
log erases: afterwards no consumer reading the topic from offset 0, no table of the
streaming runner, no Spark rebuild from the log and no replica's files yield the secret,
and the rebuilt tables equal the streamed ones."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import logs_reference as reference
from click.testing import CliRunner
from cluster_workload import leaders, wait_healed
from replay_databases import ranges

from eventplatform.apps.log_aggregation import app
from eventplatform.apps.log_aggregation.events import TOPIC
from eventplatform.apps.log_aggregation.projections import lines
from eventplatform.apps.log_aggregation.retention import ensure_topic
from eventplatform.apps.log_aggregation.simulator import LogShape, LogSimulator
from eventplatform.cli import main
from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.projections.operations import projection_rows
from eventplatform.runtime import running_projections, wait_caught_up
from eventplatform.spark_projections.replay import rebuild
from eventplatform.testing import LocalCluster, wait_until

APPLY_TIMEOUT_S = 180.0
RETRACTED_TIMEOUT_S = 150.0
FILES_TIMEOUT_S = 60.0


def segment_files_hold(cluster: LocalCluster, node: int, secret: bytes) -> bool:
    paths = (cluster.directory / f"node-{node}").glob(f"{TOPIC}-*/*.log")
    return any(secret in path.read_bytes() for path in paths)


def test_after_a_redaction_no_reader_on_a_cluster_yields_the_secret(
    spark: Any, tmp_path: Path
) -> None:
    begin = datetime(2026, 11, 20, 14, 0, tzinfo=UTC)
    shape = LogShape(lines_per_second=2.0, leak_share=0.05)
    simulation = LogSimulator(shape, seed=7).run(begin, begin + timedelta(minutes=10))
    secret = simulation.leaked
    assert simulation.leaking > 3
    streamed = f"sqlite:///{tmp_path / 'streamed.db'}"
    rebuilt = f"sqlite:///{tmp_path / 'rebuilt.db'}"
    cluster = LocalCluster.create(tmp_path / "cluster", 3, ["min.insync.replicas=2"])
    cluster.start()
    try:
        ensure_topic(cluster.bootstrap)
        with EventProducer(cluster.bootstrap) as producer:
            producer.append(simulation.lines)
        for url in (streamed, rebuilt):
            migrate.upgrade(url, [app])
        assert all(segment_files_hold(cluster, node, secret.encode()) for node in cluster.nodes)
        killed: list[int] = []

        def kill_a_leader_once_retracted() -> None:
            """The lines leave the tables when the runner applies the retraction; the
            erasure follows at once, and one leader of the topic dies meanwhile."""
            if wait_until(lambda: reference.search(streamed, secret) == [], RETRACTED_TIMEOUT_S):
                victim = leaders(cluster.bootstrap, TOPIC)[0]
                cluster.kill(victim)
                killed.append(victim)

        with running_projections([lines.name], [app], streamed, cluster.bootstrap):
            wait_caught_up([lines.name], streamed, cluster.bootstrap, [TOPIC], APPLY_TIMEOUT_S)
            assert len(reference.search(streamed, secret)) == simulation.leaking
            killer = threading.Thread(target=kill_a_leader_once_retracted, daemon=True)
            killer.start()
            done = CliRunner().invoke(
                main,
                [
                    "apps", "logs", "redact", secret, "--reason", "a password in a request dump",
                    "--database", streamed, "--bootstrap", cluster.bootstrap,
                    "--pending-dir", str(tmp_path / "pending"),
                ],
            )  # fmt: skip
            killer.join(RETRACTED_TIMEOUT_S)
            assert done.exit_code == 0, done.output
            assert killed, "no leader was killed"
            wait_caught_up([lines.name], streamed, cluster.bootstrap, [TOPIC], APPLY_TIMEOUT_S)

        records = reference.log_records(cluster.bootstrap)
        assert reference.holding(records, secret) == []
        assert len(reference.erased(records)) == simulation.leaking
        assert reference.tables_holding(streamed, secret) == []

        options = {"bootstrap.servers": cluster.bootstrap}  # the Kafka read path
        summary = rebuild(
            spark, lines, rebuilt, ranges(cluster.bootstrap, TOPIC, {}), options, from_start=True
        )
        assert summary.parked == 0
        assert reference.tables_holding(rebuilt, secret) == []
        assert projection_rows(rebuilt, lines) == projection_rows(streamed, lines)
        clean = [line for line in simulation.lines if secret not in line.message]
        assert reference.read_views(rebuilt) == reference.expected(clean)

        cluster.start(killed)
        wait_healed(cluster)
        for node in cluster.nodes:
            clean_files = wait_until(
                lambda n=node: not segment_files_hold(cluster, n, secret.encode()),
                FILES_TIMEOUT_S,
            )
            assert clean_files, f"node {node}'s files hold the secret:\n{cluster.tail(node)}"
    finally:
        cluster.stop()
