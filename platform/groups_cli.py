"""``platform groups``: list consumer groups, describe their lag, reset their offsets.

Thin shells over :mod:`eventplatform.tools.groups`.
"""

from __future__ import annotations

import click

from eventplatform.tool_options import cluster_options, tool_errors
from eventplatform.tools.arguments import (
    ClusterSettings,
)


@click.group()
def groups() -> None:
    """List consumer groups, describe their lag, reset their offsets."""


@groups.command("list")
@cluster_options
def groups_list(cluster: ClusterSettings) -> None:
    """Print every consumer group with its state."""
    from eventplatform.tools.groups import list_groups

    with tool_errors():
        list_groups(cluster, echo=click.echo)


@groups.command("describe")
@click.argument("group")
@cluster_options
def groups_describe(cluster: ClusterSettings, group: str) -> None:
    """Show GROUP's members and, per partition, committed offset, log end offset and lag."""
    from eventplatform.tools.groups import describe_group

    with tool_errors():
        describe_group(cluster, group, echo=click.echo)


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", required=True, help="The topic whose offsets move.")
@click.option("--partition", type=click.IntRange(0), default=None, help="Only this partition.")
@click.option("--to-earliest", is_flag=True, help="To the oldest record still kept.")
@click.option("--to-latest", is_flag=True, help="To the log end (skip everything).")
@click.option(
    "--to-offset",
    type=click.IntRange(0),
    default=None,
    metavar="N",
    help="To offset N (clamped into the log).",
)
@click.option(
    "--to-datetime",
    default=None,
    metavar="ISO",
    help="To the first record at or after this time (without an offset: UTC).",
)
@click.option(
    "--execute", is_flag=True, help="Commit the new offsets; without it, only print the plan."
)
@click.option(
    "--dry-run", is_flag=True, help="Print the new offsets, change nothing (the default)."
)
@cluster_options
def groups_reset_offsets(
    cluster: ClusterSettings,
    group: str,
    topic: str,
    partition: int | None,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    to_datetime: str | None,
    execute: bool,
    dry_run: bool,
) -> None:
    """Plan moving GROUP's committed offsets on a topic, and with --execute move them;
    refused while the group has members."""
    from eventplatform.tools.groups import reset_group_offsets, reset_target
    from eventplatform.tools.projection_groups import refuse_projection_group

    if execute and dry_run:
        raise click.UsageError("--execute and --dry-run exclude each other")
    with tool_errors():
        refuse_projection_group(cluster, group)
        target = reset_target(
            to_earliest=to_earliest,
            to_latest=to_latest,
            to_offset=to_offset,
            to_datetime=to_datetime,
        )
        reset_group_offsets(
            cluster,
            group,
            topic=topic,
            partition=partition,
            target=target,
            dry_run=not execute,
            echo=click.echo,
        )
