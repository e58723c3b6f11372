"""``platform query``: SQL or an app's named query over the projections, read-only.

The output is an aligned table, or CSV, JSON or Parquet with ``--format``;
``--output FILE`` writes it to a file (Parquet needs one).
"""

from __future__ import annotations

import csv
import io
import re
import sys
from collections.abc import Sequence
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any

import click
import orjson

from eventplatform.cli_support import database_option, database_url_of
from eventplatform.db_cli import apps_option, load_apps
from eventplatform.projections.errors import ProjectionError
from eventplatform.projections.query import (
    QueryResult,
    find_named_query,
    named_parameters,
    named_queries,
    run_named_query,
    run_query,
)

FORMATS = ("table", "csv", "json", "parquet")
NAME_PATTERN = re.compile(r"^[A-Za-z_][\w.-]*\.[\w-]+$")
"""A named query's full name, ``<app>.<query>``; SQL always has a space somewhere."""


@click.command("query")
@click.argument("sql_or_name", required=False)
@click.option(
    "--format", "output_format", type=click.Choice(FORMATS), default="table", show_default=True
)
@click.option("--output", type=click.Path(path_type=Path, dir_okay=False), help="Write to FILE.")
@click.option("--since", metavar="DURATION", help="A named query's window: 15m, 1h, 7d, ...")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="Repeatable.")
@click.option("--list", "list_queries", is_flag=True, help="List the apps' named queries.")
@click.option(
    "--allow-superuser",
    is_flag=True,
    help="Run as a PostgreSQL superuser (refused by default: use a role granted "
    "eventplatform_reader).",
)
@database_option
@apps_option
def query(
    sql_or_name: str | None,
    output_format: str,
    output: Path | None,
    since: str | None,
    params: tuple[str, ...],
    list_queries: bool,
    allow_superuser: bool,
    database: str | None,
    app_references: tuple[str, ...],
) -> None:
    """Run SQL, or an app's named query (such as activity.top-pages), read-only.

    Writes are refused: the connection cannot write, and nothing is committed.
    """
    try:
        apps = load_apps(app_references, database=database_url_of(database))
        if list_queries or sql_or_name is None:
            _list(named_queries(apps))
            return
        if output_format == "parquet" and output is None:
            raise click.UsageError("--format parquet needs --output FILE")
        given = dict(_pair(param) for param in params)
        if NAME_PATTERN.match(sql_or_name):
            named = find_named_query(apps, sql_or_name)
            parameters = named_parameters(named, since=since, given=given)
            result = run_named_query(
                database_url_of(database), named, parameters, allow_superuser=allow_superuser
            )
        else:
            if since is not None:
                raise click.UsageError("--since is for named queries; bind :since in your SQL")
            result = run_query(
                database_url_of(database), sql_or_name, given, allow_superuser=allow_superuser
            )
    except ProjectionError as exc:
        raise click.ClickException(str(exc)) from exc
    _write(result, output_format, output)


def _pair(param: str) -> tuple[str, str]:
    name, sep, value = param.partition("=")
    if not sep or not name:
        raise click.UsageError(f"--param {param!r} is not NAME=VALUE")
    return name, value


def _list(queries: dict[str, Any]) -> None:
    if not queries:
        click.echo("no named queries: no installed app ships any")
        return
    for name, named in sorted(queries.items()):
        window = f" (--since, default {named.since_default})" if named.since_default else ""
        click.echo(f"{name}{window}\n    {named.description}")


def _write(result: QueryResult, output_format: str, output: Path | None) -> None:
    if output_format == "parquet":
        assert output is not None
        _write_parquet(result, output)
        return
    rendered = {"table": render_table, "csv": render_csv, "json": render_json}[output_format]
    text = rendered(result)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")


def render_table(result: QueryResult) -> str:
    """Columns aligned under their names; numbers to the right, NULL as empty."""
    if not result.columns:
        return "(no result set)\n"
    cells = [[_cell(value) for value in row] for row in result.rows]
    numeric = [
        all(isinstance(row[index], int | float | Decimal) for row in result.rows if row[index])
        for index in range(len(result.columns))
    ]
    widths = [
        max([len(name), *(len(row[index]) for row in cells)])
        for index, name in enumerate(result.columns)
    ]

    def line(values: Sequence[str], *, header: bool = False) -> str:
        aligned = [
            value.rjust(width) if numeric[index] and not header else value.ljust(width)
            for index, (value, width) in enumerate(zip(values, widths, strict=True))
        ]
        return " | ".join(aligned).rstrip()

    lines = [line(result.columns, header=True), "-+-".join("-" * width for width in widths)]
    lines += [line(row) for row in cells]
    count = len(result.rows)
    lines.append(f"({count} row{'' if count == 1 else 's'})")
    return "\n".join(lines) + "\n"


def render_csv(result: QueryResult) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([_csv_value(value) for value in row] for row in result.rows)
    return buffer.getvalue()


def render_json(result: QueryResult) -> str:
    """One JSON array of objects, one per row, keyed by column name."""
    rows = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
    return orjson.dumps(rows, default=_json_default, option=orjson.OPT_INDENT_2).decode() + "\n"


def _write_parquet(result: QueryResult, output: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [dict(zip(result.columns, row, strict=True)) for row in result.rows]
    table = pa.Table.from_pylist(rows) if rows else pa.table({c: [] for c in result.columns})
    pq.write_table(table, output)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as the same float
    if isinstance(value, datetime | date | time):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _csv_value(value: Any) -> Any:
    return "" if value is None else _cell(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):  # a JSON number with the value's own digits, not a float's
        return orjson.Fragment(str(value)) if value.is_finite() else None
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
