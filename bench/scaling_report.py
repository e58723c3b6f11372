"""The scaling benchmark's Markdown: a table per measurement, with the method above it
(see :mod:`scaling`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from bench.broker import Throughput
from bench.harness import GIGABYTE, KIB, MEGABYTE, MIB, Spread, format_spread, markdown_table
from bench.scaling_clients import CONSUMERS, PRODUCERS

RESTART_GOAL_S = 10.0


def repetitions(samples: list[Any]) -> str:
    return f"{len(samples)} repetition{'' if len(samples) == 1 else 's'}"


def _spread(samples: list[dict[str, Any]], measure: Callable[[Throughput], float]) -> Spread:
    return Spread.of([measure(Throughput(**sample)) for sample in samples])


def _rates(samples: list[dict[str, Any]]) -> tuple[str, str]:
    records = _spread(samples, lambda sample: sample.records_per_second)
    speed = _spread(samples, lambda sample: sample.megabytes_per_second)
    return format_spread(records), format_spread(speed)


def throughput_markdown(results: dict[str, Any], plan: dict[str, Any]) -> str:
    rows = [
        [
            "partitions",
            "produce records/s",
            "produce MB/s",
            "consume records/s",
            "consume MB/s",
            "broker CPU s per 100 MB produced",
        ]
    ]
    for partitions, entry in results.items():
        cpu = statistics.median(
            Throughput(**sample).broker_cpu_seconds_per_100_mb for sample in entry["produce"]
        )
        rows.append(
            [
                partitions,
                *_rates(entry["produce"]),
                *_rates(entry["consume"]),
                f"{cpu:.2f}",
            ]
        )
    method = (
        f"{PRODUCERS} producer processes (acks=1, 1 KB values, no key, linger.ms=5, 1 MB "
        f"batches) write {plan['throughput_records']:,} records to a new topic, then "
        f"{CONSUMERS} consumer processes read them back from the page cache (partitions dealt "
        "out, one partition's offsets halved), each step's processes starting at a barrier; "
        f"median (min-max) of {repetitions(next(iter(results.values()))['produce'])}."
    )
    return f"### Throughput by partition count\n\n{method}\n\n{markdown_table(rows)}"


def longest_wait(results: dict[str, Any]) -> str:
    """How long the broker served nothing else while it created the partitions."""
    if "create_longest_wait_s" not in results:  # results from before the probe
        return ""
    return (
        f"; meanwhile the slowest of {results['create_probe_requests']:,} ListGroups "
        f"requests from another client waited {results['create_longest_wait_s']:.2f} s"
    )


def idle_markdown(results: dict[str, Any]) -> str:
    before, after, partitions = results["before"], results["after"], results["partitions"]
    rows = [["", "RSS MiB", "open files", "memory mappings", "idle CPU %"]]
    for label, state in (("no topics", before), (f"{partitions:,} partitions", after)):
        rows.append(
            [
                label,
                f"{state['rss_bytes'] / MIB:.1f}",
                str(state["open_files"]),
                str(state["mappings"]),
                f"{state['idle_cpu_percent']:.1f}",
            ]
        )
    rows.append(
        [
            "per partition",
            f"{(after['rss_bytes'] - before['rss_bytes']) / partitions / KIB:.1f} KiB",
            f"{(after['open_files'] - before['open_files']) / partitions:.1f}",
            f"{(after['mappings'] - before['mappings']) / partitions:.1f}",
            "-",
        ]
    )
    method = (
        "RSS (/proc VmRSS, once settled), open files and mappings of a fresh broker before "
        f"and after creating {partitions:,} partitions (CreateTopics took "
        f"{results['create_seconds']:.1f} s{longest_wait(results)}), and its CPU over "
        f"{results['idle_cpu_seconds']:.0f} s with no client."
    )
    return f"### Memory of idle partitions\n\n{method}\n\n{markdown_table(rows)}"


def retained_markdown(results: dict[str, Any], plan: dict[str, Any]) -> str:
    rows = [
        [
            "retained",
            "fill s (MB/s)",
            "produce at tail MB/s",
            "consume tail MB/s",
            "consume oldest MB/s",
            "oldest segment cached",
        ]
    ]
    medians: dict[str, list[float]] = {}
    for label, entry in results.items():
        spreads = [
            _spread(entry[key], lambda sample: sample.megabytes_per_second)
            for key in ("produce", "consume_tail", "consume_oldest")
        ]
        medians[label] = [spread.median for spread in spreads]
        cached = [value for value in entry["oldest_cached"] if value is not None]
        rows.append(
            [
                f"{entry['retained_bytes'] / MEGABYTE:,.0f} MB",
                f"{entry['fill_seconds']:.1f} "
                f"({entry['retained_bytes'] / MEGABYTE / entry['fill_seconds']:.0f})",
                *(format_spread(spread) for spread in spreads),
                f"{100 * statistics.median(cached):.0f} %" if cached else "-",
            ]
        )
    if {"small", "large"} <= medians.keys():
        ratios = [
            large / small for large, small in zip(medians["large"], medians["small"], strict=True)
        ]
        rows.append(["ratio large / small", "", *(f"{ratio:.2f}" for ratio in ratios), ""])
    method = (
        f"One-partition topics filled with 1 KB records by {PRODUCERS} producers, then "
        f"alternately {plan['tail_produce_records']:,} more produced at the tail and "
        f"{plan['consume_records']:,} read by one consumer from the tail and from offset 0; "
        f"median (min-max) MB/s of {repetitions(results['large']['produce'])}."
    )
    return f"### Rates against retained data\n\n{method}\n\n{markdown_table(rows)}"


def restart_markdown(runs: list[dict[str, Any]]) -> str:
    def seconds(value: float | None) -> str:
        return "never" if value is None else f"{value:.2f}"

    rows = [
        [
            "run",
            "log GB",
            "re-checked GB",
            "serving on s",
            "produce acked s",
            "last record fetched s",
            "acknowledged end",
            "log end after",
            "lost",
            f"goal < {RESTART_GOAL_S:.0f} s",
        ]
    ]
    for index, run in enumerate(runs, 1):
        timings = [run[key] for key in ("serving_seconds", "produce_seconds", "fetch_seconds")]
        met = None not in timings and max(timings) < RESTART_GOAL_S
        rows.append(
            [
                str(index),
                f"{run['retained_bytes'] / GIGABYTE:.2f}",
                f"{run['recheck_bytes'] / GIGABYTE:.2f}",
                seconds(run["serving_seconds"]),
                seconds(run["produce_seconds"]),
                seconds(run["fetch_seconds"]),
                f"{run['acknowledged_end']:,}",
                "-" if run["recovered_end"] is None else f"{run['recovered_end']:,}",
                "?" if run["lost"] is None else str(run["lost"]),
                "met" if met else "missed",
            ]
        )
    method = (
        "SIGKILL right after an acks=1 produce, restart on the same directory, seconds from "
        "the spawn; before serving, startup CRC-checks every batch from the segment holding "
        "the checkpointed recovery point (checkpointed at most once a minute) to the end, "
        "rebuilding indexes, and replays producer state from the last roll's snapshot."
    )
    return f"### Restart after SIGKILL\n\n{method}\n\n{markdown_table(rows)}"


def scaling_markdown(results: dict[str, Any]) -> str:
    plan = results["plan"]
    timings = markdown_table(
        [["section", "seconds"]]
        + [
            [name.replace("_", " "), f"{seconds:.0f}"]
            for name, seconds in results["seconds"].items()
        ]
    )
    return "\n\n".join(
        [
            throughput_markdown(results["throughput"], plan),
            idle_markdown(results["idle_partitions"]),
            retained_markdown(results["retained"], plan),
            restart_markdown(results["restart"]),
            f"### Time taken\n\nWall-clock seconds per measurement.\n\n{timings}",
        ]
    )
