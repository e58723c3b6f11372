"""``platform replay`` reads the log through a SASL_SSL listener.

Without ``--data-dir`` the replay takes the Kafka read path: the driver's offset
lookups and every Spark worker's consumer connect with the client config's
security, which travels as the source's ``kafka.*`` options.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import projection_test_app
import pytest
from click.testing import CliRunner
from projection_test_app import Tick, totals, totals_projection
from secured_clients import SecuredBroker, start_secured_cluster, write_client_properties
from sqlalchemy import func, select

from eventplatform.client_config import BOOTSTRAP_ENV, CLIENT_CONFIG_ENV, load_client_config
from eventplatform.events import EventProducer
from eventplatform.projections import migrate
from eventplatform.projections.apps import APPS_ENV
from eventplatform.projections.database import create_store_engine
from eventplatform.replay_cli import replay

EVENTS = 30
ENTITIES = 3


@pytest.fixture(autouse=True)
def no_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (APPS_ENV, BOOTSTRAP_ENV, CLIENT_CONFIG_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    broker = start_secured_cluster(tmp_path_factory.mktemp("secured-replay"))
    try:
        yield broker
    finally:
        broker.process.kill()


def test_a_rebuild_reads_the_log_over_sasl_ssl(
    spark: Any, cluster: SecuredBroker, tmp_path: Path
) -> None:
    properties = write_client_properties(cluster, tmp_path / "client.properties")
    config = load_client_config(config_file=properties, environ={})
    with EventProducer(config) as producer:
        producer.append(
            [Tick(entity=f"e{n % ENTITIES}", amount=n, label="x") for n in range(EVENTS)]
        )
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    migrate.upgrade(url, [projection_test_app.app])
    result = CliRunner().invoke(
        replay,
        [
            "--projection",
            totals_projection.name,
            "--client-config",
            str(properties),
            "--database",
            url,
            "--app",
            "projection_test_app",
        ],
    )
    assert result.exit_code == 0, result.output
    assert config.settings["sasl.password"] not in result.output
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            ticks, total = connection.execute(
                select(func.sum(totals.c.ticks), func.sum(totals.c.total))
            ).one()
    finally:
        engine.dispose()
    assert (ticks, total) == (EVENTS, sum(range(EVENTS)))
