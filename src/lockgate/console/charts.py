# console/charts.py — server-side SVG line charts (no script, no third-party code): one or
# more series of (time, value) drawn on a shared scale, time as "seconds ago" from the newest
# point, the value axis from 0 to a rounded maximum. Colours come from the console's CSS
# (classes series-0, series-1...), so the markup carries no inline style (the pages' CSP
# forbids it). Every text is escaped.
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape


@dataclass(frozen=True, slots=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]  # (time in seconds, value), oldest first


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k at or above `value` (1 for nothing to show)."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        candidate = step * 10.0**exponent
        if candidate >= value * (1 - 1e-12):
            return candidate
    raise AssertionError("unreachable")


def short_number(value: float) -> str:
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    unit: str = "",
    width: int = 640,
    height: int = 180,
) -> Markup:
    left, right, top, bottom = 56, 12, 24, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    points = [p for s in series for p in s.points]
    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
        f'<text class="chart-title" x="{left}" y="16">{escape(title)}</text>',
        f'<rect class="chart-frame" x="{left}" y="{top}" width="{plot_w}" height="{plot_h}"/>',
    ]
    if not points:
        parts.append(
            f'<text class="chart-empty" x="{left + plot_w / 2}" y="{top + plot_h / 2}" '
            'text-anchor="middle">collecting samples…</text></svg>'
        )
        return Markup("".join(parts))
    newest = max(t for t, _v in points)
    oldest = min(t for t, _v in points)
    span = max(newest - oldest, 1.0)
    ceiling = nice_ceiling(max(v for _t, v in points))
    for fraction in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - fraction)
        parts.append(
            f'<line class="chart-grid" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="chart-axis" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(short_number(ceiling * fraction))}</text>"
        )
    parts.append(
        f'<text class="chart-axis" x="{left}" y="{height - 8}">-{span:.0f}s</text>'
        f'<text class="chart-axis" x="{left + plot_w}" y="{height - 8}" text-anchor="end">'
        f"now{escape(' · ' + unit if unit else '')}</text>"
    )
    for index, one in enumerate(series):
        coordinates = " ".join(
            f"{left + plot_w * (t - oldest) / span:.1f},{top + plot_h * (1 - v / ceiling):.1f}"
            for t, v in one.points
        )
        if coordinates:
            parts.append(f'<polyline class="series-{index}" fill="none" points="{coordinates}"/>')
        parts.append(
            f'<text class="legend series-{index}" x="{left + plot_w - 4}" '
            f'y="{top + 14 + 14 * index}" text-anchor="end">{escape(one.label)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
