"""``platform users``, ``platform acls`` and ``platform cluster up --secure``, against real
brokers, as an operator would use them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import KafkaError, Producer

from eventplatform.cli import main
from eventplatform.testing import BrokerProcess

pytestmark = pytest.mark.alone  # tests/conftest.py: Spark, clusters, timed kills or a browser

PLATFORM = str(Path(sys.executable).with_name("platform"))
TIMEOUT_S = 30.0


def run(*arguments: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(arguments), input=stdin, catch_exceptions=False)


def properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


def sasl_settings(broker: BrokerProcess, user: str, password: str) -> dict[str, str]:
    return {
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, Path]]:
    """A broker on its own with ACLs, whose super user was written offline first."""
    directory = tmp_path_factory.mktemp("guarded")
    seeded = run(
        "users",
        "add",
        "admin",
        "--data-dir",
        str(directory / "data"),
        "--password-stdin",
        stdin="root password\n",
    )
    assert seeded.exit_code == 0, seeded.output
    assert "credentials written to" in seeded.output
    broker = BrokerProcess(
        directory / "data",
        [
            "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "authorizer.class.name=StandardAuthorizer",
            "super.users=User:admin",
            "connection.failed.authentication.delay.ms=10",
        ],
    ).start()
    try:
        admin = properties(
            directory / "admin.properties", sasl_settings(broker, "admin", "root password")
        )
        yield broker, admin
    finally:
        broker.kill()


def produce(settings: dict[str, str], topic: str) -> KafkaError | None:
    reports: list[KafkaError | None] = []
    producer = Producer({**settings, "message.timeout.ms": 5_000})
    producer.produce(topic, b"x", on_delivery=lambda error, _m: reports.append(error))
    producer.flush(TIMEOUT_S)
    return reports[0] if reports else None


def test_an_operator_creates_a_user_grants_it_a_prefix_and_takes_it_back(
    guarded: tuple[BrokerProcess, Path],
) -> None:
    broker, admin = guarded
    config = ["--client-config", str(admin)]
    added = run("users", "add", "alice", "--password-stdin", *config, stdin="alice's\n")
    assert added.exit_code == 0, added.output
    assert "SCRAM-SHA-256, SCRAM-SHA-512 credentials stored" in added.output
    listed = run("users", "list", *config)
    assert [line.split() for line in listed.output.splitlines()] == [
        ["USER", "MECHANISM", "ITERATIONS"],
        ["admin", "SCRAM-SHA-256", "8192"],
        ["admin", "SCRAM-SHA-512", "8192"],
        ["alice", "SCRAM-SHA-256", "8192"],
        ["alice", "SCRAM-SHA-512", "8192"],
    ]
    alice = sasl_settings(broker, "alice", "alice's")
    refused = produce(alice, "orders.eu")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    granted = run(
        "acls",
        "add",
        "--topic",
        "orders.",
        "--prefixed",
        "--principal",
        "User:alice",
        "--operation",
        "write",
        "--operation",
        "create",
        *config,
    )
    assert granted.exit_code == 0, granted.output
    assert [line.split() for line in granted.output.splitlines()][1:] == [
        ["topic", "orders.", "prefixed", "User:alice", "*", "create", "allow"],
        ["topic", "orders.", "prefixed", "User:alice", "*", "write", "allow"],
    ]
    assert produce(alice, "orders.eu") is None
    shown = run("acls", "list", "--principal", "User:alice", *config)
    assert len(shown.output.splitlines()) == 3  # the header and two bindings

    removed = run("acls", "remove", "--principal", "User:alice", *config)
    assert removed.exit_code == 0, removed.output
    assert "removed 2 ACL bindings" in removed.output
    refused = produce(alice, "orders.eu")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    deleted = run("users", "delete", "alice", *config)
    assert deleted.exit_code == 0, deleted.output
    assert "alice" not in run("users", "list", *config).output


def test_mistakes_are_reported_without_a_traceback(guarded: tuple[BrokerProcess, Path]) -> None:
    broker, admin = guarded
    config = ["--client-config", str(admin)]
    no_resource = run("acls", "add", "--principal", "User:x", "--operation", "read", *config)
    assert no_resource.exit_code == 2
    assert "name a resource" in no_resource.output
    bad_operation = run(
        "acls", "add", "--topic", "t", "--principal", "User:x", "--operation", "eat", *config
    )
    assert bad_operation.exit_code == 1
    assert "unknown operation 'eat'" in bad_operation.output
    bad_principal = run(
        "acls", "add", "--topic", "t", "--principal", "alice", "--operation", "read", *config
    )
    assert "a principal is Type:name" in bad_principal.output
    stranger = properties(
        admin.with_name("stranger.properties"),
        {"bootstrap.servers": broker.bootstrap_of("PLAINTEXT")},
    )
    refused = run("acls", "list", "--client-config", str(stranger))
    assert refused.exit_code == 1
    assert "cannot list ACLs" in refused.output
    missing = run("users", "delete", "nobody", *config)
    assert missing.exit_code == 1
    assert "has no credentials" in missing.output
    assert "Traceback" not in "".join(
        r.output for r in (no_resource, bad_operation, bad_principal, refused, missing)
    )


def test_cluster_up_secure_prints_configs_that_work(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    up = subprocess.run(
        [
            PLATFORM,
            "cluster",
            "up",
            "--brokers",
            "3",
            "--data-dir",
            str(directory),
            "--secure",
            "--detach",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert up.returncode == 0, up.stderr
        assert "SASL_SSL for applications" in up.stdout
        admin = directory / "certificates" / "admin.properties"
        config = ["--client-config", str(admin)]
        added = run("users", "add", "alice", "--password-stdin", *config, stdin="alice's\n")
        assert added.exit_code == 0, added.output
        granted = run(
            "acls",
            "add",
            "--topic",
            "orders",
            "--principal",
            "User:alice",
            "--operation",
            "write",
            "--operation",
            "create",
            *config,
        )
        assert granted.exit_code == 0, granted.output
        printed = {
            line.strip().split("=", 1)[0]: line.strip().split("=", 1)[1]
            for line in up.stdout.splitlines()
            if line.startswith("                ") and "=" in line
        }
        printed.update({"sasl.username": "alice", "sasl.password": "alice's"})
        assert produce(printed, "orders") is None
        # The operator's tools reach the controllers over the cluster's mutual TLS.
        status = run("cluster", "status", "--data-dir", str(directory))
        assert status.exit_code == 0, status.output
        assert "brokers:" in status.output
        moving = run("topics", "reassign", "--list", "--data-dir", str(directory))
        assert moving.exit_code == 0, moving.output
    finally:
        subprocess.run(
            [PLATFORM, "cluster", "down", "--data-dir", str(directory)],
            capture_output=True,
            timeout=120,
        )


@pytest.mark.parametrize(
    "command",
    [["users", "list"], ["acls", "list"], ["erase", "events", "--partition", "0", "--offset", "1"]],
    ids=lambda command: " ".join(command[:2]),
)
def test_security_commands_take_the_request_timeout_every_cluster_command_takes(
    command: list[str],
) -> None:
    """docs/cli.md: every command takes --request-timeout; an unreachable cluster fails
    within it, in one line."""
    arguments = [*command, "--bootstrap", "127.0.0.1:1", "--request-timeout", "1"]
    result = CliRunner().invoke(main, arguments)

    assert result.exit_code == 1, result.output
    assert "no answer from the cluster at 127.0.0.1:1" in result.stderr
