"""Printable tables of a report (``sgi-lab report``, the ablation explorer): each method's
probability of improvement over a baseline, and seed pairs as one text cell a row."""

from __future__ import annotations

import pandas as pd

__all__ = ["format_improvement", "seed_pair_cells"]


def format_improvement(table: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """A printable `sgi_lab.analysis.improvement.improvement_over` table: ``P(method > baseline)`` as ``value (lower,
    upper)``, with the games and runs it rests on."""
    out = pd.DataFrame(
        {
            "method": table["method"],
            f"P(> {table['baseline'].iloc[0]})" if len(table) else "P(improvement)": [
                "-" if pd.isna(v) else f"{v:.{digits}f} ({lo:.{digits}f}, {hi:.{digits}f})"
                for v, lo, hi in zip(table["value"], table["lower"], table["upper"])
            ],
            "score": table["normalization"],
            "games": table["games"],
            "runs": [
                "-" if pd.isna(r) else f"{int(r)} vs {int(b)}"
                for r, b in zip(table["runs"], table["baseline_runs"])
            ],
            "same seed: above / below / level (sign test p)": seed_pair_cells(table),
            "note": table["note"],
        }
    )
    return out


def seed_pair_cells(table: pd.DataFrame) -> list[str]:
    """A table's ``pairs, above, below, level`` and sign test p (``sign_p``) as one text cell
    per row (``3 / 1 / 0 (p = 0.62)``; ``-`` where nothing was paired)."""
    cells = []
    for row in table.to_dict("records"):
        pairs = row.get("pairs")
        if pairs is None or pd.isna(pairs) or not pairs:
            cells.append("-")
            continue
        p = row.get("sign_p")
        tail = "" if p is None or pd.isna(p) else f" (p = {p:.2f})"
        cells.append(f"{int(row['above'])} / {int(row['below'])} / {int(row['level'])}{tail}")
    return cells
