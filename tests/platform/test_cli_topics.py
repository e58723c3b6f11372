"""``platform topics`` against a real broker: what an operator sees for each subcommand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from click.testing import CliRunner

from eventplatform.cli import main

if TYPE_CHECKING:
    from conftest import Platform

PLATFORM = Path(sys.executable).with_name("platform")


def config_rows(describe_output: str) -> dict[str, tuple[str, str]]:
    """``name -> (value, source)`` from the configs table of ``topics describe``."""
    lines = describe_output.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("config "))
    rows = {}
    for line in lines[start + 1 :]:
        name, value, source = line.split()
        rows[name] = (value, source)
    return rows


def partition_rows(describe_output: str) -> list[list[str]]:
    lines = describe_output.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("partition "))
    rows = []
    for line in lines[start + 1 :]:
        if not line:
            break
        rows.append(line.split())
    return rows


def test_create_then_list_and_describe(platform: Platform, unique_name: str) -> None:
    created = platform.ok(
        "topics", "create", unique_name, "--partitions", "3", "--config", "retention.ms=123456"
    )
    assert created.stdout.strip() == f"created topic {unique_name}"

    assert unique_name in platform.ok("topics", "list").stdout.splitlines()

    described = platform.ok("topics", "describe", unique_name).stdout
    assert f"topic: {unique_name}" in described
    assert "partitions: 3" in described
    assert "replication factor: 1" in described
    assert [row[0] for row in partition_rows(described)] == ["0", "1", "2"]
    assert all(row[1] == row[2] == row[3] for row in partition_rows(described))
    configs = config_rows(described)
    assert configs["retention.ms"] == ("123456", "DYNAMIC_TOPIC_CONFIG")
    assert configs["cleanup.policy"] == ("delete", "DEFAULT_CONFIG")


def test_alter_sets_and_deletes_configs_and_adds_partitions(
    platform: Platform, unique_name: str
) -> None:
    platform.ok(
        "topics",
        "create",
        unique_name,
        "--partitions",
        "2",
        "--config",
        "retention.ms=1000000",
        "--config",
        "segment.ms=3600000",
    )

    altered = platform.ok(
        "topics",
        "alter",
        unique_name,
        "--set",
        "retention.ms=5000",
        "--delete",
        "segment.ms",
        "--partitions",
        "4",
    ).stdout

    assert "set retention.ms=5000" in altered
    assert "deleted segment.ms" in altered
    assert f"topic {unique_name} now has 4 partitions" in altered
    described = platform.ok("topics", "describe", unique_name).stdout
    configs = config_rows(described)
    assert configs["retention.ms"] == ("5000", "DYNAMIC_TOPIC_CONFIG")
    assert configs["segment.ms"][1] == "DEFAULT_CONFIG"
    assert len(partition_rows(described)) == 4


def test_more_partitions_for_a_topic_with_entity_versions_need_force(
    platform: Platform, unique_name: str
) -> None:
    versions = "eventplatform.entity.versions.enable"
    platform.ok(
        "topics", "create", unique_name, "--partitions", "2", "--config", f"{versions}=true"
    )

    error = platform.fails("topics", "alter", unique_name, "--partitions", "3")
    assert "keeps entity versions" in error and "splitting their histories" in error
    described = platform.ok("topics", "describe", unique_name).stdout
    assert len(partition_rows(described)) == 2
    assert config_rows(described)[versions] == ("true", "DYNAMIC_TOPIC_CONFIG")

    forced = platform.ok("topics", "alter", unique_name, "--partitions", "3", "--force").stdout
    assert "entity versions turned off" in forced
    assert f"topic {unique_name} now has 3 partitions" in forced
    described = platform.ok("topics", "describe", unique_name).stdout
    assert len(partition_rows(described)) == 3
    assert config_rows(described)[versions] == ("false", "DYNAMIC_TOPIC_CONFIG")


def test_alter_rejects_nothing_to_do_and_shrinking(platform: Platform, unique_name: str) -> None:
    platform.ok("topics", "create", unique_name, "--partitions", "3")

    assert "nothing to change" in platform.fails("topics", "alter", unique_name)
    shrink = platform.fails("topics", "alter", unique_name, "--partitions", "2")
    assert "INVALID_PARTITIONS" in shrink
    both = platform.fails(
        "topics", "alter", unique_name, "--set", "retention.ms=1", "--delete", "retention.ms"
    )
    assert "retention.ms" in both


def test_delete_removes_the_topic(platform: Platform, unique_name: str) -> None:
    platform.ok("topics", "create", unique_name)

    assert platform.ok("topics", "delete", unique_name).stdout.strip() == (
        f"deleted topic {unique_name}"
    )

    assert unique_name not in platform.ok("topics", "list").stdout.splitlines()
    assert platform.fails("topics", "delete", unique_name) == (
        f"Error: topic '{unique_name}' does not exist"
    )


def test_errors_are_one_line_with_the_kafka_error_name(
    platform: Platform, unique_name: str
) -> None:
    platform.ok("topics", "create", unique_name)

    assert "TOPIC_ALREADY_EXISTS" in platform.fails("topics", "create", unique_name)
    assert "INVALID_CONFIG" in platform.fails(
        "topics", "create", f"{unique_name}-b", "--config", "retention.ms=soon"
    )
    assert "INVALID_REPLICATION_FACTOR" in platform.fails(
        "topics", "create", f"{unique_name}-c", "--replication-factor", "3"
    )
    assert platform.fails("topics", "describe", f"{unique_name}-missing") == (
        f"Error: topic '{unique_name}-missing' does not exist"
    )


def test_describe_of_a_missing_topic_does_not_create_it(
    platform: Platform, unique_name: str
) -> None:
    platform.fails("topics", "describe", unique_name)

    assert unique_name not in platform.ok("topics", "list").stdout.splitlines()


def test_bad_arguments_are_usage_errors_before_any_connection() -> None:
    runner = CliRunner()

    bad_bootstrap = runner.invoke(main, ["topics", "list", "--bootstrap", "no-port"])
    assert bad_bootstrap.exit_code == 2
    assert "is not host:port" in bad_bootstrap.stderr

    # an app's commands take --bootstrap through cli_support.client_options: the same check
    app_bootstrap = runner.invoke(
        main, ["apps", "activity", "retract-bots", "--bootstrap", "no-port", "--dry-run"]
    )
    assert app_bootstrap.exit_code == 2, app_bootstrap.output
    assert "is not host:port" in app_bootstrap.stderr

    bad_config = runner.invoke(
        main, ["topics", "create", "x", "--config", "no-equals-sign", "--bootstrap", "127.0.0.1:1"]
    )
    assert bad_config.exit_code == 2
    assert "is not key=value" in bad_config.stderr


def test_an_unreachable_cluster_is_one_line_on_stderr_from_the_real_executable() -> None:
    """No traceback and none of librdkafka's connection log lines reach the terminal."""
    completed = subprocess.run(
        [str(PLATFORM), "topics", "list", "--bootstrap", "127.0.0.1:1", "--request-timeout", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert completed.returncode == 1
    assert completed.stdout == ""
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith(
        "Error: cannot list topics: no answer from the cluster at 127.0.0.1:1"
    )
