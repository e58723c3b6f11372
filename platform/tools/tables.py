"""Plain-text tables for terminal output: left-aligned columns, two spaces apart."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

COLUMN_GAP = "  "
MISSING = "-"


def cell_text(value: object) -> str:
    """How one value reads in a table: ``None`` is ``-``, everything else ``str``."""
    return MISSING if value is None else str(value)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The header line and one line per row, each column as wide as its widest cell.

    Trailing blanks are trimmed, so output compares cleanly in tests and diffs.
    """
    text_rows = [[cell_text(value) for value in row] for row in rows]
    for row in text_rows:
        if len(row) != len(headers):
            raise ValueError(f"row {row!r} has {len(row)} cells for {len(headers)} headers")
    widths = [len(header) for header in headers]
    for row in text_rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
    return [
        COLUMN_GAP.join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [list(headers), *text_rows]
    ]
