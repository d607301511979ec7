"""Learning curves of several methods over several games as a standalone SVG (no plotly: the
file sits beside a study's Markdown in git and renders on GitHub): one panel per game, one line
per method, each method its own colour and, past the palette, its own dash."""

from __future__ import annotations

import html
from collections.abc import Sequence

import pandas as pd

__all__ = ["PALETTE", "method_curves_svg", "method_style"]

PALETTE = (
    "#7f7f7f", "#1f77b4", "#d62728", "#2ca02c", "#9467bd",
    "#ff7f0e", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
)  # fmt: skip
"""Ten colours (gray first: the baseline); an eleventh method gets the first colour dashed."""
DASHES = ("", "5 3", "2 2")


def method_style(index: int) -> str:
    """The SVG stroke attributes of the ``index``-th method: its colour, and a dash once the
    palette is used up, so no two of up to 30 methods look alike."""
    colour = PALETTE[index % len(PALETTE)]
    dash = DASHES[(index // len(PALETTE)) % len(DASHES)]
    return f'stroke="{colour}"' + (f' stroke-dasharray="{dash}"' if dash else "")


def method_curves_svg(
    curves: pd.DataFrame,
    methods: Sequence[str] | None = None,
    panel: tuple[int, int] = (210, 150),
    mark: str = "",
    y_title: str = "training return (mean over seeds)",
) -> str:
    """One panel per game of ``curves`` (``game, method, step, return`` rows), the mean return
    of each step against agent steps, one line per method (``methods``: which, in that order,
    default all), each panel on its own scale with its maximum written at the top, the y axis
    titled ``y_title``; ``mark`` goes into the SVG's ``<desc>`` (what may overwrite it)."""
    if curves.empty:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>'
    present = set(curves["method"])
    methods = [m for m in (methods or sorted(present)) if m in present]
    games = sorted(curves["game"].unique())
    w, h = panel
    pad_l, pad_t, pad_b, legend = 44, 22, 26, 16 * len(methods) + 10
    width, height = w * len(games), h + legend
    last = int(curves["step"].max())
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-size="10" font-family="sans-serif">',
        f"<desc>{html.escape(mark)}</desc>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        # the y axis's title, once, along the first panel's axis
        f'<text transform="rotate(-90)" x="{-(h - pad_b + pad_t) / 2:.0f}" y="10" '
        f'text-anchor="middle">{html.escape(y_title)}</text>',
    ]
    for g, game in enumerate(games):
        means = curves[curves["game"] == game].groupby(["method", "step"])["return"].mean()
        top = max(float(means.max()), 1e-9) * 1.05
        x0, x1 = g * w + pad_l, (g + 1) * w - 8
        y0, y1 = h - pad_b, pad_t

        def xy(step: float, value: float, x0=x0, x1=x1, y0=y0, y1=y1, top=top) -> str:
            return f"{x0 + step / last * (x1 - x0):.1f},{y0 - value / top * (y0 - y1):.1f}"

        parts += [
            f'<text x="{(x0 + x1) / 2:.0f}" y="12" text-anchor="middle">'
            f"{html.escape(str(game).removeprefix('minatar/'))}</text>",
            f'<polyline points="{x0},{y1} {x0},{y0} {x1},{y0}" fill="none" stroke="#888"/>',
            f'<text x="{x0 - 3}" y="{y1 + 4}" text-anchor="end">{top:.3g}</text>',
            f'<text x="{x0 - 3}" y="{y0 + 3}" text-anchor="end">0</text>',
            f'<text x="{x1}" y="{y0 + 12}" text-anchor="end">{last:,} agent steps</text>',
        ]
        for i, method in enumerate(methods):
            if method not in means.index.get_level_values(0):
                continue
            points = " ".join(xy(s, v) for s, v in means.loc[method].sort_index().items())
            parts.append(
                f'<polyline points="{points}" fill="none" {method_style(i)} stroke-width="1.5"/>'
            )
    for i, method in enumerate(methods):
        y = h + 8 + 16 * i
        parts.append(
            f'<line x1="{pad_l}" y1="{y}" x2="{pad_l + 18}" y2="{y}" {method_style(i)} '
            f'stroke-width="2"/><text x="{pad_l + 24}" y="{y + 4}">{html.escape(method)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
