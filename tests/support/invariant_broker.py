"""``platform`` with one broken invariant planted: a produce to :data:`PROBE_TOPIC` breaks it.

``python invariant_broker.py serve ...`` runs the real command line;
``python invariant_broker.py embedded <data dir>`` runs the broker embedded, as
``platform demo`` does, and produces to the probe topic itself. Everything else
is the real broker, so a test can check what a broken invariant inside a
request does to the whole process.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

import trio

from eventplatform.cli import main
from eventplatform.log.config import BrokerConfig
from eventplatform.log.invariants import require
from eventplatform.log.protocol import decode_response, encode_request
from eventplatform.log.protocol.apis import CREATE_TOPICS, PRODUCE
from eventplatform.log.replica.partition import Partition, ProduceResult
from eventplatform.log.storage import Record
from eventplatform.log.storage.record_batch import encode_batch
from eventplatform.runtime import embedded_broker

PROBE_TOPIC = "invariant-probe"
PLANTED_MESSAGE = "planted: a produce to invariant-probe breaks an invariant"
KEPT_RUNNING = "the embedded broker kept running"
EMBEDDED_WAIT_S = 15.0


def plant() -> None:
    real_append = Partition.append

    def append(self: Partition, record_set: Any, *, acks: int = 1) -> ProduceResult:
        require(self.topic != PROBE_TOPIC, PLANTED_MESSAGE)
        return real_append(self, record_set, acks=acks)

    Partition.append = append  # type: ignore[method-assign]


def embedded(data_dir: str) -> None:
    logging.basicConfig(level="INFO")
    config = BrokerConfig(data_dir=Path(data_dir), listen_port=0, offsets_topic_num_partitions=1)
    with embedded_broker(config) as bootstrap:
        trio.run(produce_to_probe, int(bootstrap.rpartition(":")[2]))
        trio.run(trio.sleep, EMBEDDED_WAIT_S)  # the process ends first, or this says so
        print(KEPT_RUNNING, flush=True)


async def produce_to_probe(port: int) -> None:
    """Create the probe topic and produce to it; the connection ends without an answer."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    topic = {
        "name": PROBE_TOPIC,
        "num_partitions": 1,
        "replication_factor": 1,
        "assignments": [],
        "configs": [],
    }
    await _call(stream, CREATE_TOPICS, 4, {"topics": [topic], "timeout_ms": 5000}, 1)
    records = encode_batch([Record(0, 0, None, b"value")])
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": PROBE_TOPIC, "partition_data": [{"index": 0, "records": records}]}],
    }
    with contextlib.suppress(trio.BrokenResourceError, EOFError):
        await _call(stream, PRODUCE, 8, body, 2)


async def _call(stream: Any, api: Any, version: int, body: Any, correlation_id: int) -> Any:
    await stream.send_all(encode_request(api, version, body, correlation_id=correlation_id))
    data = b""
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise EOFError("the broker closed the connection")
        data += chunk
    return decode_response(api, version, data[4:])


if __name__ == "__main__":
    plant()
    if sys.argv[1:2] == ["embedded"]:
        embedded(sys.argv[2])
    else:
        sys.exit(main())
