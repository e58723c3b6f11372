"""Partial-frame memory benchmark: the broker's memory under many large, unfinished requests.

A ``platform serve`` broker (its own configuration plus ``--override``s) gets
``--connections`` clients that each announce a ``--frame-mib`` request frame
and send all of it but its last byte, as fast as the broker reads. The
broker reserves each frame in its request memory pool
(``queued.max.request.bytes``) before reading the body, so it reads only as
many frames as the pool holds; the other senders stall on TCP flow control.
The run ends when no sender has made progress for ``--stall-s`` seconds
(or at ``--deadline-s``), so it sends far less than connections times frame
size.

Reported: the broker's resident set size before the clients connect, its
peak (sampled every 100 ms) and at the end; the bytes the clients got into
the broker and its kernel buffers; and how long a new client waited for its
ApiVersions answer while every sender was stalled.
"""

from __future__ import annotations

import argparse
import selectors
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.harness import invocation
from eventplatform.log.protocol import decode_response, encode_request
from eventplatform.log.protocol.apis import API_VERSIONS
from eventplatform.testing import BrokerProcess

MIB = 1024 * 1024
CONNECTIONS_DEFAULT = 100
FRAME_MIB_DEFAULT = 99
STALL_S_DEFAULT = 3.0
DEADLINE_S_DEFAULT = 120.0
SEND_BUFFER_BYTES = 64 * 1024
SAMPLE_INTERVAL_S = 0.1
PROBE_TIMEOUT_S = 10.0
_SIZE = struct.Struct(">i")
_CHUNK = memoryview(b"\0" * MIB)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=CONNECTIONS_DEFAULT)
    parser.add_argument("--frame-mib", type=int, default=FRAME_MIB_DEFAULT)
    parser.add_argument("--stall-s", type=float, default=STALL_S_DEFAULT)
    parser.add_argument("--deadline-s", type=float, default=DEADLINE_S_DEFAULT)
    parser.add_argument("--override", action="append", default=[], help="broker key=value")
    arguments = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        broker = BrokerProcess(Path(directory), arguments.override).start()
        try:
            run(broker, arguments)
        finally:
            broker.kill()
    print(f"command: {invocation(__file__, argv)}")


def run(broker: BrokerProcess, arguments: argparse.Namespace) -> None:
    probe_s = api_versions_latency_s(broker.port)
    before = broker.resident_bytes()
    frame_bytes = arguments.frame_mib * MIB
    senders = [open_sender(broker.port, frame_bytes) for _ in range(arguments.connections)]
    started = time.monotonic()
    peak, sent = send_until_stalled(broker, senders, arguments)
    elapsed_s = time.monotonic() - started
    stalled_probe_s = api_versions_latency_s(broker.port)
    after = broker.resident_bytes()
    for sock, _ in senders:
        sock.close()
    print(f"connections: {arguments.connections}, frame: {arguments.frame_mib} MiB")
    print(f"sent into the broker: {sent / MIB:.0f} MiB in {elapsed_s:.1f} s")
    print(
        f"broker RSS: before {before / MIB:.0f} MiB, peak {peak / MIB:.0f} MiB, "
        f"end {after / MIB:.0f} MiB (peak growth {(peak - before) / MIB:.0f} MiB)"
    )
    print(
        f"ApiVersions answered in {probe_s * 1000:.0f} ms before, "
        f"{stalled_probe_s * 1000:.0f} ms with every sender stalled"
    )


def open_sender(port: int, frame_bytes: int) -> tuple[socket.socket, list[int]]:
    """A non-blocking socket that has announced a frame; ``[bytes left to send]``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    sock.connect(("127.0.0.1", port))
    sock.sendall(_SIZE.pack(frame_bytes))
    sock.setblocking(False)
    return sock, [frame_bytes - 1]


def send_until_stalled(
    broker: BrokerProcess,
    senders: list[tuple[socket.socket, list[int]]],
    arguments: argparse.Namespace,
) -> tuple[int, int]:
    """Send the bodies until nothing moves for ``stall_s``; (peak RSS, bytes sent)."""
    selector = selectors.DefaultSelector()
    for sock, left in senders:
        selector.register(sock, selectors.EVENT_WRITE, left)
    deadline = time.monotonic() + arguments.deadline_s
    last_progress = next_sample = time.monotonic()
    peak = broker.resident_bytes()
    sent = 0
    while time.monotonic() < deadline and time.monotonic() - last_progress < arguments.stall_s:
        for key, _ in selector.select(SAMPLE_INTERVAL_S):
            left = key.data
            try:
                count = key.fileobj.send(_CHUNK[: min(left[0], len(_CHUNK))])  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            left[0] -= count
            sent += count
            last_progress = time.monotonic()
            if left[0] == 0:
                selector.unregister(key.fileobj)
        if time.monotonic() >= next_sample:
            peak = max(peak, broker.resident_bytes())
            next_sample = time.monotonic() + SAMPLE_INTERVAL_S
    selector.close()
    return max(peak, broker.resident_bytes()), sent


def api_versions_latency_s(port: int) -> float:
    """Seconds from connecting to a complete ApiVersions answer."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT_S) as sock:
        body = {"client_software_name": "bench", "client_software_version": "1"}
        sock.sendall(encode_request(API_VERSIONS, 3, body, correlation_id=1, client_id="bench"))
        data = b""
        while len(data) < _SIZE.size or len(data) < _SIZE.size + _SIZE.unpack_from(data)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the broker closed the probe connection")
            data += chunk
        correlation_id, answer = decode_response(API_VERSIONS, 3, data[_SIZE.size :])
        if correlation_id != 1 or answer["error_code"] != 0:
            raise RuntimeError(f"unexpected ApiVersions answer: {answer}")
    return time.monotonic() - started


if __name__ == "__main__":
    main(sys.argv[1:])
