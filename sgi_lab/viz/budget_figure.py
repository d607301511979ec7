"""A study's IQM by budget as a standalone SVG (GitHub shows it in a Markdown page): the
pretraining-budget curve of each finetuning scheme, or each method at each finetuning budget."""

from __future__ import annotations

import html
from collections.abc import Mapping

import pandas as pd

__all__ = ["BUDGET_MARK", "budget_svg", "finetune_budget_svg"]

BUDGET_MARK = "sgi-lab minatar_study.budget_svg"
"""Inside every figure `budget_svg` draws (the name it has had since the first was written): what
may be written over (`sgi_lab.viz.svg.write_svg`)."""


def budget_svg(
    curves: dict[str, pd.DataFrame],
    width: int = 520,
    height: int = 260,
    x_label: str = "SGI pretraining steps (batch 256; not to scale)",
    ticks: Mapping[int, str] | None = None,
) -> str:
    """Pretraining-budget curves (`budget_curve` per scheme: ``{"reduced lr": curve, ...}``) as
    a standalone SVG (GitHub shows it in a Markdown page): IQM against pretraining steps, one
    line per scheme with its 95% CI as error bars, the budgets equally spaced (0, 500, 2,000,
    8,000 are not to scale), the from-scratch IQM as a dashed line across. ``x_label`` and
    ``ticks`` (``{steps: label}``; the steps with thousands separators where absent) let it
    draw another budget (`finetune_budget_svg`)."""
    colours = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
    curves = {k: c for k, c in curves.items() if not c.empty}
    steps = sorted({int(s) for c in curves.values() for s in c["steps"]})
    if not steps:
        return '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>'
    highs = [v for c in curves.values() for v in c["iqm_upper"]]
    lows = [v for c in curves.values() for v in c["iqm_lower"]]
    y0, y1 = min(0.0, min(lows)), max(highs) * 1.1 if max(highs) > 0 else 1.0
    pad_l, pad_r, pad_t, pad_b = 48, 130, 12, 40

    def x_of(step: int) -> float:
        span = max(len(steps) - 1, 1)
        return pad_l + 20 + steps.index(step) / span * (width - pad_l - pad_r - 40)

    def y_of(value: float) -> float:
        return height - pad_b - (value - y0) / (y1 - y0) * (height - pad_t - pad_b)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-size="11" font-family="sans-serif">',
        f"<desc>{BUDGET_MARK}</desc>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<polyline points="{pad_l},{pad_t} {pad_l},{height - pad_b} '
        f'{width - pad_r},{height - pad_b}" fill="none" stroke="#888"/>',
        f'<text x="{(pad_l + width - pad_r) / 2:.0f}" y="{height - 6}" text-anchor="middle">'
        f"{html.escape(x_label)}</text>",
        f'<text x="{pad_l - 6}" y="{y_of(y1) + 4:.1f}" text-anchor="end">{y1:.2f}</text>',
        f'<text x="{pad_l - 6}" y="{y_of(y0) + 4:.1f}" text-anchor="end">{y0:.2f}</text>',
        f'<text x="12" y="{pad_t + 8}" transform="rotate(-90 12 {pad_t + 8})" '
        'text-anchor="end">IQM MinAtar score</text>',
    ]
    for step in steps:
        parts.append(
            f'<text x="{x_of(step):.1f}" y="{height - pad_b + 14}" text-anchor="middle">'
            f"{html.escape((ticks or {}).get(step, f'{step:,}'))}</text>"
        )
    scratch = next((c[c["steps"] == 0] for c in curves.values() if (c["steps"] == 0).any()), None)
    if scratch is not None and not scratch.empty:
        y = y_of(float(scratch["iqm"].iloc[0]))
        parts.append(
            f'<line x1="{pad_l}" y1="{y:.1f}" x2="{width - pad_r}" y2="{y:.1f}" stroke="#888" '
            f'stroke-dasharray="4 3"/><text x="{width - pad_r + 4}" y="{y + 4:.1f}">'
            "from scratch</text>"
        )
    for i, (label, curve) in enumerate(curves.items()):
        colour = colours[i % len(colours)]
        shift = (i - (len(curves) - 1) / 2) * 6  # side by side, so the error bars do not hide
        rows = curve.sort_values("steps")
        points = [(x_of(int(r.steps)) + shift, r) for r in rows.itertuples()]
        line = " ".join(f"{x:.1f},{y_of(r.iqm):.1f}" for x, r in points)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, r in points:
            parts.append(
                f'<line x1="{x:.1f}" y1="{y_of(r.iqm_lower):.1f}" x2="{x:.1f}" '
                f'y2="{y_of(r.iqm_upper):.1f}" stroke="{colour}"/>'
                f'<circle cx="{x:.1f}" cy="{y_of(r.iqm):.1f}" r="3" fill="{colour}"/>'
            )
        ly = pad_t + 14 + 16 * i
        parts.append(
            f'<line x1="{width - pad_r + 4}" y1="{ly - 4}" x2="{width - pad_r + 22}" '
            f'y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>'
            f'<text x="{width - pad_r + 26}" y="{ly}">{html.escape(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def finetune_budget_svg(table: pd.DataFrame) -> str:
    """`finetune_budget_table` as a figure (`budget_svg`): each method's IQM with its 95% CI at
    each finetuning budget, a line per method (scratch's too: its level moves with the budget),
    the budgets in the table's order and equally spaced."""
    budgets = list(dict.fromkeys(table["budget"]))
    curves = {
        method: rows.assign(steps=[budgets.index(b) + 1 for b in rows["budget"]])
        for method, rows in table.groupby("method", sort=False)
    }
    curves = dict(sorted(curves.items(), key=lambda item: item[0] != "none"))
    over = f"{int(table['games'].iloc[0])} games x {int(table['runs'].iloc[0])} seeds"
    ticks = {i + 1: b for i, b in enumerate(budgets)}
    return budget_svg(curves, x_label=f"finetuning budget ({over})", ticks=ticks)
