"""The ``platform`` command line. Commands parse arguments and call one function."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
@click.version_option(package_name="eventplatform")
def main() -> None:
    """eventplatform: an event-sourcing platform on a Kafka-compatible commit log."""


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=Path(".eventplatform/demo-log"),
    show_default=True,
    help="Where the demo partition log lives.",
)
@click.option("--records", type=click.IntRange(1), default=1_000_000, show_default=True)
@click.option("--record-bytes", type=click.IntRange(1), default=100, show_default=True)
def demo(data_dir: Path, records: int, record_bytes: int) -> None:
    """Append records to a partition log, read them back, and print the throughput."""
    from eventplatform.storage_demo import run_storage_demo

    run_storage_demo(data_dir, records=records, record_bytes=record_bytes, echo=click.echo)
