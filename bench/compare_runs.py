"""Set two groups of ``bench/suite.py`` JSON results side by side: one system's rates and
latencies, median and min-max over the runs of each group, and the ratio of medians.

For a before-and-after comparison of a change, run the suite alternately on a checkout
of each commit (A B A B ...), each with its own virtual environment, then::

    python -m bench.compare_runs --before before-*.json --after after-*.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import Spread, format_spread, markdown_table


def load(paths: Sequence[Path]) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in paths]


def figures(runs: Sequence[dict[str, Any]], system: str) -> dict[str, list[float]]:
    """Every measured figure of ``system`` over ``runs``: name to one value per run."""
    found: dict[str, list[float]] = {}
    for run in runs:
        for sample in run["throughput"]:
            if sample["system"] == system:
                size = "1 KB" if sample["value_bytes"] == 1000 else "100 B"
                name = f"{sample['role']} {size}, {sample['processes']} proc., records/s"
                found.setdefault(name, []).append(sample["records"] / sample["seconds"])
        for sample in run["latency"]:
            if sample["system"] == system:
                for key, label in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9")):
                    name = f"latency {label} at {run['plan']['latency_rate']:,}/s, ms"
                    found.setdefault(name, []).append(sample[key])
    return found


def table(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]], system: str) -> str:
    old, new = figures(before, system), figures(after, system)
    rows = [
        ["figure", f"before ({len(before)} runs)", f"after ({len(after)} runs)", "after / before"]
    ]
    for name in old:
        if name not in new:
            continue
        digits = 2 if name.startswith("latency") else 0
        ratio = statistics.median(new[name]) / statistics.median(old[name])
        rows.append(
            [
                name,
                format_spread(Spread.of(old[name]), digits),
                format_spread(Spread.of(new[name]), digits),
                f"{ratio:.3f}" if ratio < 0.01 else f"{ratio:.2f}",
            ]
        )
    return markdown_table(rows)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, nargs="+", required=True)
    parser.add_argument("--after", type=Path, nargs="+", required=True)
    parser.add_argument("--system", nargs="*", default=None, help="systems to show (all)")
    arguments = parser.parse_args(argv)
    before, after = load(arguments.before), load(arguments.after)
    names = arguments.system or [entry["name"] for entry in after[0]["systems"]]
    labels = {entry["name"]: entry["label"] for entry in after[0]["systems"]}
    commits = sorted({run["commit"] for run in before}), sorted({run["commit"] for run in after})
    print(f"before: {', '.join(commits[0])}; after: {', '.join(commits[1])}\n")
    for name in names:
        print(f"{labels.get(name, name)}\n\n{table(before, after, name)}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
