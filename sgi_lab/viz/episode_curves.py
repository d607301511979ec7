"""A few agents' learning curves as an inline SVG (the demo's index.html opens offline, without
plotly.js): one line per agent, the random policy's score dashed across."""

from __future__ import annotations

import html

__all__ = ["episode_curves_svg"]

_COLOURS = ("#ef553b", "#00cc96", "#636efa")


def episode_curves_svg(
    curves: dict[str, tuple[list, list]],
    random: float | None = None,
    width: int = 560,
    height: int = 240,
) -> str:
    """The learning curves as an inline SVG (index.html works offline, no plotly.js): one
    polyline per agent, a dashed line at the random policy's score, axes labelled."""
    if not curves:
        return "<p>No finished training episode to draw.</p>"
    pad_l, pad_r, pad_t, pad_b = 44, 150, 10, 30
    xs = [x for steps, _ in curves.values() for x in steps]
    ys = [y for _, means in curves.values() for y in means] + ([random] if random else [])
    x0, x1 = 0.0, max(xs) or 1.0
    y0 = min(0.0, min(ys))
    y1 = max(ys) * 1.1 if max(ys) > y0 else y0 + 1.0  # flat curves still get a y range

    def point(x: float, y: float) -> str:
        px = pad_l + (x - x0) / (x1 - x0) * (width - pad_l - pad_r)
        py = height - pad_b - (y - y0) / (y1 - y0) * (height - pad_t - pad_b)
        return f"{px:.1f},{py:.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-size="11" font-family="sans-serif">',
        f'<polyline points="{point(x0, y1)} {point(x0, y0)} {point(x1, y0)}" fill="none" '
        'stroke="#888"/>',
        f'<text x="{pad_l}" y="{height - 8}">0</text>',
        f'<text x="{width - pad_r}" y="{height - 8}" text-anchor="end">{x1:,.0f} agent steps'
        "</text>",
        f'<text x="{pad_l - 4}" y="{pad_t + 9}" text-anchor="end">{y1:.1f}</text>',
        f'<text x="{pad_l - 4}" y="{height - pad_b}" text-anchor="end">{y0:.1f}</text>',
    ]
    if random is not None:
        a, b = point(x0, random), point(x1, random)
        parts.append(
            f'<polyline points="{a} {b}" stroke="#888" stroke-dasharray="4 3" fill="none"/>'
        )
        parts.append(f'<text x="{b.split(",")[0]}" y="{b.split(",")[1]}" dx="4">random</text>')
    for i, (label, (steps, means)) in enumerate(curves.items()):
        colour = _COLOURS[i % len(_COLOURS)]
        line = " ".join(point(x, y) for x, y in zip(steps, means, strict=True))
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        # a legend, not labels at the curves' ends: curves that end together would overlap
        lx, ly = width - pad_r + 40, pad_t + 10 + 16 * i
        parts.append(
            f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 18}" y2="{ly - 4}" stroke="{colour}" '
            f'stroke-width="2"/><text x="{lx + 22}" y="{ly}">{html.escape(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
