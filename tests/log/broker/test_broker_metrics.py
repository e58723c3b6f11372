"""The broker's metrics endpoint: a real ``platform serve`` with ``--metrics-listen``, real
confluent-kafka clients, and ``/metrics`` scraped over HTTP and parsed with
prometheus_client's parser. The figures must follow what the clients did: requests and
bytes by API, the partition's offsets and size, its ISR, and a group's lag. Then the
endpoint's own rules: unknown paths, other methods, an oversized request head, a silent
client, the connection bound, and the one-line errors of a bad address."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
import trio
from confluent_kafka.admin import AdminClient, NewTopic
from metrics_scrape import Scrape, scrape, scrape_until
from prometheus_client import CollectorRegistry, Counter

from eventplatform.log.metrics_endpoint import (
    CONNECTIONS_MAX,
    REQUEST_HEAD_BYTES_MAX,
    REQUEST_TIMEOUT_S,
    bind_metrics_socket,
    serve_metrics,
)
from eventplatform.testing import BrokerProcess
from eventplatform.testing.broker_process import PLATFORM

TOPIC = "metered"
RECORDS = 25
LATER_RECORDS = 7
VALUE_BYTES = 100
GROUP = "metered-readers"
CLIENT_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("broker"), ["num.partitions=1"], metrics_listen="127.0.0.1:0"
    ).start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture(scope="module")
def url(broker: BrokerProcess) -> str:
    assert broker.metrics_url is not None, broker.log_text()
    return broker.metrics_url


def produce_one_request_each(bootstrap: str, count: int) -> None:
    """``count`` records, each flushed alone: at least one Produce request each."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for number in range(count):
        producer.produce(TOPIC, value=bytes([65 + number % 26]) * VALUE_BYTES)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0


def consume_and_commit(bootstrap: str, count: int) -> None:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([TOPIC])
        received = 0
        for _ in range(200):  # bounded: 200 polls of at most 0.5 s
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received += 1
            if received == count:
                break
        assert received == count
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def requests(scraped: Scrape, api: str) -> float:
    return scraped.get("eventplatform_broker_requests_total", api=api) or 0.0


def test_produce_and_consume_move_the_broker_figures(broker: BrokerProcess, url: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(CLIENT_TIMEOUT_S)
    before = scrape(url)
    assert before.types["eventplatform_broker_requests"] == "counter"
    assert before.types["eventplatform_broker_request_duration_seconds"] == "histogram"

    produce_one_request_each(broker.bootstrap, RECORDS)
    partition = {"topic": TOPIC, "partition": "0"}
    after = scrape_until(
        url, lambda s: s.get("eventplatform_partition_high_watermark", **partition) == RECORDS
    )
    produced = requests(after, "Produce") - requests(before, "Produce")
    assert produced >= RECORDS
    bytes_in = after.value("eventplatform_broker_request_bytes_total", api="Produce")
    assert bytes_in - (
        before.get("eventplatform_broker_request_bytes_total", api="Produce") or 0
    ) >= (RECORDS * VALUE_BYTES)
    # Every Produce was answered (acks=all on one broker), so the histogram counted each.
    assert after.value(
        "eventplatform_broker_request_duration_seconds_count", api="Produce"
    ) == requests(after, "Produce")
    assert after.value("eventplatform_broker_response_bytes_total", api="Produce") > 0
    assert after.value("eventplatform_partition_log_end_offset", **partition) == RECORDS
    assert after.value("eventplatform_partition_log_start_offset", **partition) == 0
    assert after.value("eventplatform_partition_size_bytes", **partition) > RECORDS * VALUE_BYTES
    assert after.value("eventplatform_partition_in_sync_replicas", **partition) == 1
    assert after.value("eventplatform_partition_replicas", **partition) == 1
    assert after.value("eventplatform_under_replicated_partitions") == 0
    assert after.value("eventplatform_offline_partitions") == 0

    consume_and_commit(broker.bootstrap, RECORDS)
    group = {"group": GROUP, **partition}
    consumed = scrape(url)
    assert consumed.value("eventplatform_consumer_group_committed_offset", **group) == RECORDS
    assert consumed.value("eventplatform_consumer_group_lag_records", **group) == 0
    assert (
        consumed.value("eventplatform_broker_response_bytes_total", api="Fetch")
        > RECORDS * VALUE_BYTES
    )
    assert requests(consumed, "OffsetCommit") >= 1

    produce_one_request_each(broker.bootstrap, LATER_RECORDS)
    behind = scrape_until(
        url, lambda s: s.get("eventplatform_consumer_group_lag_records", **group) == LATER_RECORDS
    )
    assert behind.value("eventplatform_partition_log_end_offset", **partition) == (
        RECORDS + LATER_RECORDS
    )
    assert behind.value("process_resident_memory_bytes") > 0


def http_exchange(url: str, request: bytes) -> bytes:
    host_port = url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=CLIENT_TIMEOUT_S) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_other_paths_methods_and_oversized_heads_are_refused(url: str) -> None:
    assert http_exchange(url, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 404 ")
    assert http_exchange(url, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
        b"HTTP/1.1 405 "
    )
    padding = b"X-Padding: " + b"a" * REQUEST_HEAD_BYTES_MAX + b"\r\n"
    oversized = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + padding + b"\r\n"
    assert http_exchange(url, oversized).startswith(b"HTTP/1.1 431 ")
    head = http_exchange(url, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")


def serve_command(tmp_path: Path, metrics_listen: str) -> subprocess.CompletedProcess[str]:
    data_dir = str(tmp_path / "data")
    command = [str(PLATFORM), "serve", "--data-dir", data_dir, "--listen", "127.0.0.1:0"]
    return subprocess.run(
        [*command, "--metrics-listen", metrics_listen],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )


@pytest.mark.parametrize(
    ("metrics_listen", "message"),
    [
        ("nonsense", "is not HOST:PORT"),
        ("127.0.0.1:70000", "is not HOST:PORT"),
        ("no-such-host.invalid:0", "cannot resolve"),
    ],
)
def test_a_bad_metrics_address_is_one_line_of_error(
    tmp_path: Path, metrics_listen: str, message: str
) -> None:
    result = serve_command(tmp_path, metrics_listen)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_metrics_port_in_use_is_one_line_of_error(tmp_path: Path, url: str) -> None:
    taken = url.split("//", 1)[1].split("/", 1)[0]
    result = serve_command(tmp_path, taken)
    assert result.returncode == 2
    assert "the address is in use" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def small_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("eventplatform_test_ticks", "Ticks.", registry=registry).inc(3)
    return registry


async def silent_connection(port: int) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", port)


async def scrape_over(stream: trio.SocketStream) -> bytes:
    await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = b""
    while chunk := await stream.receive_some(65536):
        answer += chunk
    return answer


async def test_silent_clients_are_closed_and_a_scrape_waits_for_a_free_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sock = bind_metrics_socket("127.0.0.1", 0)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_metrics, small_registry(), sock)
        silent = [await silent_connection(port) for _ in range(CONNECTIONS_MAX)]
        await trio.testing.wait_all_tasks_blocked()
        started = trio.current_time()
        waiting = await silent_connection(port)  # in the backlog until a slot frees
        answer = await scrape_over(waiting)
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert b"eventplatform_test_ticks_total 3.0" in answer
        assert trio.current_time() - started >= REQUEST_TIMEOUT_S
        for stream in silent:  # each was closed at its deadline, unanswered
            assert await stream.receive_some(100) == b""
            await stream.aclose()
        nursery.cancel_scope.cancel()
