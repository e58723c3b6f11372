"""A small blocking client of the log, for what the entity store needs and librdkafka
cannot do.

librdkafka batches records as it sees fit, so the events of one decision could travel
in two batches and be half appended. This client sends a decision's events as one
batch, which the log appends or refuses whole, reads one entity through this log's own
EntityRead API, and erases records through its EraseRecords API (:func:`erase_events`).
It speaks the Kafka protocol with the log's own codec, to the leader of each partition,
as the metadata names it, over connections secured as the client config says
(:mod:`eventplatform.client_config`, :mod:`eventplatform.events.log_connection`).

Bounds: a request waits at most ``request_timeout_s`` for its answer (an erasure
``request_timeout_s`` more than the ``timeout_ms`` it gives the broker), an answer is at
most ``log_connection.RESPONSE_BYTES_MAX``, and a request that meets a leader change, a
partition not ready yet or a dropped connection is sent again after a metadata refresh, at most
``attempts`` times in all, ``RETRY_BACKOFF_S`` apart (doubling, up to
``RETRY_BACKOFF_MAX_S``). One lock serialises the requests of a client, so threads may
share it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from eventplatform.client_config import KafkaConnection, client_config_of
from eventplatform.events.errors import EventError
from eventplatform.events.log_connection import (
    AuthenticationFailedError,
    open_connection,
    round_trip,
)
from eventplatform.events.model import EventRef, Position
from eventplatform.log.protocol import Api, ErrorCode, ProtocolError
from eventplatform.log.protocol.apis import ENTITY_READ, ERASE_RECORDS, METADATA, PRODUCE
from eventplatform.log.protocol.apis.entities import ERASE_OFFSETS_MAX

REQUEST_TIMEOUT_S_DEFAULT = 10.0
ATTEMPTS_DEFAULT = 8
RETRY_BACKOFF_S = 0.05
RETRY_BACKOFF_MAX_S = 1.0
METADATA_VERSION = 12
PRODUCE_VERSION = 9
ENTITY_READ_VERSION = 0
ERASE_RECORDS_VERSION = 0
ACKS_ALL = -1
CORRELATION_ID_MASK = 0x7FFFFFFF
ERASE_ATTEMPTS = 40
"""Tries of each erasure request: with the backoff capped at RETRY_BACKOFF_MAX_S, about
35 s of retrying, to outlast the election of a new leader when one dies meanwhile."""
ERASE_TIMEOUT_S_DEFAULT = 60.0
"""How long :func:`erase_events` lets one request wait for its erasure on the leader."""
NO_TOPIC_ID = bytes(16)
T = TypeVar("T")

RETRIABLE = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)
"""Answers that a metadata refresh and another try may cure."""


class LogClientError(EventError):
    """The log could not be reached, or kept answering ``error`` (a Kafka error code)."""

    def __init__(self, message: str, error: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.error = error


class _UnreachableError(Exception):
    """A connection failed or dropped; the request may be tried again."""


@dataclass(frozen=True)
class Answer:
    """A partition's answer: its error code and message, and the body for the rest."""

    error: ErrorCode
    message: str | None
    body: dict[str, Any]


class LogClient:
    """See the module docstring."""

    def __init__(
        self,
        bootstrap: KafkaConnection,
        *,
        client_id: str = "eventplatform-entities",
        request_timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT,
        attempts: int = ATTEMPTS_DEFAULT,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {attempts}")
        self.config = client_config_of(bootstrap)
        brokers = self.config.bootstrap
        self.bootstrap = [_address(entry) for entry in brokers.split(",") if entry.strip()]
        if not self.bootstrap:
            raise ValueError(f"no broker address in {brokers!r}")
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.attempts = attempts
        self._lock = threading.Lock()
        self._sockets: dict[tuple[str, int], socket.socket] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._partitions: dict[str, int] = {}
        self._correlation = 0

    def __enter__(self) -> LogClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for sock in self._sockets.values():
                sock.close()
            self._sockets.clear()

    # ------------------------------------------------------------ requests

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (raises LogClientError when it has none).

        A broker that has not laid the topic out yet (it is being created, or the broker
        has just started) is asked again, as a request is."""
        with self._lock:
            if topic not in self._partitions:
                self._retrying(
                    f"Metadata for {topic}",
                    lambda: self._refresh(topic),
                    frozenset({ErrorCode.LEADER_NOT_AVAILABLE}),
                )
            return self._partitions[topic]

    def produce(self, topic: str, partition: int, batch: bytes, *, timeout_ms: int) -> Answer:
        """Append one batch with acks=all; the partition's answer, once retriable errors
        stopped or the attempts ran out."""
        body = {
            "transactional_id": None,
            "acks": ACKS_ALL,
            "timeout_ms": timeout_ms,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
            ],
        }

        def answer(response: dict[str, Any]) -> dict[str, Any]:
            found: dict[str, Any] = response["responses"][0]["partition_responses"][0]
            return found

        return self._partition_request(topic, partition, PRODUCE, PRODUCE_VERSION, body, answer)

    def entity_read(
        self, topic: str, partition: int, key: bytes, from_offset: int, max_bytes: int
    ) -> Answer:
        """One EntityRead page (see :mod:`eventplatform.log.protocol.apis.entities`)."""
        body = {
            "topic": topic,
            "partition": partition,
            "current_leader_epoch": -1,
            "key": key,
            "from_offset": from_offset,
            "max_bytes": max_bytes,
        }
        return self._partition_request(
            topic, partition, ENTITY_READ, ENTITY_READ_VERSION, body, lambda response: response
        )

    def erase_records(
        self, topic: str, partition: int, offsets: Iterable[int], *, timeout_ms: int
    ) -> Answer:
        """Erase the records at ``offsets`` of one partition, on every replica.

        Each erased record keeps its offset, timestamp and key; its value becomes null
        and its headers the one ``eventplatform.erased``. The offsets go to the leader
        :data:`ERASE_OFFSETS_MAX` to a request, in order, each request waiting at most
        ``timeout_ms`` for its erasure to be done on the leader. The answer's
        ``body["erased"]`` sums the requests' counts of offsets the log held. An error
        answer (not allowed, offsets past the high watermark, an unknown partition)
        raises LogClientError with the broker's message; the requests before it have
        erased their offsets, and erasing an offset again changes nothing.
        """
        wanted = sorted(set(offsets))
        erased = 0
        for first in range(0, len(wanted), ERASE_OFFSETS_MAX):
            body = {
                "topic": topic,
                "partition": partition,
                "current_leader_epoch": -1,
                "offsets": wanted[first : first + ERASE_OFFSETS_MAX],
                "timeout_ms": timeout_ms,
            }
            answer = self._partition_request(
                topic,
                partition,
                ERASE_RECORDS,
                ERASE_RECORDS_VERSION,
                body,
                lambda response: response,
                wait_s=timeout_ms / 1000,
            )
            if answer.error is not ErrorCode.NONE:
                reason = answer.message or answer.error.name.lower().replace("_", " ")
                raise LogClientError(
                    f"{topic}-{partition}: {reason} ({answer.error.name})", answer.error
                )
            erased += answer.body["erased"]
        return Answer(ErrorCode.NONE, None, {"erased": erased})

    def _partition_request(
        self,
        topic: str,
        partition: int,
        api: Api,
        version: int,
        body: dict[str, Any],
        answer_of: Any,
        *,
        wait_s: float = 0.0,
    ) -> Answer:
        def attempt() -> Answer:
            leader = self._leader(topic, partition)
            response = self._request(self._brokers[leader], api, version, body, wait_s=wait_s)
            found = answer_of(response)
            error = ErrorCode(found["error_code"])
            if error in RETRIABLE:
                raise LogClientError(f"{error.name}: {found.get('error_message')}", error)
            return Answer(error, found.get("error_message"), found)

        with self._lock:
            return self._retrying(f"{api.name} to {topic}-{partition}", attempt)

    def _retrying(
        self,
        what: str,
        attempt: Callable[[], T],
        retriable: frozenset[ErrorCode] = RETRIABLE,
    ) -> T:
        """``attempt()``, again after a dropped connection or a ``retriable`` error (with
        the leaders forgotten, so the next try refreshes them), at most ``attempts`` times
        in all; then LogClientError naming ``what`` and the last failure."""
        backoff = RETRY_BACKOFF_S
        last = "no attempt"
        for number in range(self.attempts):
            if number:
                time.sleep(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
            try:
                return attempt()
            except _UnreachableError as exc:
                last = str(exc)
            except LogClientError as exc:
                if exc.error not in retriable:
                    raise
                last = str(exc)
            self._leaders.clear()
        raise LogClientError(f"{what} failed {self.attempts} times; last: {last}")

    # ------------------------------------------------------------ metadata

    def _leader(self, topic: str, partition: int) -> int:
        leader = self._leaders.get((topic, partition))
        if leader is None:
            self._refresh(topic)
            leader = self._leaders.get((topic, partition))
            count = self._partitions.get(topic, 0)
            if count and not 0 <= partition < count:  # none known yet: metadata may catch up
                raise LogClientError(f"{topic} has {count} partitions: no partition {partition}")
        if leader is None or leader < 0 or leader not in self._brokers:
            raise LogClientError(
                f"{topic}-{partition} has no leader yet", ErrorCode.LEADER_NOT_AVAILABLE
            )
        return leader

    def _refresh(self, topic: str) -> None:
        body = {
            "topics": [{"topic_id": NO_TOPIC_ID, "name": topic}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        failures = []
        not_ready = False
        for address in [*self._brokers.values(), *self.bootstrap]:
            try:
                response = self._request(address, METADATA, METADATA_VERSION, body)
            except _UnreachableError as exc:
                failures.append(str(exc))
                continue
            (entry,) = response["topics"]
            error = ErrorCode(entry["error_code"])
            if error is ErrorCode.NONE and not entry["partitions"]:
                error = ErrorCode.LEADER_NOT_AVAILABLE  # a layout this broker lacks yet
            if error is ErrorCode.LEADER_NOT_AVAILABLE:  # another broker may have it
                failures.append(f"{address[0]}:{address[1]}: topic {topic!r}: {error.name}")
                not_ready = True
                continue
            if error is not ErrorCode.NONE:
                raise LogClientError(f"topic {topic!r}: {error.name}", error)
            self._brokers = {b["node_id"]: (b["host"], b["port"]) for b in response["brokers"]}
            self._partitions[topic] = len(entry["partitions"])
            for found in entry["partitions"]:
                self._leaders[(topic, found["partition_index"])] = found["leader_id"]
            return
        raise LogClientError(
            f"no broker answered for {topic!r}: {'; '.join(failures)}",
            ErrorCode.LEADER_NOT_AVAILABLE if not_ready else None,
        )

    # ------------------------------------------------------------ the wire

    def _request(
        self,
        address: tuple[str, int],
        api: Api,
        version: int,
        body: dict[str, Any],
        *,
        wait_s: float = 0.0,
    ) -> dict[str, Any]:
        """One round trip; the answer may take ``wait_s`` more than ``request_timeout_s``
        (a request that waits on the broker, as an erasure does)."""
        self._correlation = (self._correlation + 1) & CORRELATION_ID_MASK
        sock = self._socket(address)
        sock.settimeout(self.request_timeout_s + wait_s)
        try:
            response = round_trip(
                sock,
                api,
                version,
                body,
                correlation_id=self._correlation,
                client_id=self.client_id,
            )
        except (OSError, ProtocolError) as exc:
            self._drop(address)
            raise _UnreachableError(f"{address[0]}:{address[1]}: {exc}") from exc
        return response

    def _socket(self, address: tuple[str, int]) -> socket.socket:
        sock = self._sockets.get(address)
        if sock is None:
            try:
                sock = open_connection(
                    address,
                    self.config,
                    timeout_s=self.request_timeout_s,
                    client_id=self.client_id,
                )
            except AuthenticationFailedError as exc:
                raise LogClientError(f"{address[0]}:{address[1]}: {exc}") from exc
            except (OSError, ProtocolError) as exc:
                raise _UnreachableError(f"{address[0]}:{address[1]}: {exc}") from exc
            self._sockets[address] = sock
        return sock

    def _drop(self, address: tuple[str, int]) -> None:
        sock = self._sockets.pop(address, None)
        if sock is not None:
            sock.close()


def erase_events(
    bootstrap: KafkaConnection,
    refs: Iterable[EventRef | Position],
    *,
    timeout_s: float = ERASE_TIMEOUT_S_DEFAULT,
) -> dict[tuple[str, int], int]:
    """Erase the records of ``refs`` from the log, on every replica; per ``(topic,
    partition)``, how many of them the log held.

    An erased event keeps its position, timestamp and key, and nothing else: readers
    skip it from then on. Retract an event from the projections before erasing it,
    since a correction is applied by reading the event it corrects. Needs DELETE on
    the topics, and a log that speaks EraseRecords (this platform's broker, not Apache
    Kafka). Raises LogClientError; the partitions before the failing one are erased,
    and erasing them again changes nothing.
    """
    wanted: dict[tuple[str, int], set[int]] = {}
    for ref in refs:
        position = ref.position if isinstance(ref, EventRef) else ref
        wanted.setdefault((position.topic, position.partition), set()).add(position.offset)
    erased: dict[tuple[str, int], int] = {}
    with LogClient(bootstrap, client_id="eventplatform-erase", attempts=ERASE_ATTEMPTS) as client:
        for (topic, partition), offsets in sorted(wanted.items()):
            answer = client.erase_records(
                topic, partition, offsets, timeout_ms=int(timeout_s * 1000)
            )
            erased[topic, partition] = int(answer.body["erased"])
    return erased


def _address(entry: str) -> tuple[str, int]:
    host, _, port = entry.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{entry!r} is not host:port")
    return host.strip("[]"), int(port)
