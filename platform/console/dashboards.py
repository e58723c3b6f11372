"""An app's dashboard: each of its named queries run with its defaults, as a chart and
a table.

The platform knows nothing of an app's tables, so a panel's chart is chosen from the
result's shape. One row of several numbers (a funnel, a summary) is a bar per
number, labelled by its column. Otherwise a bar per row, labelled by the row's first
column that is not a number (text or time), sized by its first numeric column. A
result with neither (one column, or no number) is shown as a table alone. At most
:data:`PANEL_ROWS_MAX` rows of a result are shown; the query runs read-only, as
``platform query`` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from eventplatform.console.chart import bar_chart
from eventplatform.projections.apps import App, NamedQuery
from eventplatform.projections.errors import ProjectionError
from eventplatform.projections.query import QueryResult, named_parameters, run_named_query

PANEL_ROWS_MAX = 50
"""Rows of a query's result a panel shows (and charts)."""


@dataclass(frozen=True)
class Panel:
    """One named query on a dashboard: its result (or why there is none) and its chart."""

    name: str
    description: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    chart: str | None
    error: str | None = None


def app_dashboard(app: App, database_url: str) -> list[Panel]:
    """A panel for each of ``app``'s named queries, in the order the app declares them."""
    return [_panel(app, query, database_url) for query in app.queries]


def _panel(app: App, query: NamedQuery, database_url: str) -> Panel:
    name = f"{app.name}.{query.name}"
    try:
        parameters = named_parameters(query, since=None, given={})
        result = run_named_query(database_url, query, parameters, allow_superuser=True)
    except ProjectionError as error:
        return Panel(name, query.description, [], [], None, str(error))
    rows = result.rows[:PANEL_ROWS_MAX]
    return Panel(name, query.description, result.columns, rows, _chart(name, result, rows))


def _chart(name: str, result: QueryResult, rows: list[tuple[Any, ...]]) -> str | None:
    """Bars of the first numeric column, labelled by the first other one; None when the
    result has no such pair."""
    numbers = [index for index, value in enumerate(rows[0]) if _is_number(value)] if rows else []
    if len(rows) == 1 and len(numbers) > 1:
        bars = [(result.columns[index], float(rows[0][index])) for index in numbers]
        return bar_chart(bars, title=name)
    numeric = _first(rows, len(result.columns), _is_number)
    label = _first(rows, len(result.columns), lambda value: not _is_number(value))
    if numeric is None or label is None or not rows:
        return None
    bars = [
        (_label(row[label]), float(row[numeric]) if row[numeric] is not None else 0.0)
        for row in rows
    ]
    return bar_chart(bars, title=f"{name}: {result.columns[numeric]}")


def _first(rows: list[tuple[Any, ...]], width: int, test: Any) -> int | None:
    """The first column whose values (those not NULL) all pass ``test``."""
    for index in range(width):
        values = [row[index] for row in rows if row[index] is not None]
        if values and all(test(value) for value in values):
            return index
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def _label(value: Any) -> str:
    if isinstance(value, datetime | date | time):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    return str(value)
