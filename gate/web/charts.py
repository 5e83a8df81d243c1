"""Server-side SVG charts: no JavaScript, no CDN, colours from the stylesheet.

Every label is escaped here (labels are rule and approver names from config, but a chart
must never be the one place that trusts its input). Bars carry a class per series so the
CSS decides colours, and each chart has a <title> for screen readers; the page prints the
same numbers in a table beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape
from typing import Any

from markupsafe import Markup

SERIES = ["approved", "rejected", "expired", "cancelled", "pending", "approve", "reject"]
#: viewBox widths: a desk chart fills 550-700 CSS px at 1280 px (text 12 units -> 12-15 px); a
#: phone chart fills ~360 CSS px at a 390 px phone (12 units -> ~12.5 px, where the desk
#: chart squeezed to that width drew its text at ~7 px). CSS shows one of the two.
DESK, PHONE = 540, 340


def svg(width: int, height: int, title: str, body: list[str]) -> Markup:
    """An <svg> of `body`, titled, classed `desk` or `phone` by its width."""
    label = escape(title)
    fit = "phone" if width <= PHONE else "desk"
    return Markup(
        f'<svg class="chart {fit}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{label}" xmlns="http://www.w3.org/2000/svg"><title>{label}</title>'
        f"{''.join(body)}</svg>"
    )


def both(draw: Callable[..., Markup], *args: Any, **kwargs: Any) -> Markup:
    """The chart drawn at the desk width and at the phone width (CSS shows one)."""
    return draw(*args, width=DESK, **kwargs) + draw(*args, width=PHONE, **kwargs)


def columns(
    points: list[tuple[str, int]], *, title: str, series: str = "bar", width: int = DESK
) -> Markup:
    """Vertical columns, one per point (a distribution or a day series)."""
    height, top, bottom, left = 220, 16, 36, 8
    peak = max((v for _, v in points), default=0) or 1
    slot = (width - left * 2) / max(len(points), 1)
    body: list[str] = [
        f'<line class="axis" x1="{left}" y1="{height - bottom}" '
        f'x2="{width - left}" y2="{height - bottom}"/>'
    ]
    plot = height - top - bottom
    if not any(v for _, v in points):
        body.append(
            f'<text class="label" x="{width / 2}" y="{height / 2}" text-anchor="middle">'
            "none in this period</text>"
        )
    # x labels ~70 units apart at most, so "11-27" labels never overlap
    step = max(1, math.ceil(len(points) / max(1, width // 70)))
    for i, (label, value) in enumerate(points):
        h = plot * value / peak
        x = left + i * slot + slot * 0.15
        y = height - bottom - h
        body.append(
            f'<rect class="bar {escape(series)}" x="{x:.1f}" y="{y:.1f}" '
            f'width="{slot * 0.7:.1f}" height="{h:.1f}"><title>{escape(label)}: {value}</title>'
            "</rect>"
        )
        if value:
            body.append(
                f'<text class="value" x="{x + slot * 0.35:.1f}" y="{y - 3:.1f}" '
                f'text-anchor="middle">{value}</text>'
            )
        if i % step == 0:
            body.append(
                f'<text class="label" x="{x + slot * 0.35:.1f}" y="{height - bottom + 16}" '
                f'text-anchor="middle">{escape(label)}</text>'
            )
    return svg(width, height, title, body)


def stacked_bars(
    rows: list[tuple[str, dict[str, int]]], series: list[str], *, title: str, width: int = DESK
) -> Markup:
    """Horizontal bars, one per row, split by series (outcomes by rule or approver)."""
    row_h, right = 28, 40
    left, chars = (130, 18) if width > PHONE else (100, 13)
    height = max(row_h * len(rows), row_h) + 8
    peak = max((sum(v.values()) for _, v in rows), default=0) or 1
    scale = (width - left - right) / peak
    body: list[str] = []
    for i, (label, values) in enumerate(rows):
        y = 4 + i * row_h
        body.append(
            f'<text class="label" x="{left - 6}" y="{y + row_h * 0.62:.1f}" '
            f'text-anchor="end">{escape(clip(label, chars))}</text>'
        )
        x = float(left)
        for name in series:
            n = values.get(name, 0)
            if not n:
                continue
            w = n * scale
            body.append(
                f'<rect class="bar {escape(name)}" x="{x:.1f}" y="{y + 4}" width="{w:.1f}" '
                f'height="{row_h - 8}"><title>{escape(label)}: {n} {escape(name)}</title></rect>'
            )
            x += w
        body.append(
            f'<text class="value" x="{x + 4:.1f}" y="{y + row_h * 0.62:.1f}">'
            f"{sum(values.values())}</text>"
        )
    return svg(width, height, title, body)


def clip(text: str, size: int = 18) -> str:
    """`text` cut to `size` characters with an ellipsis (a chart label; tables show it all)."""
    return text if len(text) <= size else text[: size - 1] + "…"
