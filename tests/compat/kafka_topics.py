"""A stand-in for Kafka's ``kafka-topics.sh`` that calls ``platform topics``.

librdkafka's suite shells out to ``$KAFKA_PATH/bin/kafka-topics.sh --bootstrap-server
<servers>`` with ``--create``, ``--alter`` or ``--delete``, ``--topic``, ``--partitions``,
``--replication-factor`` and ``--config KEY=VALUE``; the compat runner puts a
``kafka-topics.sh`` that runs this program under ``KAFKA_PATH``. Anything else is refused
with exit status 2, so a test that needs more fails and says why.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

PLATFORM = Path(sys.executable).with_name("platform")


def command(argv: Sequence[str]) -> list[str]:
    """The ``platform topics`` command line for a ``kafka-topics.sh`` one."""
    parser = argparse.ArgumentParser(prog="kafka-topics.sh")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true")
    action.add_argument("--alter", action="store_true")
    action.add_argument("--delete", action="store_true")
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions")
    parser.add_argument("--replication-factor")
    parser.add_argument("--config", action="append", default=[])
    args = parser.parse_args(argv)
    verb = "create" if args.create else "alter" if args.alter else "delete"
    line = [str(PLATFORM), "topics", verb, args.topic, "--bootstrap", args.bootstrap_server]
    if args.partitions is not None:
        line += ["--partitions", args.partitions]
    if args.replication_factor is not None and args.create:
        line += ["--replication-factor", args.replication_factor]
    option = "--config" if args.create else "--set"
    for config in args.config:
        line += [option, config]
    return line


if __name__ == "__main__":
    line = command(sys.argv[1:])
    os.execv(line[0], line)
