"""Collector benchmark: sustained beacons/s into the log, and request latency.

A ``platform serve`` broker and a ``platform apps activity collect`` process
run on a fresh data directory. Client processes (``--clients``) post JSON
beacons over keep-alive HTTP/1.1 connections:

* **saturation** (closed loop): each client posts a batch of ``--batch``
  beacons as soon as the previous one was answered, for ``--seconds``.
  Reports beacons/s (every answer a 202) and request latency percentiles,
  which at saturation are mostly queueing;
* **fixed rate** (open loop): the clients together send ``--rate-share`` of
  the saturation request rate, each request at its scheduled time, and
  latency is measured from that scheduled time, so a stalled server is
  charged for the requests it delayed (no coordinated omission).

Both run ``--repeat`` times for batches of 1 beacon and of ``--batch``.
Every 202 carries one log position per beacon; the script checks that the
positions are distinct and that the topic's end offsets account for every
accepted beacon.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.harness import (
    Spread,
    format_spread,
    invocation,
    markdown_table,
    progress,
    write_results,
)
from eventplatform.apps.activity_tracking.events import TOPIC
from eventplatform.projections.kafka import log_ends
from eventplatform.testing import BrokerProcess

WRITE_KEY = "bench-site-write-key"
"""The site write key the collector under test is given, and every client sends."""
CLIENTS_DEFAULT = 4
SECONDS_DEFAULT = 10.0
BATCH_DEFAULT = 100
REPEAT_DEFAULT = 3
RATE_SHARE_DEFAULT = 0.5
START_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 60.0
PLATFORM = Path(sys.executable).with_name("platform")


def beacons(client: int, request: int, size: int) -> bytes:
    items = [
        {
            "type": "page_viewed",
            "url": f"https://shop.example/page-{(request * size + n) % 500}",
            "session_id": f"c{client}-s{request % 1000}",
            "anonymous_id": f"c{client}-a{(request + n) % 5000}",
            "user_agent": "Mozilla/5.0 (X11; Linux x86_64) bench",
            "referrer": "https://www.google.com/",
        }
        for n in range(size)
    ]
    return orjson.dumps(items[0] if size == 1 else items)


def client_run(arguments: tuple[int, int, int, float, float | None]) -> dict[str, Any]:
    """One client: (index, port, batch, seconds, requests/s or None for closed loop)."""
    index, port, batch, seconds, rate = arguments
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
    latencies: list[float] = []
    accepted = errors = 0
    positions: list[tuple[int, int]] = []
    start = time.perf_counter()
    request = 0
    while True:
        scheduled = start + request / rate if rate else time.perf_counter()
        if scheduled - start >= seconds:
            break
        delay = scheduled - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        connection.request(
            "POST",
            "/v1/beacons",
            body=beacons(index, request, batch),
            headers={"content-type": "application/json", "x-write-key": WRITE_KEY},
        )
        response = connection.getresponse()
        body = response.read()
        latencies.append(time.perf_counter() - scheduled)
        if response.status == 202:
            answer = orjson.loads(body)
            accepted += answer["accepted"]
            positions += [(p["partition"], p["offset"]) for p in answer["positions"]]
        else:
            errors += 1
        request += 1
    connection.close()
    return {
        "accepted": accepted,
        "errors": errors,
        "latencies": latencies,
        "positions": positions,
        "seconds": time.perf_counter() - start,
    }


@dataclass(frozen=True)
class Run:
    mode: str
    batch: int
    clients: int
    requests: int
    accepted: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float

    @property
    def beacons_per_second(self) -> float:
        return self.accepted / self.seconds

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.seconds


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def load(
    port: int, clients: int, batch: int, seconds: float, rate: float | None
) -> tuple[Run, list[tuple[int, int]]]:
    per_client = rate / clients if rate else None
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        results = pool.map(
            client_run, [(i, port, batch, seconds, per_client) for i in range(clients)]
        )
    latencies = [value for result in results for value in result["latencies"]]
    positions = [p for result in results for p in result["positions"]]
    run = Run(
        mode="fixed rate" if rate else "saturation",
        batch=batch,
        clients=clients,
        requests=len(latencies),
        accepted=sum(result["accepted"] for result in results),
        errors=sum(result["errors"] for result in results),
        seconds=max(result["seconds"] for result in results),
        p50_ms=percentile(latencies, 0.5) * 1000,
        p99_ms=percentile(latencies, 0.99) * 1000,
        p999_ms=percentile(latencies, 0.999) * 1000,
        max_ms=max(latencies) * 1000,
    )
    return run, positions


def start_collector(bootstrap: str) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [
            str(PLATFORM),
            "apps",
            "activity",
            "collect",
            "--bootstrap",
            bootstrap,
            "--listen",
            "127.0.0.1:0",
            "--write-key",
            f"bench={WRITE_KEY}",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if found:
            return process, int(found.group(1))
    process.kill()
    raise SystemExit("the collector did not start")


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=CLIENTS_DEFAULT)
    parser.add_argument("--seconds", type=float, default=SECONDS_DEFAULT, help="per run")
    parser.add_argument("--batch", type=int, default=BATCH_DEFAULT)
    parser.add_argument("--repeat", type=int, default=REPEAT_DEFAULT)
    parser.add_argument("--rate-share", type=float, default=RATE_SHARE_DEFAULT)
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-collector-"))
    broker = BrokerProcess(scratch / "log", overrides=["num.partitions=4"]).start()
    collector, port = start_collector(broker.bootstrap)
    runs: list[Run] = []
    all_positions: list[tuple[int, int]] = []
    try:
        for repetition in range(arguments.repeat):
            for batch in (1, arguments.batch):
                saturated, positions = load(port, arguments.clients, batch, arguments.seconds, None)
                all_positions += positions
                rate = saturated.requests_per_second * arguments.rate_share
                fixed, positions = load(port, arguments.clients, batch, arguments.seconds, rate)
                all_positions += positions
                runs += [saturated, fixed]
                for run in (saturated, fixed):
                    progress(
                        f"{repetition + 1}: {run.mode}, batch {batch}: "
                        f"{run.beacons_per_second:,.0f} beacons/s, p99 {run.p99_ms:.1f} ms, "
                        f"errors {run.errors}"
                    )
        ends = log_ends(broker.bootstrap, [TOPIC])
        in_log = sum(high - low for low, high in ends.values())
    finally:
        collector.terminate()
        collector.wait(START_TIMEOUT_S)
        broker.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    accepted = sum(run.accepted for run in runs)
    if len(set(all_positions)) != len(all_positions) or in_log != accepted:
        raise SystemExit(f"{accepted:,} beacons accepted, {in_log:,} in the log, positions repeat")
    rows = [
        [
            "mode",
            "beacons per request",
            "beacons/s",
            "requests/s",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "errors",
        ]
    ]
    for mode in ("saturation", "fixed rate"):
        for batch in (1, arguments.batch):
            group = [run for run in runs if (run.mode, run.batch) == (mode, batch)]
            rows.append(
                [
                    mode,
                    str(batch),
                    format_spread(Spread.of([r.beacons_per_second for r in group])),
                    format_spread(Spread.of([r.requests_per_second for r in group])),
                    format_spread(Spread.of([r.p50_ms for r in group]), 1),
                    format_spread(Spread.of([r.p99_ms for r in group]), 1),
                    format_spread(Spread.of([r.p999_ms for r in group]), 1),
                    format_spread(Spread.of([r.max_ms for r in group]), 1),
                    str(sum(r.errors for r in group)),
                ]
            )
    command = invocation(__file__, argv)
    print(f"command: {command}\n\n{markdown_table(rows)}\n")
    print(f"{accepted:,} beacons accepted, {in_log:,} records in the topic, positions distinct")
    write_results(arguments.json, command, runs)


if __name__ == "__main__":
    main(sys.argv[1:])
