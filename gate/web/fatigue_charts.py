"""The fatigue section's charts: asks stacked by rule, waits on a log scale, a weekday/hour
heat map. Server-drawn SVG like `gate.web.charts` (same escaping, same two widths)."""

from __future__ import annotations

import math
from html import escape

from markupsafe import Markup

from gate.web.charts import DESK, PHONE, clip, svg

#: the log-scale ticks of a wait axis, seconds and label
WAIT_TICKS = [(1, "1s"), (10, "10s"), (60, "1m"), (600, "10m"), (3600, "1h"), (86400, "1d")]


def stacked_columns(
    points: list[tuple[str, dict[str, int]]],
    series: list[str],
    *,
    title: str,
    width: int = DESK,
) -> Markup:
    """One column per point (a day), split by series (rules, coloured `s0`, `s1`, ...)."""
    height, top, bottom, left = 220, 16, 36, 8
    peak = max((sum(v.values()) for _, v in points), default=0) or 1
    slot = (width - left * 2) / max(len(points), 1)
    plot = height - top - bottom
    step = max(1, math.ceil(len(points) / max(1, width // 70)))
    body = [_baseline(left, width - left, height - bottom)]
    if not any(sum(v.values()) for _, v in points):
        body.append(_empty(width, height))
    for i, (label, values) in enumerate(points):
        x, y = left + i * slot + slot * 0.15, float(height - bottom)
        for k, name in enumerate(series):
            n = values.get(name, 0)
            if not n:
                continue
            h = plot * n / peak
            y -= h
            body.append(
                f'<rect class="bar s{k}" x="{x:.1f}" y="{y:.1f}" width="{slot * 0.7:.1f}" '
                f'height="{h:.1f}"><title>{escape(label)} {escape(name)}: {n}</title></rect>'
            )
        if total := sum(values.values()):
            body.append(_text("value", x + slot * 0.35, y - 3, str(total), "middle"))
        if i % step == 0:
            body.append(_text("label", x + slot * 0.35, height - bottom + 16, label, "middle"))
    return svg(width, height, title, body)


def timing_columns(
    points: list[tuple[str, float | None, float | None]], *, title: str, width: int = DESK
) -> Markup:
    """Per point (a day): the p90 wait as a pale column, the p50 as a dark one inside it."""
    height, top, bottom, left = 220, 12, 36, 34
    plot = height - top - bottom
    slot = (width - left - 8) / max(len(points), 1)
    step = max(1, math.ceil(len(points) / max(1, (width - left) // 70)))
    body = _wait_axis(left, width - 8, top, plot)
    if all(p90 is None for _, _, p90 in points):
        body.append(_empty(width, height))
    for i, (label, p50, p90) in enumerate(points):
        x = left + i * slot + slot * 0.15
        for cls, value, inset in (("p90", p90, 0.0), ("p50", p50, slot * 0.15)):
            if value is None:
                continue
            h = max(2.0, plot * _log_share(value))  # under a second still shows
            body.append(
                f'<rect class="bar {cls}" x="{x + inset:.1f}" y="{top + plot - h:.1f}" '
                f'width="{slot * 0.7 - 2 * inset:.1f}" height="{h:.1f}">'
                f"<title>{escape(label)} {cls}: {_short(value)}</title></rect>"
            )
        if i % step == 0:
            body.append(_text("label", x + slot * 0.35, height - bottom + 16, label, "middle"))
    return svg(width, height, title, body)


def timing_bars(
    rows: list[tuple[str, float | None, float | None]], *, title: str, width: int = DESK
) -> Markup:
    """Per row (an approver): the p90 wait as a pale bar, the p50 as a dark one, log scale."""
    row_h, right, axis_h = 28, 44, 20
    left, chars = (130, 18) if width > PHONE else (92, 12)
    height = max(row_h * len(rows), row_h) + axis_h + 4
    span = width - left - right
    body: list[str] = []
    for seconds, tick in WAIT_TICKS:
        x = left + span * _log_share(seconds)
        body.append(f'<line class="grid" x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - 16}"/>')
        body.append(_text("label", x, height - 4, tick, "middle"))
    for i, (label, p50, p90) in enumerate(rows):
        y = 2 + i * row_h
        body.append(_text("label", left - 6, y + row_h * 0.62, clip(label, chars), "end"))
        for cls, value, inset in (("p90", p90, 4), ("p50", p50, 9)):
            if value is None:
                continue
            w = max(2.0, span * _log_share(value))
            body.append(
                f'<rect class="bar {cls}" x="{left}" y="{y + inset}" width="{w:.1f}" '
                f'height="{row_h - 2 * inset}"><title>{escape(label)} {cls}: {_short(value)}'
                "</title></rect>"
            )
        if p50 is not None:
            w = span * _log_share(p90 if p90 is not None else p50)
            body.append(_text("value", left + w + 4, y + row_h * 0.62, _short(p50), "start"))
    return svg(width, height, title, body)


def heat(grid: list[list[int]], rows: tuple[str, ...], *, title: str, width: int = DESK) -> Markup:
    """Rows (weekdays) by 24 hour columns, each cell darker the busier it was."""
    left, top, bottom = 36, 4, 22
    cell_w = (width - left - 4) / 24
    cell_h = 24.0 if width > PHONE else 22.0
    height = int(top + cell_h * len(rows) + bottom)
    peak = max((max(r) for r in grid), default=0) or 1
    body: list[str] = []
    for d, name in enumerate(rows):
        y = top + d * cell_h
        body.append(_text("label", left - 6, y + cell_h * 0.68, name, "end"))
        for hour, n in enumerate(grid[d]):
            level = 0 if not n else 1 + min(4, int(4 * n / peak))
            body.append(
                f'<rect class="cell h{level}" x="{left + hour * cell_w:.1f}" y="{y:.1f}" '
                f'width="{cell_w - 1:.1f}" height="{cell_h - 1:.1f}">'
                f"<title>{escape(name)} {hour:02d}:00 UTC: {n}</title></rect>"
            )
    every = 3 if width > PHONE else 6
    for hour in range(0, 24, every):
        x = left + hour * cell_w + cell_w / 2
        body.append(_text("label", x, height - 6, f"{hour:02d}", "middle"))
    return svg(width, height, title, body)


def _log_share(seconds: float) -> float:
    """Where `seconds` sits between 1 s and a day on a log scale, 0..1."""
    top = math.log10(WAIT_TICKS[-1][0])
    return min(1.0, max(0.0, math.log10(max(seconds, 1.0)) / top))


def _wait_axis(left: int, right: int, top: int, plot: int) -> list[str]:
    body = []
    for seconds, tick in WAIT_TICKS:
        y = top + plot - plot * _log_share(seconds)
        body.append(f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}"/>')
        body.append(_text("label", left - 4, y + 4, tick, "end"))
    return body


def _short(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _baseline(x1: float, x2: float, y: float) -> str:
    return f'<line class="axis" x1="{x1}" y1="{y}" x2="{x2}" y2="{y}"/>'


def _empty(width: int, height: int) -> str:
    return _text("label", width / 2, height / 2, "none in this period", "middle")


def _text(cls: str, x: float, y: float, text: str, anchor: str) -> str:
    return (
        f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{escape(text)}</text>'
    )
