"""Reads DQN's final returns off MinAtar's published learning curves: the reference (the 1) of
the MinAtar score, `sgi_lab/metrics/data/minatar_scores.json`.

    git clone https://github.com/kenjyoung/MinAtar && \\
        python benchmarks/minatar_reference_curves.py MinAtar/img/learning_curves.gif

The figure (Young & Tian 2019; the paper has no table) holds five panels of returns against
frames. For each panel the y axis is fitted to its tick marks (dark rows left of the axis
spine, values as printed), and DQN's curve (the blue one, its light confidence band left out)
is averaged over the last 3% of training. Panel boxes are for the 3038x1629 figure of commit
87c2bc8; the script checks the tick count of each.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from PIL import Image

# game -> (panel box left, top, right, bottom in the figure's pixels, tick values bottom-up)
PANELS = {
    "minatar/seaquest": ((520, 160, 1320, 660), [0, 5, 10, 15, 20]),
    "minatar/breakout": ((1470, 160, 2270, 660), [0, 5, 10, 15]),
    "minatar/asterix": ((40, 940, 820, 1430), [0, 5, 10, 15, 20]),
    "minatar/freeway": ((1130, 940, 1910, 1430), [0, 10, 20, 30, 40, 50]),
    "minatar/space_invaders": ((2220, 940, 3000, 1430), [0, 50, 100, 150, 200]),
}


def final_return(panel: np.ndarray, ticks: list[int]) -> tuple[float, float]:
    """DQN's return over the panel's last 3% of training, and the tick fit's largest residual."""
    dark = panel.sum(2) < 150
    spans = dark.mean(0) > 0.5  # the two vertical spines of the axes box
    left, right = int(np.argmax(spans)), int(len(spans) - 1 - np.argmax(spans[::-1]))
    rows = np.flatnonzero(dark[:, left - 6 : left - 2].all(1))
    marks = [g.mean() for g in np.split(rows, np.flatnonzero(np.diff(rows) > 1) + 1) if len(g)]
    if len(marks) != len(ticks):
        raise ValueError(f"found {len(marks)} tick marks, expected {len(ticks)}: another figure?")
    marks = sorted(marks, reverse=True)  # image rows grow downwards
    fit = np.polyfit(marks, ticks, 1)
    r, g, b = panel[..., 0], panel[..., 1], panel[..., 2]
    blue = (b > 140) & (r < 60) & (g > 80) & (g < 140)
    columns = range(right - 25, right - 2)
    ys = [np.flatnonzero(blue[:, x]).mean() for x in columns if blue[:, x].any()]
    residual = float(np.abs(np.polyval(fit, marks) - ticks).max())
    return float(np.polyval(fit, np.mean(ys))), residual


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figure", help="MinAtar's img/learning_curves.gif")
    args = parser.parse_args()
    image = np.asarray(Image.open(args.figure).convert("RGB")).astype(int)
    out = {}
    for game, (box, ticks) in PANELS.items():
        left, top, right, bottom = box
        value, residual = final_return(image[top:bottom, left:right], ticks)
        out[game] = {"dqn_final": round(value, 2), "tick_residual": round(residual, 3)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
