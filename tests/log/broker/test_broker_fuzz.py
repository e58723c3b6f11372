"""Random and mutated frames against a live broker, which must keep serving everyone else.

One broker runs in a background thread for the whole module. Each example
opens a connection, writes bytes derived from valid requests of every API
and version the broker serves (bit flips, truncations, splices, wrong size
prefixes, plain noise), half-closes, and reads whatever comes back until the
broker closes or a short deadline passes. Then a well-behaved client on its
own connection must still get correct answers: Metadata, and a produce that
a fetch reads back. The broker thread must still be running, and the broker
must not have logged an internal error: garbage is answered with an error
code or a closed connection, never with a crash.
"""

from __future__ import annotations

import logging
import queue
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventplatform.log.broker.dispatcher import HANDLER_MODULES, build_handlers
from eventplatform.log.broker.server import BrokerServer
from eventplatform.log.config import BrokerConfig
from eventplatform.log.protocol import Api, decode_response, encode_request
from eventplatform.log.protocol.apis import FETCH, METADATA, PRODUCE
from eventplatform.log.storage import Record
from eventplatform.log.storage.record_batch import decode_record_set, encode_batch

FUZZ_TOPIC = "fuzz"
HEALTH_TOPIC = "health"
GROUP = "fuzz-group"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 0.5
HEALTH_TIMEOUT_S = 10.0
FRAME_BYTES_MAX = 64 * 1024
EXAMPLES = 500
_SIZE = struct.Struct(">i")


# ---------------------------------------------------------------- the broker thread


class ThreadedBroker:
    """A ``BrokerServer`` on its own trio loop in a thread; ``error`` holds what killed it."""

    def __init__(self, config: BrokerConfig) -> None:
        self.server = BrokerServer(config)
        self.error: BaseException | None = None
        self.port = 0
        self._started: queue.Queue[int | None] = queue.Queue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._thread = threading.Thread(target=self._run, name="fuzzed-broker", daemon=True)

    def start(self) -> None:
        self._thread.start()
        port = self._started.get(timeout=START_TIMEOUT_S)
        if port is None:
            raise RuntimeError("the broker did not start") from self.error
        self.port = port

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:
            self.error = exc
        finally:
            self._started.put(None)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            self._scope = nursery.cancel_scope
            port = await nursery.start(self.server.run)
            self._started.put(port)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def stop(self) -> None:
        if self._token is not None and self._thread.is_alive():
            assert self._scope is not None
            trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(STOP_TIMEOUT_S)


class ErrorRecords(logging.Handler):
    """Keeps every ERROR (or worse) record the broker logs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ThreadedBroker, Any]]:
    config = BrokerConfig(
        data_dir=tmp_path_factory.mktemp("fuzzed-broker"),
        listen_port=0,
        socket_request_max_bytes=FRAME_BYTES_MAX,
        offsets_topic_num_partitions=1,
        group_initial_rebalance_delay_ms=0,
    )
    errors = ErrorRecords()
    logger = logging.getLogger("eventplatform")
    logger.addHandler(errors)
    broker = ThreadedBroker(config)
    broker.start()
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=HEALTH_TIMEOUT_S) as sock:
            health = HealthClient(sock)
            health.metadata([FUZZ_TOPIC, HEALTH_TOPIC])
            yield broker, (health, errors)
    finally:
        broker.stop()
        logger.removeHandler(errors)
    assert broker.error is None, broker.error


# ---------------------------------------------------------------- a well-behaved client


class HealthClient:
    """A blocking client on one connection that checks the broker still answers correctly."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.correlation_id = 0
        self.produced = 0

    def request(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.correlation_id += 1
        frame = encode_request(api, version, body, correlation_id=self.correlation_id)
        self.sock.sendall(frame)
        size = _SIZE.unpack(self._receive(4))[0]
        correlation_id, answer = decode_response(api, version, self._receive(size))
        assert correlation_id == self.correlation_id
        return answer

    def _receive(self, count: int) -> bytes:
        data = bytearray()
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the health connection")
            data += chunk
        return bytes(data)

    def metadata(self, topics: list[str]) -> dict[str, Any]:
        answer = self.request(METADATA, 8, {"topics": [{"name": name} for name in topics]})
        assert [topic["name"] for topic in answer["topics"]] == topics
        assert all(topic["error_code"] == 0 for topic in answer["topics"]), answer
        return answer

    def round_trip(self) -> None:
        self.produced += 1
        value = b"health-%d" % self.produced
        produced = self.request(PRODUCE, 8, produce_body(HEALTH_TOPIC, [value]))
        answer = produced["responses"][0]["partition_responses"][0]
        assert answer["error_code"] == 0, answer
        offset = answer["base_offset"]
        fetched = self.request(FETCH, 11, fetch_body(HEALTH_TOPIC, offset))
        partition = fetched["responses"][0]["partitions"][0]
        assert partition["error_code"] == 0, partition
        records = [
            record
            for batch in decode_record_set(partition["records"] or b"")
            for record in batch.records
            if record.offset == offset
        ]
        assert [record.value for record in records] == [value]


# ---------------------------------------------------------------- seeds


def produce_body(topic: str, values: list[bytes], acks: int = -1) -> dict[str, Any]:
    records = [Record(index, 1_700_000_000_000, b"k", value) for index, value in enumerate(values)]
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": 0, "records": encode_batch(records, base_offset=0)}],
            }
        ],
    }


def fetch_body(topic: str, offset: int) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }


def _sample_bodies() -> dict[str, dict[str, Any]]:
    topic_partitions = [{"name": FUZZ_TOPIC, "partition_indexes": [0]}]
    return {
        "Produce": produce_body(FUZZ_TOPIC, [b"a", b"bb"]),
        "Fetch": fetch_body(FUZZ_TOPIC, 0),
        "ListOffsets": {
            "replica_id": -1,
            "topics": [
                {"name": FUZZ_TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}
            ],
        },
        "Metadata": {"topics": [{"name": FUZZ_TOPIC}]},
        "CreateTopics": {
            "topics": [
                {
                    "name": "fuzz-new",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "configs": [{"name": "retention.ms", "value": "1000"}],
                }
            ],
            "validate_only": True,
        },
        "DeleteTopics": {"topic_names": ["doomed"], "timeout_ms": 100},
        "DeleteRecords": {
            "topics": [{"name": "doomed", "partitions": [{"partition_index": 0, "offset": 0}]}]
        },
        "InitProducerId": {"transactional_id": None, "transaction_timeout_ms": 1000},
        "OffsetForLeaderEpoch": {
            "topics": [{"topic": FUZZ_TOPIC, "partitions": [{"partition": 0, "leader_epoch": 0}]}]
        },
        "DescribeConfigs": {
            "resources": [{"resource_type": 2, "resource_name": FUZZ_TOPIC}],
            "include_synonyms": True,
        },
        "AlterConfigs": {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "doomed",
                    "configs": [{"name": "retention.ms", "value": "1000"}],
                }
            ],
            "validate_only": True,
        },
        "IncrementalAlterConfigs": {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "doomed",
                    "configs": [{"name": "cleanup.policy", "config_operation": 2, "value": "x"}],
                }
            ],
            "validate_only": True,
        },
        "CreatePartitions": {
            "topics": [{"name": "doomed", "count": 2, "assignments": None}],
            "validate_only": True,
        },
        "OffsetCommit": {
            "group_id": GROUP,
            "generation_id_or_member_epoch": -1,
            "topics": [
                {
                    "name": FUZZ_TOPIC,
                    "partitions": [{"partition_index": 0, "committed_offset": 1}],
                }
            ],
        },
        "OffsetFetch": {"group_id": GROUP, "topics": topic_partitions},
        "FindCoordinator": {"key": GROUP},
        "JoinGroup": {
            "group_id": GROUP,
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00"}],
        },
        "Heartbeat": {"group_id": GROUP, "generation_id": 1, "member_id": "m"},
        "LeaveGroup": {"group_id": GROUP, "member_id": "m", "members": [{"member_id": "m"}]},
        "SyncGroup": {"group_id": GROUP, "generation_id": 1, "member_id": "m"},
        "DescribeGroups": {"groups": [GROUP]},
        "DeleteGroups": {"groups_names": [GROUP]},
    }


def _seed_frames() -> list[bytes]:
    """A valid frame for every served API at every version it accepts, and one beyond."""
    bodies = _sample_bodies()
    frames = []
    for handler in build_handlers(HANDLER_MODULES).values():
        api = handler.api
        body = bodies.get(api.name, {})
        high = min(handler.versions.high, api.versions.high)
        for version in range(handler.versions.low, high + 2):
            if version not in api.versions:
                continue
            known = {field.name for field in api.request}
            fitted = {key: value for key, value in body.items() if key in known}
            frames.append(encode_request(api, version, fitted, correlation_id=version + 1))
    return frames


SEEDS = _seed_frames()


def _framed(body: bytes) -> bytes:
    return _SIZE.pack(len(body)) + body


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    seed = draw(st.sampled_from(SEEDS))
    body = seed[4:]
    kind = draw(st.sampled_from(["flip", "truncate", "splice", "noise", "size", "pipeline"]))
    if kind == "flip":
        mutated = bytearray(body)
        for _ in range(draw(st.integers(1, 8))):
            position = draw(st.integers(0, len(mutated) - 1))
            mutated[position] ^= 1 << draw(st.integers(0, 7))
        return _framed(bytes(mutated))
    if kind == "truncate":
        cut = draw(st.integers(0, len(body) - 1))
        if draw(st.booleans()):
            return _framed(body[:cut])
        return seed[: 4 + cut]  # the size prefix promises more than ever arrives
    if kind == "splice":
        other = draw(st.sampled_from(SEEDS))[4:]
        left = draw(st.integers(0, len(body)))
        right = draw(st.integers(0, len(other)))
        return _framed(body[:left] + other[right:])
    if kind == "noise":
        return _framed(draw(st.binary(min_size=0, max_size=200)))
    if kind == "size":
        size = draw(st.one_of(st.integers(-(2**31), -1), st.integers(FRAME_BYTES_MAX, 2**31 - 1)))
        return _SIZE.pack(size) + body
    # A valid request followed by a damaged one on the same connection.
    damaged = bytearray(body)
    damaged[draw(st.integers(0, len(damaged) - 1))] ^= 0xFF
    return seed + _framed(bytes(damaged))


def throw(port: int, data: bytes) -> None:
    """Write ``data``, half-close, and read until the broker closes or goes quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            for _ in range(1000):
                if not sock.recv(1 << 16):
                    return
        except (TimeoutError, ConnectionError):
            return


# ---------------------------------------------------------------- the test


def test_the_seeds_cover_every_served_api() -> None:
    served = {handler.api.key for handler in build_handlers(HANDLER_MODULES).values()}
    seeded = {struct.unpack_from(">h", seed, 4)[0] for seed in SEEDS}
    assert seeded == served
    assert len(SEEDS) > 3 * len(served)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=mutated_frames())
def test_garbage_never_stops_the_broker_serving_others(
    fuzzed: tuple[ThreadedBroker, Any], data: bytes
) -> None:
    broker, (health, errors) = fuzzed
    logged_before = len(errors.records)
    throw(broker.port, data)
    assert broker.alive, broker.error
    health.metadata([HEALTH_TOPIC])
    health.round_trip()
    logged = errors.records[logged_before:]
    assert not logged, [record.getMessage() for record in logged]


def test_the_broker_still_serves_new_connections_after_the_fuzzing(
    fuzzed: tuple[ThreadedBroker, Any],
) -> None:
    broker, (_, errors) = fuzzed
    with socket.create_connection(("127.0.0.1", broker.port), timeout=HEALTH_TIMEOUT_S) as sock:
        fresh = HealthClient(sock)
        fresh.produced = 10_000
        fresh.metadata([HEALTH_TOPIC, FUZZ_TOPIC])
        fresh.round_trip()
    assert broker.alive
    assert not errors.records
