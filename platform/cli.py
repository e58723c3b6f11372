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


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where the broker keeps its logs.  [default: .eventplatform/data]",
)
@click.option(
    "--listen",
    default="127.0.0.1:9092",
    show_default=True,
    help="host:port to accept clients on (port 0 picks a free one).",
)
@click.option("--advertised-host", default=None, help="Host name clients are told to connect to.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="A TOML file of broker settings (Kafka's broker-level names).",
)
@click.option(
    "--override",
    "-o",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set one broker setting, after the config file; repeatable.",
)
@click.option("--log-level", default="INFO", show_default=True)
def serve(
    data_dir: Path | None,
    listen: str,
    advertised_host: str | None,
    config_file: Path | None,
    overrides: tuple[str, ...],
    log_level: str,
) -> None:
    """Run a Kafka-compatible broker until SIGINT or SIGTERM."""
    from eventplatform.log.broker.runner import run_broker

    run_broker(
        data_dir=data_dir,
        listen=listen,
        advertised_host=advertised_host,
        config_file=config_file,
        overrides=overrides,
        log_level=log_level,
        echo=click.echo,
    )
