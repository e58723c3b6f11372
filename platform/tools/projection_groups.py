"""Telling a projection runner's consumer group from any other, for the group tools.

A projection runner joins a group, but resumes from the checkpoints stored in
its database, not from the group's committed offsets: it commits offsets only
so that lag shows. Moving those offsets therefore moves nothing, and the
runner puts its checkpoints back on its next assignment. ``platform groups
reset-offsets`` asks :func:`refuse_projection_group` first and, for a
projection's group, says so and names the commands that do move a projection.

A group is a projection's when its committed offsets carry the runners' marker
in their metadata (``GROUP_MARKER`` and the projection's name), whatever the
group's id; or when its id starts with ``projection.``, the prefix of the groups
runners join by default (also those that committed before the marker existed).
"""

from __future__ import annotations

import re

from confluent_kafka import ConsumerGroupTopicPartitions

from eventplatform.projections.model import GROUP_ID_PREFIX, GROUP_MARKER
from eventplatform.tools.arguments import ClusterSettings
from eventplatform.tools.errors import InvalidInputError
from eventplatform.tools.kafka_clients import admin_client, wait_for

GROUP_TOKEN = re.compile(r"\.[0-9a-f]{8}$")
"""The per-database token at the end of a default projection group's id."""


class ProjectionGroupError(InvalidInputError):
    """The group is a projection runner's: its committed offsets do not say where it resumes."""


def projection_of_group(cluster: ClusterSettings, group: str) -> str | None:
    """The name of the projection whose runners use ``group``, or None for another group."""
    admin = admin_client(cluster)
    request = ConsumerGroupTopicPartitions(group, None)
    futures = admin.list_consumer_group_offsets(
        [request], request_timeout=cluster.request_timeout_s
    )
    result = wait_for(futures[group], cluster, f"cannot read the offsets of group {group!r}")
    for entry in result.topic_partitions or []:
        metadata = entry.metadata or ""
        if metadata.startswith(GROUP_MARKER):
            return metadata.removeprefix(GROUP_MARKER)
    if group.startswith(GROUP_ID_PREFIX) and len(group) > len(GROUP_ID_PREFIX):
        return GROUP_TOKEN.sub("", group.removeprefix(GROUP_ID_PREFIX))
    return None


def refuse_projection_group(cluster: ClusterSettings, group: str) -> None:
    """Raise :class:`ProjectionGroupError`, saying what moves a projection, when ``group``
    is a projection runner's; return for any other group."""
    name = projection_of_group(cluster, group)
    if name is None:
        return
    raise ProjectionGroupError(
        f"group {group!r} belongs to projection {name}, whose runners resume from the "
        "checkpoints in their database, not from the group's offsets: resetting them would "
        "move nothing (the runners commit their checkpoints again when they start). To "
        f"replay the projection from an offset, run `platform replay --projection {name} "
        "--from-offset N` (or --from-offsets JSON; --mode backfill recomputes only the rows "
        f"the range touches); `platform projections status {name}` shows where it is"
    )
