"""The platform's own clients against a broker that only talks TLS and SASL to them.

One broker serves SASL_SSL, SASL_PLAINTEXT and SSL listeners (and PLAINTEXT, where its
users are created). The SDK's producer and schema registry, a projection runner, the
entity store's own wire client and the ``platform`` commands are given nothing but a
client config (a properties file, or the variables) and must append, fold, read and
list through the secured listeners.
"""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import projection_test_app
import pytest
from click.testing import CliRunner
from projection_test_app import Tick, totals, totals_projection
from secured_clients import (
    PASSWORD,
    USER,
    SecuredBroker,
    start_secured_cluster,
    write_client_properties,
)
from sqlalchemy import select

from eventplatform.cli import main
from eventplatform.client_config import (
    BOOTSTRAP_ENV,
    CLIENT_CONFIG_ENV,
    ENV_PREFIX,
    environment_name,
    load_client_config,
)
from eventplatform.events import EntityStore, EventProducer, EventRef, SchemaRegistry
from eventplatform.events.entities import VersionConflictError
from eventplatform.events.log_client import LogClientError
from eventplatform.projections import migrate
from eventplatform.projections.database import create_store_engine
from eventplatform.projections.operations import run_projection, wait_until_applied
from eventplatform.testing.broker_process import PLATFORM

EVENTS = 60
ENTITIES = 5
APPLY_TIMEOUT_S = 60.0
RUNNER_STOP_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    broker = start_secured_cluster(tmp_path_factory.mktemp("secured-clients"))
    try:
        yield broker
    finally:
        broker.process.kill()


@pytest.fixture
def properties(cluster: SecuredBroker, tmp_path: Path) -> Path:
    return write_client_properties(cluster, tmp_path / "client.properties")


@pytest.fixture(autouse=True)
def no_client_settings_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX) or name in (BOOTSTRAP_ENV, CLIENT_CONFIG_ENV):
            monkeypatch.delenv(name)


def test_the_sdk_appends_and_a_runner_folds_over_sasl_ssl(
    properties: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given only brokers, the producer, the registry and the runner take their security
    from ``$EVENTPLATFORM_CLIENT_CONFIG``."""
    monkeypatch.setenv(CLIENT_CONFIG_ENV, str(properties))
    bootstrap = load_client_config().bootstrap
    prefix = f"sdk-{uuid.uuid4().hex[:8]}"
    ticks = [
        Tick(entity=f"{prefix}-{n % ENTITIES}", amount=n, label=f"l{n % 3}") for n in range(EVENTS)
    ]
    with (
        SchemaRegistry(bootstrap) as registry,
        EventProducer(bootstrap, schemas=registry) as producer,
    ):
        refs = producer.append(ticks)
        assert registry.versions(Tick.event_type) == [1]
    url = f"sqlite:///{tmp_path / 'projections.db'}"
    migrate.upgrade(url, [projection_test_app.app])
    fold_until_applied(url, bootstrap, refs)
    engine = create_store_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(totals.c.entity, totals.c.ticks, totals.c.total)
                .where(totals.c.entity.startswith(prefix))
                .order_by(totals.c.entity)
            ).all()
    finally:
        engine.dispose()
    expected = [
        (f"{prefix}-{entity}", EVENTS // ENTITIES, sum(range(entity, EVENTS, ENTITIES)))
        for entity in range(ENTITIES)
    ]
    assert [tuple(row) for row in rows] == expected


def fold_until_applied(url: str, bootstrap: str, refs: list[EventRef]) -> None:
    """Run the test projection in a thread until it has applied ``refs``, then stop it."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            run_projection(
                totals_projection.name,
                [projection_test_app.app],
                database_url=url,
                bootstrap=bootstrap,
                batch_size=100,
                stop=stop,
            )
        except BaseException as exc:  # reported below
            failures.append(exc)

    thread = threading.Thread(target=run, name="secured runner", daemon=True)
    thread.start()
    try:
        wait_until_applied(url, totals_projection.name, refs, timeout_s=APPLY_TIMEOUT_S)
    finally:
        stop.set()
        thread.join(RUNNER_STOP_TIMEOUT_S)
    assert not failures, failures
    assert not thread.is_alive()


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [
        ("SASL_SSL", "SCRAM-SHA-512"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SSL", ""),
    ],
)
def test_the_entity_store_appends_and_reads_through_each_listener(
    cluster: SecuredBroker, tmp_path: Path, listener: str, mechanism: str
) -> None:
    """The entity store speaks the protocol itself: TLS, PLAIN and SCRAM included."""
    path = write_client_properties(
        cluster, tmp_path / "entity.properties", listener=listener, mechanism=mechanism
    )
    config = load_client_config(config_file=path, environ={})
    key = f"store-{listener}-{mechanism}-{uuid.uuid4().hex[:6]}"
    with EntityStore(config, [Tick]) as store:
        store.append(
            Tick.event_topic,
            key,
            [Tick(entity=key, amount=1, label="a"), Tick(entity=key, amount=2, label="b")],
            expected_version=0,
        )
        with pytest.raises(VersionConflictError):
            store.append(
                Tick.event_topic, key, [Tick(entity=key, amount=3, label="c")], expected_version=0
            )
        history = store.load(Tick.event_topic, key)
    assert history.version == 2
    assert [envelope.event.amount for envelope in history.envelopes] == [1, 2]


def test_the_entity_store_refuses_a_wrong_password(cluster: SecuredBroker) -> None:
    config = load_client_config(
        bootstrap=cluster.process.bootstrap_of("SASL_PLAINTEXT"),
        settings={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": USER,
            "sasl.password": "wrong",
        },
        environ={},
    )
    with EntityStore(config, [Tick]) as store, pytest.raises(LogClientError) as refused:
        store.client.partition_count(Tick.event_topic)
    assert "SASL authentication failed" in str(refused.value)
    assert "wrong" not in str(refused.value).replace("wrong password", "")


def test_the_commands_connect_with_a_client_config(properties: Path) -> None:
    """``--client-config`` names the brokers and the security; the variable does too."""
    topic = f"secured-cli-{uuid.uuid4().hex[:8]}"
    runner = CliRunner()
    produced = runner.invoke(
        main,
        ["produce", topic, "--client-config", str(properties), "--key-separator", ":"],
        input=b"k1:one\nk2:two\n",
    )
    assert produced.exit_code == 0, produced.output
    environment = {CLIENT_CONFIG_ENV: str(properties)}
    listed = runner.invoke(main, ["topics", "list"], env=environment)
    assert listed.exit_code == 0, listed.output
    assert topic in listed.output.split()
    consumed = runner.invoke(
        main,
        ["consume", topic, "--from-beginning", "--max-messages", "2", "--timeout", "20"],
        env=environment,
    )
    assert consumed.exit_code == 0, consumed.output
    assert consumed.stdout.splitlines() == ["one", "two"]
    assert PASSWORD not in produced.output + listed.output + consumed.output


def test_the_platform_script_takes_its_security_from_the_environment(
    cluster: SecuredBroker, tmp_path: Path
) -> None:
    """No file at all: the brokers and every security setting are variables."""
    environment = {
        **os.environ,
        BOOTSTRAP_ENV: cluster.process.bootstrap_of("SASL_SSL"),
        environment_name("security.protocol"): "SASL_SSL",
        environment_name("sasl.mechanism"): "SCRAM-SHA-256",
        environment_name("sasl.username"): USER,
        environment_name("sasl.password"): PASSWORD,
        environment_name("ssl.ca.location"): str(cluster.authority / "ca.pem"),
    }
    topic = f"secured-script-{uuid.uuid4().hex[:8]}"
    created = subprocess.run(
        [str(PLATFORM), "topics", "create", topic, "--partitions", "2"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    described = subprocess.run(
        [str(PLATFORM), "topics", "describe", topic],
        env=environment,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert described.returncode == 0, described.stderr
    assert topic in described.stdout
    assert PASSWORD not in created.stdout + created.stderr + described.stdout + described.stderr


def test_without_the_config_the_secured_listener_cannot_be_used(cluster: SecuredBroker) -> None:
    """The same command with brokers alone: librdkafka speaks plaintext to a TLS port."""
    result = CliRunner().invoke(
        main,
        [
            "topics",
            "list",
            "--bootstrap",
            cluster.process.bootstrap_of("SASL_SSL"),
            "--request-timeout",
            "2",
        ],
    )
    assert result.exit_code == 1
    assert "no answer from the cluster" in result.stderr
