"""``platform replay``: rebuild a projection from the log with Spark."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from eventplatform.cli_support import (
    client_options,
    database_option,
    database_url_of,
    reported_errors,
)
from eventplatform.client_config import ClientConfig
from eventplatform.db_cli import apps_option, load_apps

DATA_DIR_ENV = "EVENTPLATFORM_DATA_DIR"
FROM_OFFSETS = "--from-offsets"
FROM_TIMESTAMP = "--from-timestamp"


def _timestamp_ms(value: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (with a zone) as such."""
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise click.BadParameter(
            f"{value!r} is neither epoch milliseconds nor ISO 8601", param_hint=FROM_TIMESTAMP
        ) from exc
    if moment.tzinfo is None:
        raise click.BadParameter(
            f"{value!r} has no time zone (add Z or +00:00)", param_hint=FROM_TIMESTAMP
        )
    return int(moment.timestamp() * 1000)


def _offsets_json(value: str) -> dict[str, dict[str, int]]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=FROM_OFFSETS) from exc
    if not isinstance(parsed, dict) or not all(
        isinstance(partitions, dict)
        and all(str(p).isdigit() and type(o) is int for p, o in partitions.items())
        for partitions in parsed.values()
    ):
        raise click.BadParameter(
            'expected {"topic": {"partition": offset, ...}, ...}', param_hint=FROM_OFFSETS
        )
    return {str(t): {str(p): o for p, o in ps.items()} for t, ps in parsed.items()}


@click.command("replay")
@click.option("--projection", "name", required=True, help="The projection to rebuild.")
@click.option(
    "--from-offset", type=click.IntRange(0), default=None, help="Start of each partition."
)
@click.option(
    "--from-offsets", default=None, metavar="JSON", help='Per partition: {"t": {"0": 42}}.'
)
@click.option(
    "--from-timestamp",
    default=None,
    metavar="T",
    help="Start at the first event at or after T (epoch ms or ISO 8601).",
)
@click.option("--to-offset", type=click.IntRange(0), default=None, help="End (exclusive).")
@click.option("--topic", default=None, help="Only this topic of the projection's.")
@click.option("--partition", type=click.IntRange(0), default=None, help="Only this partition.")
@click.option(
    "--mode",
    type=click.Choice(["rebuild", "backfill"]),
    default="rebuild",
    show_default=True,
    help="rebuild: compute the tables into shadows and swap them in. backfill: recompute "
    "the rows the range's events touch and merge them into the live tables.",
)
@click.option("--spark-master", default=None, metavar="URL", help="[default: local[*]]")
@click.option(
    "--spark-conf",
    "spark_settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A spark.* setting; repeatable.",
)
@client_options
@click.option(
    "--data-dir",
    default=lambda: os.environ.get(DATA_DIR_ENV),
    metavar="PATH",
    help=f"The broker's data directory: read segments directly. [default: ${DATA_DIR_ENV}]",
)
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@database_option
@apps_option
def replay(
    name: str,
    from_offset: int | None,
    from_offsets: str | None,
    from_timestamp: str | None,
    to_offset: int | None,
    topic: str | None,
    partition: int | None,
    mode: str,
    spark_master: str | None,
    spark_settings: tuple[str, ...],
    client: ClientConfig,
    data_dir: str | None,
    dry_run: bool,
    database: str | None,
    app_references: tuple[str, ...],
) -> None:
    """Rebuild or backfill a projection's tables from the log with Spark.

    Rebuild: without a start, every partition is read from the start of the
    log into empty shadow tables. With one, the rebuild starts from a copy of
    the live tables when they hold exactly the events before that start; when
    they do not, the state at the start is computed instead: empty shadows,
    every partition read from its log start. Either way the runner's
    checkpoints move to the end of the replay. --from-offset N skips
    partitions whose log ends at or before N.

    Backfill (after fixing a window of data or a handler): every row the
    range's events touch is recomputed from the whole log and replaces the
    live row; the other rows stay as they are.

    Every check (topics, partitions, offsets against the log, the database's
    tables and checkpoints) runs before Spark starts; --dry-run runs them all
    and prints the plan.
    """
    from eventplatform.projections.apps import find_projection
    from eventplatform.spark_projections.backfilling import backfill
    from eventplatform.spark_projections.planning import ReplayRequest, plan_replay
    from eventplatform.spark_projections.replay import rebuild
    from eventplatform.spark_projections.session import parse_pairs, spark_session

    starts = [from_offset is not None, from_offsets is not None, from_timestamp is not None]
    if sum(starts) > 1:
        raise click.UsageError("give one of --from-offset, --from-offsets, --from-timestamp")
    if mode == "backfill" and not any(starts):
        raise click.UsageError(
            "a backfill covers a range: give --from-offset, --from-offsets or --from-timestamp "
            "(to recompute everything, rebuild)"
        )
    request = ReplayRequest(
        from_offset=from_offset,
        from_offsets=_offsets_json(from_offsets) if from_offsets is not None else None,
        from_timestamp_ms=_timestamp_ms(from_timestamp) if from_timestamp is not None else None,
        to_offset=to_offset,
        topic=topic,
        partition=partition,
    )
    # the brokers, and the security settings as the source's kafka.* options: Spark's
    # workers connect with them, wherever they run
    options: dict[str, Any] = client.spark_options()
    if data_dir:  # absolute: Spark's Python workers need not share this working directory
        options["dataDir"] = str(Path(data_dir).resolve())
    from eventplatform.spark_projections.errors import ReplayError

    with reported_errors():
        try:
            url = database_url_of(database)
            projection = find_projection(name, load_apps(app_references, database=url))
            plan = plan_replay(projection, url, options, request, mode=mode)
            settings = parse_pairs(",".join(spark_settings), source="--spark-conf")
            spark = None if dry_run else spark_session(spark_master, settings)
            if mode == "backfill":
                summary = backfill(spark, projection, url, plan.ranges, options, dry_run=dry_run)
            else:
                summary = rebuild(
                    spark,
                    projection,
                    url,
                    plan.ranges,
                    options,
                    from_start=plan.from_start,
                    dry_run=dry_run,
                )
        except ReplayError as error:
            raise click.ClickException(str(error)) from error
    for line in summary.lines():
        click.echo(line)
    for note in plan.notes:
        click.echo(f"note: {note}")
