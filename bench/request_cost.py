"""The broker's cost per request: small requests, as fast as one connection gets them answered.

Against ``platform serve`` on loopback with a fresh data directory (deleted at the
end), one raw Kafka connection keeps ``PIPELINE`` requests in flight and reads each
answer by its size prefix, so the broker, not a client library, sets the pace:

1. **Metadata** (v9) for one topic.
2. **Produce** (v8, acks=1) of one 100-byte record per request, to one partition.

For each, requests per second and the broker's CPU microseconds per request (user +
system from ``/proc/<pid>/stat``, over the timed requests only; the first
``WARM_UP`` are not timed). These are the requests whose fixed cost dominates when
clients send little at a time: decoding, dispatch, authorization, metrics, encoding.

``--platform LABEL=PATH`` names a ``platform`` executable to serve (repeatable). With
several, each round runs every one in turn, in a new broker, so revisions are
compared on the same noisy machine; medians over the rounds, and the ratio of each
to the first named.

Run ``python -m bench.request_cost --quick`` for a smoke run of a few seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.broker import Broker
from bench.harness import Deadline, describe_machine, invocation, markdown_table, progress
from eventplatform.log.broker.handlers import metadata, produce
from eventplatform.log.protocol import encode_request
from eventplatform.log.storage import Record
from eventplatform.log.storage.record_batch import encode_batch

TOPIC = "request-cost"
PIPELINE = 16
"""Requests in flight on the connection (a broker answers them in order)."""
WARM_UP = 2_000
RECORD_BYTES = 100
STEP_TIMEOUT_S = 120.0
"""The longest one measurement may take, whatever its count."""
ANSWER_BYTES_MAX = 1 << 20
"""The largest answer the client accepts (these answers are a few hundred bytes)."""


@dataclass(frozen=True)
class Plan:
    rounds: int
    requests: int


FULL = Plan(rounds=5, requests=60_000)
QUICK = Plan(rounds=1, requests=5_000)


@dataclass(frozen=True)
class Measurement:
    label: str
    round: int
    request: str
    requests: int
    seconds: float
    broker_cpu_seconds: float

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.seconds

    @property
    def cpu_us_per_request(self) -> float:
        return self.broker_cpu_seconds / self.requests * 1e6


def metadata_request(correlation_id: int) -> bytes:
    body = {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True}
    return encode_request(metadata.API, 9, body, correlation_id=correlation_id)


def produce_request(correlation_id: int) -> bytes:
    records = encode_batch(
        [Record(0, int(time.time() * 1000), None, b"x" * RECORD_BYTES)], base_offset=0
    )
    body = {
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}],
    }
    return encode_request(produce.API, 8, body, correlation_id=correlation_id)


REQUESTS: dict[str, Callable[[int], bytes]] = {
    "Metadata v9": metadata_request,
    "Produce v8, 1 record": produce_request,
}


class Connection:
    """One raw connection to the broker, answers read by their size prefix."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.socket = socket.create_connection((host, int(port)), timeout=STEP_TIMEOUT_S)
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()

    def answer(self) -> bytes:
        while True:
            if len(self.buffer) >= 4:
                (size,) = struct.unpack_from(">i", self.buffer)
                if not 0 < size <= ANSWER_BYTES_MAX:
                    raise SystemExit(f"the broker answered a frame of {size} bytes")
                if len(self.buffer) >= 4 + size:
                    frame = bytes(self.buffer[4 : 4 + size])
                    del self.buffer[: 4 + size]
                    return frame
            chunk = self.socket.recv(1 << 16)
            if not chunk:
                raise SystemExit("the broker closed the connection")
            self.buffer += chunk

    def run(self, frames: Sequence[bytes], deadline: Deadline) -> int:
        """Send ``frames`` keeping PIPELINE in flight; the number answered in time."""
        sent = answered = 0
        while answered < len(frames) and not deadline.passed():
            while sent < len(frames) and sent - answered < PIPELINE:
                self.socket.sendall(frames[sent])
                sent += 1
            self.answer()
            answered += 1
        while answered < sent:
            self.answer()
            answered += 1
        return answered

    def close(self) -> None:
        self.socket.close()


def measure(label: str, round_: int, executable: Path, plan: Plan) -> list[Measurement]:
    data_dir = Path(tempfile.mkdtemp(prefix="bench-request-cost-"))
    broker = Broker(data_dir, executable=executable)
    results: list[Measurement] = []
    try:
        connection = Connection(broker.bootstrap)
        connection.run([metadata_request(0)], Deadline(STEP_TIMEOUT_S))  # creates the topic
        time.sleep(0.5)
        for name, build in REQUESTS.items():
            frames = [build(index + 1) for index in range(WARM_UP + plan.requests)]
            deadline = Deadline(STEP_TIMEOUT_S)
            connection.run(frames[:WARM_UP], deadline)
            cpu_before = broker.cpu_seconds()
            started = time.perf_counter()
            answered = connection.run(frames[WARM_UP:], deadline)
            seconds = time.perf_counter() - started
            cpu = broker.cpu_seconds() - cpu_before
            results.append(Measurement(label, round_, name, answered, seconds, cpu))
            progress(
                f"{label} round {round_}: {name}: {answered / seconds:,.0f} requests/s, "
                f"{cpu / answered * 1e6:.1f} µs of broker CPU each"
            )
        connection.close()
    finally:
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    return results


def report(results: list[Measurement], labels: list[str]) -> str:
    first = labels[0]
    rows = [
        [
            "request",
            "revision",
            "requests/s, median (rounds)",
            "broker CPU µs/request, median",
            f"CPU ratio to {first}",
        ]
    ]
    for name in REQUESTS:
        base = statistics.median(
            m.cpu_us_per_request for m in results if m.request == name and m.label == first
        )
        for label in labels:
            mine = [m for m in results if m.request == name and m.label == label]
            rates = ", ".join(f"{m.requests_per_second:,.0f}" for m in mine)
            cpu = statistics.median(m.cpu_us_per_request for m in mine)
            rows.append(
                [
                    name,
                    label,
                    f"{statistics.median(m.requests_per_second for m in mine):,.0f} ({rates})",
                    f"{cpu:.1f}",
                    f"{cpu / base:.2f}",
                ]
            )
    return markdown_table(rows)


def parse_platforms(values: list[str]) -> list[tuple[str, Path]]:
    if not values:
        return [("this", Path(sys.executable).with_name("platform"))]
    named = []
    for value in values:
        label, separator, path = value.partition("=")
        if not separator or not label or not Path(path).is_file():
            raise SystemExit(f"--platform wants LABEL=PATH to a platform executable: {value!r}")
        named.append((label, Path(path)))
    return named


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--platform", action="append", default=[], metavar="LABEL=PATH")
    parser.add_argument("--rounds", type=int, help="rounds (each runs every executable once)")
    parser.add_argument("--json", type=Path, help="write the results here")
    arguments = parser.parse_args(argv)
    plan = QUICK if arguments.quick else FULL
    rounds = arguments.rounds or plan.rounds
    platforms = parse_platforms(arguments.platform)
    results: list[Measurement] = []
    for round_ in range(1, rounds + 1):
        for label, executable in platforms:
            results.extend(measure(label, round_, executable, plan))
    labels = [label for label, _ in platforms]
    print(report(results, labels))
    if arguments.json is not None:
        document = {
            "command": invocation(__file__, sys.argv[1:] if argv is None else argv),
            "machine": describe_machine(Path(tempfile.gettempdir())),
            "runs": [
                {
                    **asdict(m),
                    "requests_per_second": m.requests_per_second,
                    "cpu_us_per_request": m.cpu_us_per_request,
                }
                for m in results
            ],
        }
        arguments.json.write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
