"""Horizontal bar charts as inline SVG, drawn on the server: no script, no external file.

:func:`bar_chart` is pure: labels and values in, SVG text out, every label
escaped. At most :data:`BARS_MAX` bars are drawn; the chart says how many
were left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

BARS_MAX = 40
BAR_HEIGHT_PX = 18
BAR_GAP_PX = 6
LABEL_WIDTH_PX = 260
PLOT_WIDTH_PX = 360
VALUE_WIDTH_PX = 90
TITLE_HEIGHT_PX = 24
LABEL_CHARS_MAX = 40


def bar_chart(bars: Sequence[tuple[str, float]], *, title: str) -> str:
    """An SVG of one bar per ``(label, value)``, scaled to the largest value."""
    shown = list(bars[:BARS_MAX])
    left_out = len(bars) - len(shown)
    width = LABEL_WIDTH_PX + PLOT_WIDTH_PX + VALUE_WIDTH_PX
    rows = len(shown) + (1 if left_out else 0) + (0 if shown else 1)
    height = TITLE_HEIGHT_PX + rows * (BAR_HEIGHT_PX + BAR_GAP_PX)
    largest = max((value for _, value in shown), default=0)
    parts = [
        f'<svg class="chart" role="img" aria-label="{escape(title)}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="0" y="16" class="chart-title">{escape(title)}</text>',
    ]
    for index, (label, value) in enumerate(shown):
        y = TITLE_HEIGHT_PX + index * (BAR_HEIGHT_PX + BAR_GAP_PX)
        length = 0 if largest <= 0 else round(PLOT_WIDTH_PX * max(value, 0) / largest)
        text_y = y + BAR_HEIGHT_PX - 5
        shortened = label if len(label) <= LABEL_CHARS_MAX else label[: LABEL_CHARS_MAX - 1] + "…"
        parts += [
            f'<text x="{LABEL_WIDTH_PX - 8}" y="{text_y}" text-anchor="end">'
            f"<title>{escape(label)}</title>{escape(shortened)}</text>",
            f'<rect class="bar" x="{LABEL_WIDTH_PX}" y="{y}" width="{max(length, 1)}" '
            f'height="{BAR_HEIGHT_PX}"/>',
            f'<text x="{LABEL_WIDTH_PX + length + 6}" y="{text_y}">{_number(value)}</text>',
        ]
    if not shown:
        parts.append(
            f'<text x="0" y="{TITLE_HEIGHT_PX + BAR_HEIGHT_PX - 5}">nothing to show</text>'
        )
    if left_out:
        y = TITLE_HEIGHT_PX + len(shown) * (BAR_HEIGHT_PX + BAR_GAP_PX) + BAR_HEIGHT_PX - 5
        parts.append(f'<text x="0" y="{y}">and {left_out} more</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _number(value: float) -> str:
    """A whole number with thousands separators; another with six significant digits."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.6g}"
