"""``platform topics``: create, list, describe, alter, reassign and delete topics.

Thin shells over :mod:`eventplatform.tools.topics` and :mod:`eventplatform.tools.reassign`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from eventplatform.cluster_cli import controllers_option, data_dir_option
from eventplatform.tool_options import cluster_options, parsed, tool_errors
from eventplatform.tools.arguments import (
    ClusterSettings,
    parse_settings,
)

if TYPE_CHECKING:
    from eventplatform.tools.reassign import Target


@click.group()
def topics() -> None:
    """Create, list, describe, alter, reassign and delete topics."""


@topics.command("create")
@click.argument("topic")
@click.option("--partitions", type=click.IntRange(1), default=None, help="[default: broker's]")
@click.option(
    "--replication-factor", type=click.IntRange(1), default=None, help="[default: broker's]"
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    callback=parsed(parse_settings),
    help="A topic config override; repeatable.",
)
@cluster_options
def topics_create(
    cluster: ClusterSettings,
    topic: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: dict[str, str],
) -> None:
    """Create TOPIC."""
    from eventplatform.tools.topics import create_topic

    with tool_errors():
        create_topic(
            cluster,
            topic,
            partitions=partitions,
            replication_factor=replication_factor,
            configs=configs,
            echo=click.echo,
        )


@topics.command("list")
@cluster_options
def topics_list(cluster: ClusterSettings) -> None:
    """Print every topic name, one per line."""
    from eventplatform.tools.topics import list_topics

    with tool_errors():
        list_topics(cluster, echo=click.echo)


@topics.command("describe")
@click.argument("topic")
@cluster_options
def topics_describe(cluster: ClusterSettings, topic: str) -> None:
    """Show TOPIC's partitions, leaders, replicas and configs with their sources."""
    from eventplatform.tools.topics import describe_topic

    with tool_errors():
        describe_topic(cluster, topic, echo=click.echo)


@topics.command("alter")
@click.argument("topic")
@click.option(
    "--set",
    "set_configs",
    multiple=True,
    metavar="KEY=VALUE",
    callback=parsed(parse_settings),
    help="Set a config override; repeatable.",
)
@click.option(
    "--delete",
    "delete_configs",
    multiple=True,
    metavar="KEY",
    help="Remove a config override (back to the default); repeatable.",
)
@click.option("--partitions", type=click.IntRange(1), default=None, help="New partition count.")
@click.option(
    "--force",
    is_flag=True,
    help="With --partitions on a topic that keeps entity versions: turn them off first.",
)
@cluster_options
def topics_alter(
    cluster: ClusterSettings,
    topic: str,
    set_configs: dict[str, str],
    delete_configs: tuple[str, ...],
    partitions: int | None,
    force: bool,
) -> None:
    """Change TOPIC's config overrides key by key, or raise its partition count.

    More partitions for a topic that keeps entity versions (an event topic) are refused:
    the entities whose keys would move lose their order and versions. --force turns the
    versions off first."""
    from eventplatform.tools.topics import alter_topic

    with tool_errors():
        alter_topic(
            cluster,
            topic,
            set_configs=set_configs,
            delete_configs=delete_configs,
            partitions=partitions,
            echo=click.echo,
            force=force,
        )


@topics.command("delete")
@click.argument("topic")
@cluster_options
def topics_delete(cluster: ClusterSettings, topic: str) -> None:
    """Delete TOPIC and all its records."""
    from eventplatform.tools.topics import delete_topic

    with tool_errors():
        delete_topic(cluster, topic, echo=click.echo)


@topics.command("reassign")
@click.argument("topic", required=False)
@click.option("--partition", type=click.IntRange(0), default=None, help="TOPIC's partition.")
@click.option(
    "--replicas",
    default=None,
    metavar="ID[,ID...]",
    help="The partition's new replicas in order; the first is its preferred leader.",
)
@click.option(
    "--plan",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="A reassignment plan in Kafka's JSON format, instead of TOPIC.",
)
@click.option("--cancel", is_flag=True, help="Cancel the reassignment of the partitions named.")
@click.option("--list", "list_", is_flag=True, help="Show the reassignments in progress.")
@click.option("--wait", "wait_", is_flag=True, help="Block until the reassignment completes.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="How long --wait waits.",
)
@data_dir_option
@controllers_option
def topics_reassign(
    topic: str | None,
    partition: int | None,
    replicas: str | None,
    plan: Path | None,
    cancel: bool,
    list_: bool,
    wait_: bool,
    timeout: float,
    data_dir: Path,
    controllers: str | None,
) -> None:
    """Move partitions' replicas between brokers of a cluster.

    One partition: TOPIC --partition N --replicas 3,1,2. Many: --plan FILE. New
    replicas copy the partition, then the removed ones delete it; --cancel goes back
    to the replicas before, --list shows what is moving."""
    from eventplatform.tools import reassign
    from eventplatform.tools.cluster_status import controller_network, controller_voters

    network = controller_network(data_dir)
    with tool_errors():
        if list_:
            voters = controller_voters(data_dir=data_dir, controllers=controllers)
            reassign.show(voters, topic, echo=click.echo, network=network)
            return
        targets = _reassign_targets(topic, partition, replicas, plan, cancel=cancel)
        voters = controller_voters(data_dir=data_dir, controllers=controllers)
        if cancel:
            reassign.cancel(voters, targets, echo=click.echo, network=network)
            return
        reassign.start(voters, targets, echo=click.echo, network=network)
        if wait_:
            reassign.wait(voters, targets, timeout, echo=click.echo, network=network)


def _reassign_targets(
    topic: str | None,
    partition: int | None,
    replicas: str | None,
    plan: Path | None,
    *,
    cancel: bool,
) -> list[Target]:
    from eventplatform.tools import reassign
    from eventplatform.tools.errors import InvalidInputError

    if plan is not None:
        if topic is not None or partition is not None or replicas is not None:
            raise InvalidInputError("give either --plan or TOPIC --partition, not both")
        return reassign.read_plan(plan, require_replicas=not cancel)
    if topic is None or partition is None:
        raise InvalidInputError("give TOPIC --partition N, or --plan FILE")
    if cancel:
        if replicas is not None:
            raise InvalidInputError("--cancel takes no --replicas")
        return [reassign.Target(topic, partition)]
    if replicas is None:
        raise InvalidInputError("give the new replicas with --replicas, as 3,1,2")
    return [reassign.Target(topic, partition, reassign.parse_replicas(replicas))]
