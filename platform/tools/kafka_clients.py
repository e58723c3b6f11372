"""The tools' Kafka client factory: confluent-kafka clients, the lookups they share, and the
translation of their errors.

Every request waits at most ``ClusterSettings.request_timeout_s`` (futures
get a short margin on top, since librdkafka enforces the request timeout
itself). ``KafkaException`` never leaves this package: :func:`translated_errors`
turns it into a :class:`KafkaRequestError` whose message says what was being done,
librdkafka's reason and the error name, or that the cluster could not be
reached at all.

librdkafka's own log lines go to the ``eventplatform.tools.librdkafka``
logger, which is silent unless the application configures logging, so a
refused connection is reported once, as an error, not as a stream of lines.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec, TopicDescription

from eventplatform.client_config import kafka_settings
from eventplatform.tools.arguments import ClusterSettings
from eventplatform.tools.errors import KafkaRequestError

CLIENT_ID = "eventplatform-cli"
RESULT_MARGIN_S = 5.0
LIBRDKAFKA_LOGGER = logging.getLogger("eventplatform.tools.librdkafka")
LIBRDKAFKA_LOGGER.addHandler(logging.NullHandler())

# The offset queries of ListOffsets; OffsetSpec's factories carry no annotations.
EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]

# librdkafka's local error names that mean "no broker answered".
UNREACHABLE_ERRORS = frozenset({"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_TIMED_OUT"})


def client_settings(cluster: ClusterSettings) -> dict[str, Any]:
    """The settings every client of the tools shares: the cluster's brokers and security
    (a ``client.id`` of the client config replaces the tools' own)."""
    connection = cluster.bootstrap if cluster.client is None else cluster.client
    return {
        "client.id": CLIENT_ID,
        **kafka_settings(connection),
        "bootstrap.servers": cluster.bootstrap,
        "logger": LIBRDKAFKA_LOGGER,
    }


def admin_client(cluster: ClusterSettings) -> AdminClient:
    return AdminClient(client_settings(cluster))


def describe_error(error: KafkaError) -> str:
    """librdkafka's reason with the error's name, which is what documentation indexes."""
    return f"{error.str()} ({error.name()})"


def kafka_error_of(exception: KafkaException) -> KafkaError | None:
    first = exception.args[0] if exception.args else None
    return first if isinstance(first, KafkaError) else None


def request_error(
    cluster: ClusterSettings, action: str, exception: KafkaException
) -> KafkaRequestError:
    """The one-line :class:`KafkaRequestError` for ``exception`` raised while doing ``action``."""
    error = kafka_error_of(exception)
    if error is None:
        return KafkaRequestError(f"{action}: {exception}")
    return error_of_request(cluster, action, error)


def error_of_request(cluster: ClusterSettings, action: str, error: KafkaError) -> KafkaRequestError:
    """The one-line :class:`KafkaRequestError` for ``error``, met while doing ``action``;
    an error that means no broker answered names the brokers asked."""
    if error.name() in UNREACHABLE_ERRORS:
        return KafkaRequestError(
            f"{action}: no answer from the cluster at {cluster.bootstrap} "
            f"({describe_error(error)})",
            code=error.name(),
        )
    return KafkaRequestError(f"{action}: {describe_error(error)}", code=error.name())


@contextmanager
def translated_errors(cluster: ClusterSettings, action: str) -> Iterator[None]:
    """Re-raise ``KafkaException`` from the block as a :class:`KafkaRequestError` about
    ``action``."""
    try:
        yield
    except KafkaException as exception:
        raise request_error(cluster, action, exception) from exception


def wait_for(future: Future[Any], cluster: ClusterSettings, action: str) -> Any:
    """The result of an admin request, or a :class:`KafkaRequestError` naming ``action``."""
    with translated_errors(cluster, action):
        try:
            return future.result(timeout=cluster.request_timeout_s + RESULT_MARGIN_S)
        except TimeoutError as exception:
            raise KafkaRequestError(
                f"{action}: no answer from the cluster at {cluster.bootstrap} "
                f"within {cluster.request_timeout_s:g}s",
                code="_TIMED_OUT",
            ) from exception


def fetch_topic_description(
    admin: AdminClient, cluster: ClusterSettings, topic: str
) -> TopicDescription:
    """The topic's partitions with their leaders and replicas.

    Uses DescribeTopics rather than a metadata request for the name, which
    a cluster with ``auto.create.topics.enable`` would answer by creating
    the topic.
    """
    futures = admin.describe_topics(
        TopicCollection([topic]), request_timeout=cluster.request_timeout_s
    )
    try:
        description: TopicDescription = wait_for(
            futures[topic], cluster, f"cannot describe topic {topic!r}"
        )
    except KafkaRequestError as error:
        if error.code == "UNKNOWN_TOPIC_OR_PART":
            raise KafkaRequestError(f"topic {topic!r} does not exist", code=error.code) from error
        raise
    return description


def topic_partition_ids(admin: AdminClient, cluster: ClusterSettings, topic: str) -> list[int]:
    """The topic's partition ids in order; a missing topic is a :class:`KafkaRequestError`."""
    return sorted(
        partition.id for partition in fetch_topic_description(admin, cluster, topic).partitions
    )


def partition_offsets(
    admin: AdminClient,
    cluster: ClusterSettings,
    topic: str,
    partitions: Sequence[int],
    spec: OffsetSpec,
) -> dict[int, int]:
    """One ListOffsets answer per partition: earliest, latest or the first at a timestamp.

    For a timestamp, a partition with no record that late answers -1.
    """
    if not partitions:
        return {}
    request = {TopicPartition(topic, partition): spec for partition in partitions}
    futures = admin.list_offsets(request, request_timeout=cluster.request_timeout_s)
    offsets: dict[int, int] = {}
    for topic_partition, future in futures.items():
        result = wait_for(
            future, cluster, f"cannot list offsets of {topic}[{topic_partition.partition}]"
        )
        offsets[topic_partition.partition] = int(result.offset)
    return offsets
