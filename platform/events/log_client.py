"""A small blocking client of the log, for what the entity store needs and librdkafka
cannot do.

librdkafka batches records as it sees fit, so the events of one decision could travel
in two batches and be half appended. This client sends a decision's events as one
batch, which the log appends or refuses whole, and reads one entity through this log's
own EntityRead API. It speaks the Kafka protocol with the log's own codec, to the
leader of each partition, as the metadata names it, over connections secured as the
client config says (:mod:`eventplatform.client_config`,
:mod:`eventplatform.events.log_connection`).

Bounds: a request waits at most ``request_timeout_s`` for its answer, an answer is at
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
from dataclasses import dataclass
from typing import Any

from eventplatform.client_config import KafkaConnection, client_config_of
from eventplatform.events.errors import EventError
from eventplatform.events.log_connection import (
    AuthenticationFailedError,
    open_connection,
    round_trip,
)
from eventplatform.log.protocol import Api, ErrorCode, ProtocolError
from eventplatform.log.protocol.apis import ENTITY_READ, METADATA, PRODUCE

REQUEST_TIMEOUT_S_DEFAULT = 10.0
ATTEMPTS_DEFAULT = 8
RETRY_BACKOFF_S = 0.05
RETRY_BACKOFF_MAX_S = 1.0
METADATA_VERSION = 12
PRODUCE_VERSION = 9
ENTITY_READ_VERSION = 0
ACKS_ALL = -1
CORRELATION_ID_MASK = 0x7FFFFFFF
NO_TOPIC_ID = bytes(16)

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
        """How many partitions ``topic`` has (raises LogClientError when it has none)."""
        with self._lock:
            if topic not in self._partitions:
                self._refresh(topic)
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

    def _partition_request(
        self,
        topic: str,
        partition: int,
        api: Api,
        version: int,
        body: dict[str, Any],
        answer_of: Any,
    ) -> Answer:
        backoff = RETRY_BACKOFF_S
        last = "no attempt"
        with self._lock:
            for attempt in range(self.attempts):
                if attempt:
                    time.sleep(backoff)
                    backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
                try:
                    leader = self._leader(topic, partition)
                    response = self._request(self._brokers[leader], api, version, body)
                except _UnreachableError as exc:
                    last = str(exc)
                    self._leaders.clear()
                    continue
                except LogClientError as exc:
                    if exc.error not in RETRIABLE:
                        raise
                    last = str(exc)
                    self._leaders.clear()
                    continue
                found = answer_of(response)
                error = ErrorCode(found["error_code"])
                if error in RETRIABLE:
                    last = f"{error.name}: {found.get('error_message')}"
                    self._leaders.clear()
                    continue
                return Answer(error, found.get("error_message"), found)
        raise LogClientError(
            f"{api.name} to {topic}-{partition} failed {self.attempts} times; last: {last}"
        )

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
        for address in [*self._brokers.values(), *self.bootstrap]:
            try:
                response = self._request(address, METADATA, METADATA_VERSION, body)
            except _UnreachableError as exc:
                failures.append(str(exc))
                continue
            self._brokers = {b["node_id"]: (b["host"], b["port"]) for b in response["brokers"]}
            for entry in response["topics"]:
                error = ErrorCode(entry["error_code"])
                if error is not ErrorCode.NONE:
                    raise LogClientError(f"topic {topic!r}: {error.name}", error)
                self._partitions[topic] = len(entry["partitions"])
                for found in entry["partitions"]:
                    self._leaders[(topic, found["partition_index"])] = found["leader_id"]
            return
        raise LogClientError(f"no broker answered: {'; '.join(failures)}")

    # ------------------------------------------------------------ the wire

    def _request(
        self, address: tuple[str, int], api: Api, version: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        self._correlation = (self._correlation + 1) & CORRELATION_ID_MASK
        sock = self._socket(address)
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


def _address(entry: str) -> tuple[str, int]:
    host, _, port = entry.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{entry!r} is not host:port")
    return host.strip("[]"), int(port)
