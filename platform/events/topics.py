"""Event topics as a source of truth keeps them, created by the SDK before its first
append to them.

An event topic keeps every event for good (``retention.ms=-1``,
``retention.bytes=-1``), is never compacted (``cleanup.policy=delete``, and nothing
is old enough to delete), and counts each entity's events
(``eventplatform.entity.versions.enable=true``), so that a record carrying
``eventplatform.expected.version`` is appended only at its entity's version. Its
partition count and replication factor are the broker's defaults. A topic that exists
already is left as it is: ``platform topics describe`` shows what it keeps.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from eventplatform.events.errors import AppendError
from eventplatform.log.extensions import ENTITY_VERSIONS_CONFIG

EVENT_TOPIC_CONFIG: Mapping[str, str] = {
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "cleanup.policy": "delete",
    ENTITY_VERSIONS_CONFIG: "true",
}
"""The configs of a topic the SDK creates for events."""
BROKER_DEFAULT = -1
"""The partition count or replication factor the broker chooses (CreateTopics v4+)."""


def create_event_topics(
    settings: Mapping[str, Any], topics: Collection[str], *, timeout_s: float
) -> list[str]:
    """Create the ``topics`` that do not exist yet with :data:`EVENT_TOPIC_CONFIG`; the
    names created. Raises AppendError when the log cannot be asked or refuses."""
    if not topics:
        return []
    admin = AdminClient(dict(settings))
    new = [
        NewTopic(topic, BROKER_DEFAULT, BROKER_DEFAULT, config=dict(EVENT_TOPIC_CONFIG))
        for topic in sorted(topics)
    ]
    try:
        futures = admin.create_topics(new, request_timeout=timeout_s, operation_timeout=timeout_s)
    except KafkaException as exc:
        raise AppendError(f"cannot create the event topics {sorted(topics)}: {exc}", []) from exc
    created = []
    for topic, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise AppendError(f"cannot create the event topic {topic!r}: {exc}", []) from exc
        else:
            created.append(topic)
    return created
