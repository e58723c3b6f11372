"""What a handler receives besides its decoded request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from eventplatform.log.broker.broker import Broker
from eventplatform.log.protocol import Api, ErrorCode, RequestHeader
from eventplatform.log.protocol.schema import Versions
from eventplatform.log.replica.partition import Partition
from eventplatform.log.security.session import Session

Body = dict[str, Any]


@dataclass(frozen=True, slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    client_host: str
    connection_id: int
    session: Session
    """Who the client is (its principal) and how far its authentication has gone."""

    @property
    def version(self) -> int:
        return self.header.api_version


@dataclass(frozen=True, slots=True)
class Deferred:
    """A response whose body is ready only later: an acks=all produce, appended already,
    that waits for its replicas. The connection reads and runs the requests behind it
    meanwhile, and sends the responses in request order all the same."""

    body: Callable[[], Awaitable[Body]]


HandleFunction = Callable[[RequestContext, Body], Awaitable[Body | Deferred | None]]


@dataclass(frozen=True, slots=True)
class Handler:
    """One API as the broker serves it: its table, the versions it accepts, its function.

    ``handle`` returns the response body, a :class:`Deferred` one, or None when no
    response is sent (Produce with acks=0). ``inter_broker_versions`` are accepted too
    but not advertised: versions only brokers send one another (Fetch v15, whose
    ReplicaState carries a follower's broker epoch), which clients never pick. An API
    that is not ``advertised`` (this log's own) is served but not listed at all.
    """

    api: Api
    versions: Versions
    handle: HandleFunction
    inter_broker_versions: Versions | None = None
    advertised: bool = True

    def accepts(self, version: int) -> bool:
        inter_broker = self.inter_broker_versions
        return version in self.versions or (inter_broker is not None and version in inter_broker)


def answer_partitions(
    context: RequestContext,
    topics: list[Body],
    answer: Callable[[Partition | ErrorCode, Body], Body],
    *,
    topic_key: str = "name",
    partition_key: str = "partition_index",
    allowed: Callable[[str], bool] | None = None,
) -> list[Body]:
    """Answer a request laid out as topics holding partitions, partition by partition.

    ``answer`` gets the broker's partition, or when this broker holds none the error
    that says why (NOT_LEADER_OR_FOLLOWER for a partition held by other brokers,
    UNKNOWN_TOPIC_OR_PARTITION for one that does not exist, TOPIC_AUTHORIZATION_FAILED
    for a topic ``allowed`` refuses, before its existence is looked at), and the
    request's entry for it; the result keeps the request's topic order and field names.
    """
    registry = context.broker.topics
    results = []
    for topic_entry in topics:
        name = topic_entry[topic_key]
        permitted = allowed is None or allowed(name)
        answers = []
        for entry in topic_entry["partitions"]:
            index = entry[partition_key]
            held = registry.partition(name, index) if permitted else None
            if not permitted:
                answers.append(answer(ErrorCode.TOPIC_AUTHORIZATION_FAILED, entry))
                continue
            answers.append(
                answer(registry.absence_error(name, index) if held is None else held, entry)
            )
        results.append({topic_key: name, "partitions": answers})
    return results
