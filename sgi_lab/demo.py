"""``make demo``: the pipeline on the embedded default (Pong, small Random dataset, CPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sgi_lab.data import TransitionStore
from sgi_lab.data.collect import collect_random
from sgi_lab.viz.datasets import store_summary_figure

DEMO_DIR = Path("outputs/demo")


def main() -> int:
    out = DEMO_DIR / "data" / "pong_random"
    print("sgi-lab demo: collect a Random dataset of Pong (5,000 steps) and summarise it")
    store = TransitionStore(out) if out.exists() else collect_random("pong", 5_000, out, seed=0)
    summary = store.summary()
    print(json.dumps(summary, indent=2))
    figure = DEMO_DIR / "dataset_summary.html"
    store_summary_figure(store).write_html(figure, include_plotlyjs="directory")
    print(f"figure: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
