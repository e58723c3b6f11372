"""``platform erase``: empty records of a topic in place, on every replica.

A thin shell over :mod:`eventplatform.tools.erase`: it reads the offsets from the
options or a file and prints what each partition erased.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from eventplatform.tool_options import cluster_options, tool_errors
from eventplatform.tools.arguments import ClusterSettings

ERASE_TIMEOUT_S_DEFAULT = 60.0
STDIN = "-"


@click.command("erase")
@click.argument("topic")
@click.option("--partition", type=click.IntRange(0), default=None, help="The offsets' partition.")
@click.option(
    "--offset",
    "offsets",
    type=click.IntRange(0),
    multiple=True,
    metavar="N",
    help="A record to erase (needs --partition); repeatable.",
)
@click.option(
    "--offsets-from",
    type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    default=None,
    metavar="FILE",
    help="Records to erase, one 'PARTITION OFFSET' a line ('-': standard input).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=ERASE_TIMEOUT_S_DEFAULT,
    show_default=True,
    metavar="SECONDS",
    help="How long the broker may take to erase one partition's records.",
)
@cluster_options
def erase(
    cluster: ClusterSettings,
    topic: str,
    partition: int | None,
    offsets: tuple[int, ...],
    offsets_from: Path | None,
    timeout: float,
) -> None:
    """Erase records of TOPIC on every replica: each keeps its offset, timestamp and
    key, and loses its value and headers for good.

    Readers skip erased records from then on; copies already read are not reached.
    Retract events from the projections before erasing them (docs/security.md,
    Erasure). Needs DELETE on the topic."""
    from eventplatform.tools.erase import erase_records, offsets_by_partition

    with tool_errors():
        pairs = _read_pairs(offsets_from) if offsets_from is not None else []
        wanted = offsets_by_partition(partition, offsets, pairs)
        erase_records(cluster, topic, wanted, timeout_s=timeout, echo=click.echo)


def _read_pairs(path: Path) -> list[tuple[int, int]]:
    from eventplatform.tools.erase import parse_offset_lines

    if str(path) == STDIN:
        return parse_offset_lines(sys.stdin, "standard input")
    try:
        with path.open(encoding="utf-8") as lines:
            return parse_offset_lines(lines, str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(str(exc), param_hint="--offsets-from") from exc
