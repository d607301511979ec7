"""The MinAtar study's probes beside its finetuning: each objective's probe score next to its
IQM, and the rank correlation of the two (`sgi_lab.studies.finetune_study` puts the table in the
study's Markdown).

A MinAtar probe result of probes.json format 2 leads with the mean held-out R^2 of the labels
read by regression (positions, counters, the ramp: `sgi_lab.probes.kinds`), which is what the
table reads when the results have it; results of format 1 (every label classified) have only
F1s, and the table reads AtariARI's mean of the category means of F1, as it always did. The two
are never averaged together: one table reads one of them (`probe_metric`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["PROBE_COLUMNS", "PROBE_WORDS", "probe_finetune_table", "probe_metric"]

PROBE_WORDS = {
    "across_categories": "mean of category means, least squares",
    "state_r2": "the headline: mean held-out R² of the labels read by regression, MinAtar's "
    "positions, counters and ramp",
}
"""What a probe metric of the table is, in the words of the study's Markdown."""
PROBE_COLUMNS = {"across_categories": "probe", "state_r2": "probe R²"}
"""The table's header over each probe metric (``probe``: the F1 tables as they were written)."""


def probe_metric(probes: pd.DataFrame) -> str:
    """The probe metric a table of these results reads: ``state_r2`` (the R^2 headline) when any
    result's headline is an R^2 (probes.json format 2 on MinAtar), else ``across_categories``
    (F1, the mean of category means)."""
    if "headline_metric" in probes and (probes["headline_metric"] == "r2").any():
        return "state_r2"
    return "across_categories"


def probe_finetune_table(
    probes: pd.DataFrame,
    table: pd.DataFrame,
    metric: str | None = None,
    games: list[str] | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Each objective's probe ``metric`` (`experiment_probe_frame` rows on the game-state
    labels: the mean over the games it was probed on of its seeds' mean; random encoders
    stand for ``none``) beside its finetuning IQM (`objective_table`), and Spearman's rank
    correlation between the two over the objectives that have both: does an encoder that reads
    better finetune better?

    Args:
        probes: one row per probed encoder and game.
        table: the objectives' aggregates (an ``iqm`` column, objectives as index).
        metric: the probe column read (default: `probe_metric` of ``probes``; a game whose
            results lack it, as format-1 results lack an R^2, counts for no objective).
        games: only these games' probes (those the IQMs are over).

    Returns:
        ``(frame: objective, probe, probe_games, iqm; rho dict: rho, p, n)``.
    """
    from scipy import stats

    if games is not None and not probes.empty:
        probes = probes[probes["game"].isin(games)]
    if probes.empty or table.empty:
        return pd.DataFrame(), {"rho": None, "p": None, "n": 0}
    metric = metric or probe_metric(probes)
    probes = probes.assign(objective=probes["objective"].replace({"random_init": "none"}))
    values = pd.to_numeric(probes[metric], errors="coerce")
    per_game = values.groupby([probes["objective"], probes["game"]]).mean().dropna()
    probe = per_game.groupby("objective").mean()
    games = per_game.groupby("objective").size()
    both = [o for o in table.index if o in probe.index]
    frame = pd.DataFrame(
        {
            "probe": probe.reindex(both),
            "probe_games": games.reindex(both),
            "iqm": table["iqm"].reindex(both),
        }
    )
    frame.index.name = "objective"
    if len(both) < 3:
        return frame, {"rho": None, "p": None, "n": len(both)}
    rho, p = stats.spearmanr(frame["probe"], frame["iqm"])
    return frame, {"rho": float(rho), "p": float(p), "n": len(both)}
