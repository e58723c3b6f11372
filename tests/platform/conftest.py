"""One real broker for the command-line tests, and a helper that runs ``platform`` commands.

The broker is shared by every test in this folder (each test uses its own
topic and group names), so the suite pays for one process start. Group
rebalances start without the usual initial delay, so a consumer joins in
well under a second.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

from eventplatform.cli import main
from eventplatform.testing import BrokerProcess, running_broker

BROKER_OVERRIDES = ("group.initial.rebalance.delay.ms=0",)
REQUEST_TIMEOUT_S = "10"


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path_factory.mktemp("cli-broker"), BROKER_OVERRIDES) as process:
        yield process


@pytest.fixture
def unique_name() -> str:
    """A fresh name for a topic or group, so tests sharing the broker never collide."""
    return f"cli-{uuid.uuid4().hex[:10]}"


class Platform:
    """Runs ``platform`` commands in-process against one bootstrap address."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def __call__(self, *arguments: str, input: bytes | None = None) -> Result:
        command = [
            *arguments,
            "--bootstrap",
            self.bootstrap,
            "--request-timeout",
            REQUEST_TIMEOUT_S,
        ]
        return CliRunner().invoke(main, command, input=input, catch_exceptions=True)

    def ok(self, *arguments: str, input: bytes | None = None) -> Result:
        """Run a command that must succeed; on failure, show what it printed."""
        result = self(*arguments, input=input)
        assert result.exit_code == 0, (result.output, result.exception)
        return result

    def fails(self, *arguments: str, input: bytes | None = None) -> str:
        """Run a command that must fail cleanly and return its one error line.

        Clean means: exit status 1, exactly one ``Error: ...`` line on
        stderr, and no exception other than the exit itself.
        """
        result = self(*arguments, input=input)
        assert result.exit_code == 1, result.output
        assert isinstance(result.exception, SystemExit), result.exception
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("Error: "), lines
        return lines[0]


@pytest.fixture
def platform(broker: BrokerProcess) -> Platform:
    return Platform(broker.bootstrap)
