"""A forest plot as a standalone SVG (no plotting library: it renders on GitHub and in any
browser): one row per contrast, its point estimate and interval on a shared axis, a line at
the value of "no difference", and each row's verdict beside it.

Written only over a file it wrote itself (`write_forest_svg`), so a user's file of the same
name is never replaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from sgi_lab.viz.svg import write_svg

__all__ = ["FOREST_MARK", "ForestRow", "forest_svg", "write_forest_svg"]

FOREST_MARK = "sgi-lab forest plot"
"""The comment every figure of this module carries: what `write_forest_svg` may replace."""

WIDTH, LEFT, RIGHT, ROW, TOP = 760, 250, 200, 26, 44


@dataclass(frozen=True)
class ForestRow:
    """One contrast: its label, estimate and interval (None: not computed yet), and a note."""

    label: str
    value: float | None
    lower: float | None
    upper: float | None
    note: str = ""
    strong: bool = False  # drawn filled: the declared test rejects


def forest_svg(
    rows: Sequence[ForestRow],
    title: str,
    axis: tuple[float, float] = (0.0, 1.0),
    null: float = 0.5,
    axis_label: str = "P(improvement) over the baseline",
) -> str:
    """The SVG text of a forest plot of ``rows`` on ``axis`` with a dashed line at ``null``."""
    low, high = axis
    span = WIDTH - LEFT - RIGHT
    height = TOP + ROW * len(rows) + 40

    def x(value: float) -> float:
        return LEFT + span * (min(max(value, low), high) - low) / (high - low)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'font-family="sans-serif" font-size="12"><!-- {FOREST_MARK} -->',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="14">{escape(title)}</text>',
        f'<line x1="{x(null)}" y1="{TOP - 10}" x2="{x(null)}" y2="{TOP + ROW * len(rows)}" '
        'stroke="#888" stroke-dasharray="4 3"/>',
    ]
    for k, row in enumerate(rows):
        y = TOP + ROW * k + ROW / 2
        parts.append(
            f'<text x="{LEFT - 10}" y="{y + 4}" text-anchor="end">{escape(row.label)}</text>'
        )
        if row.value is not None and row.lower is not None and row.upper is not None:
            parts.append(
                f'<line x1="{x(row.lower)}" y1="{y}" x2="{x(row.upper)}" y2="{y}" '
                'stroke="#1f4e79" stroke-width="2"/>'
            )
            fill = "#1f4e79" if row.strong else "white"
            parts.append(
                f'<circle cx="{x(row.value)}" cy="{y}" r="5" fill="{fill}" stroke="#1f4e79" '
                'stroke-width="2"/>'
            )
        parts.append(f'<text x="{WIDTH - RIGHT + 10}" y="{y + 4}">{escape(row.note)}</text>')
    base = TOP + ROW * len(rows)
    parts.append(f'<line x1="{LEFT}" y1="{base}" x2="{LEFT + span}" y2="{base}" stroke="black"/>')
    for tick in (low, (low + high) / 2, high, null) if null not in (low, high) else (low, high):
        parts.append(f'<text x="{x(tick)}" y="{base + 16}" text-anchor="middle">{tick:g}</text>')
    parts.append(
        f'<text x="{LEFT + span / 2}" y="{base + 34}" text-anchor="middle">'
        f"{escape(axis_label)}</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_forest_svg(path: str | Path, text: str) -> Path:
    """Write a `forest_svg` figure atomically, only where there is none or one of ours.

    Raises:
        FileExistsError: ``path`` holds something else (it is left as it is).
    """
    return write_svg(path, text, FOREST_MARK, "a forest plot")
