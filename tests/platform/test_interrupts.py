"""Ctrl-C reads as an interrupt whatever exception it became, and trio keeps its guard.

A SIGINT that lands while librdkafka's binding runs Python code for it (importing a
module, reading a config name) comes out of the binding as an error of its own, with
nothing chained: ``ValueError: expected newtopic_set_config config name to be unicode
string`` from ``create_topics``, ``ImportError`` from ``list_topics``. Commands printed
that error's traceback on Ctrl-C. These tests send the SIGINT from inside such a call.
"""

from __future__ import annotations

import os
import signal

import click
import trio
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, NewTopic

from eventplatform.cli_failures import INTERRUPTED_EXIT_STATUS, PlatformGroup
from eventplatform.cli_support import run_trio_until_interrupted

UNREACHABLE = "127.0.0.1:1"


class InterruptingName:
    """A config name that presses Ctrl-C while the binding reads it."""

    def __str__(self) -> str:
        os.kill(os.getpid(), signal.SIGINT)
        return "cleanup.policy"


def commands() -> click.Group:
    @click.group(cls=PlatformGroup)
    def group() -> None:
        pass

    @group.command()
    def create() -> None:
        admin = AdminClient({"bootstrap.servers": UNREACHABLE, "log_level": 0})
        admin.create_topics([NewTopic("t", 1, 1, config={InterruptingName(): "delete"})])

    @group.command()
    def handler() -> None:
        async def main() -> None:
            click.echo(getattr(signal.getsignal(signal.SIGINT), "__qualname__", "?"))

        run_trio_until_interrupted(main)

    @group.command()
    def serve() -> None:
        async def main() -> None:
            os.kill(os.getpid(), signal.SIGINT)
            await trio.sleep_forever()

        run_trio_until_interrupted(main)

    return group


def test_an_interrupt_the_binding_turned_into_its_own_error_reads_interrupted() -> None:
    result = CliRunner().invoke(commands(), ["create"])
    assert result.exit_code == INTERRUPTED_EXIT_STATUS, (result.output, result.exception)
    assert result.output.strip() == "Interrupted."
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "handler left behind"


def test_trio_runs_under_its_own_guard_and_ctrl_c_stops_it_quietly() -> None:
    result = CliRunner().invoke(commands(), ["handler"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.output.strip() == "KIManager.install.<locals>.handler"

    result = CliRunner().invoke(commands(), ["serve"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.output.strip() == "stopped"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
