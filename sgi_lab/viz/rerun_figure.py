"""A study run twice, as a figure: each (method, game, seed) a point, its score in the first
run against the second, beside the diagonal."""

from __future__ import annotations

import html

import pandas as pd

__all__ = ["RERUN_MARK", "rerun_svg"]

RERUN_MARK = "sgi-lab reruns.rerun_svg"
"""Inside every figure `rerun_svg` draws: what may be written over (`sgi_lab.viz.svg.write_svg`)."""


def rerun_svg(pairs: pd.DataFrame, names: tuple[str, str] = ("first", "second")) -> str:
    """Each (method, game, seed) both runs finished (``pairs``: ``method, game, seed, first,
    second`` rows, the normalised scores), as a point: its score in the first run (x) against the
    second (y), coloured by game, with the diagonal (a seed that pinned its run would sit on
    it). A standalone SVG (GitHub shows it in a Markdown page)."""
    width, pad_l, pad_r, pad_t, pad_b = 420, 48, 130, 12, 40
    side = width - pad_l - pad_r  # a square plot
    height = pad_t + side + pad_b
    if pairs.empty:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><desc>{RERUN_MARK}</desc></svg>'
    values = pairs[["first", "second"]].to_numpy()
    lo, hi = min(0.0, float(values.min())), float(values.max()) * 1.05 or 1.0

    def at(value: float) -> float:
        return (value - lo) / (hi - lo) * side

    x0, y0 = pad_l, pad_t + side  # the axes' origin, at (lo, lo)
    colours = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
    games = sorted(pairs["game"].unique())
    one, two = (html.escape(n) for n in names)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-size="11" font-family="sans-serif">',
        f"<desc>{RERUN_MARK}</desc>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<polyline points="{x0},{pad_t} {x0},{y0} {x0 + side},{y0}" fill="none" stroke="#888"/>',
        f'<line x1="{x0}" y1="{y0}" x2="{x0 + side}" y2="{pad_t}" stroke="#bbb" '
        'stroke-dasharray="4 3"/>',
        f'<text x="{x0 + side / 2:.0f}" y="{height - 6}" text-anchor="middle">'
        f"MinAtar score, {one}</text>",
        f'<text x="12" y="{pad_t + side / 2:.0f}" transform="rotate(-90 12 {pad_t + side / 2:.0f})" '
        f'text-anchor="middle">MinAtar score, {two}</text>',
        f'<text x="{x0 - 4}" y="{pad_t + 8}" text-anchor="end">{hi:.2f}</text>',
        f'<text x="{x0 - 4}" y="{y0}" text-anchor="end">{lo:.2f}</text>',
        f'<text x="{x0 + side}" y="{y0 + 14}" text-anchor="end">{hi:.2f}</text>',
    ]
    for row in pairs.itertuples():
        colour = colours[games.index(row.game) % len(colours)]
        parts.append(
            f'<circle cx="{x0 + at(row.first):.1f}" cy="{y0 - at(row.second):.1f}" r="3" '
            f'fill="{colour}" fill-opacity="0.7"><title>{html.escape(row.method)}, '
            f"{html.escape(row.game)}, seed {int(row.seed)}: {row.first:.3f} / "
            f"{row.second:.3f}</title></circle>"
        )
    for i, game in enumerate(games):
        y = pad_t + 14 + 16 * i
        parts.append(
            f'<circle cx="{width - pad_r + 14}" cy="{y - 4}" r="4" '
            f'fill="{colours[i % len(colours)]}"/><text x="{width - pad_r + 22}" y="{y}">'
            f"{html.escape(game.removeprefix('minatar/'))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
