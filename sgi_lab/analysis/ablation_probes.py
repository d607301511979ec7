"""Probe scores beside the ablation explorer's scores: how well linear probes read game state out
of the encoders behind each method (`sgi_lab.probes`), with 95% confidence intervals over seeds.
Each result's headline keeps its metric (``headline_f1``: AtariARI's mean of category means of
F1; ``headline_r2``: MinAtar's mean held-out R^2), with the R^2 per label kind and the collapse
cosines beside random init and step 0 where the result has them; F1 and R^2 are never averaged
together (results of probes.json format 1 have F1s only).

* `load_probe_scores` gives one row per probe result behind a method: a finetuning run's
  method gets the results of the pretraining run it started from (``sgi-lab probe`` wrote them
  into that run's ``probes.json``); the encoders of a probe study (pretraining runs, random
  encoders, an experiment folder) are methods named by their objective (``s_g``,
  ``random_init``);
* `probe_summary` turns them into the mean over seeds of each seed's mean over the selected
  games, per method and metric (`sgi_lab.analysis.probe_study.objective_summary`);
* `probe_table` and `probe_figure` show that summary: ``mean (lower, upper)`` cells, and bars
  with CI whiskers, one panel per metric (F1, R^2, cosine: `sgi_lab.viz.probes.probe_bars`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from sgi_lab.analysis.probe_encoders import probes_path
from sgi_lab.analysis.probe_study import (
    DEFAULT_READOUT,
    objective_summary,
    probe_folders,
    probe_frame,
)
from sgi_lab.analysis.report import read_run
from sgi_lab.envs import canonical_env_game
from sgi_lab.probes.atariari import CATEGORIES
from sgi_lab.viz.probes import NO_PROBES, probe_bars, probe_panels
from sgi_lab.viz.tables import aggregate_frame

__all__ = [
    "PROBE_LABELS",
    "PROBE_METRICS",
    "headline_columns",
    "load_probe_scores",
    "pretraining_probes",
    "probe_figure",
    "probe_summary",
    "probe_table",
]

PROBE_METRICS = (
    "headline_f1",
    "overall",
    *CATEGORIES,
    "reward_f1",
    "random_init",
    "majority",
    "headline_r2",
    "r2_coordinate",
    "r2_counter",
    "r2_ordinal",
    "random_init_r2",
    "cosine",
    "cosine_step0",
    "cosine_random_init",
)
"""The explorer's probe columns: the headline where it is an F1 (AtariARI's mean of category
means), overall F1 (the mean over classified variables), F1 per category, the reward probe's F1,
the same split's random-init and majority-class overall F1; the headline where it is an R^2
(MinAtar's mean held-out R^2), R^2 per label kind, the random encoder's mean R^2; the collapse
diagnostic's cosines of the projection (the encoder, its run's step 0, a random encoder)."""
PROBE_LABELS = {
    "headline_f1": "headline F1 (category mean)",
    "overall": "F1 overall",
    "agent_localization": "agent loc.",
    "small_object_localization": "small objects",
    "other_localization": "other loc.",
    "score_clock_lives_display": "score/clock/lives",
    "miscellaneous": "misc.",
    "reward_f1": "reward F1",
    "random_init": "random init (overall)",
    "majority": "majority (overall)",
    "headline_r2": "headline R² (mean)",
    "r2_coordinate": "R² coordinates",
    "r2_counter": "R² counters",
    "r2_ordinal": "R² ordinal",
    "random_init_r2": "random init (R²)",
    "cosine": "cosine",
    "cosine_step0": "cosine step 0",
    "cosine_random_init": "cosine random init",
}
SUMMARY_COLUMNS = ["method", "metric", "value", "lower", "upper", "seeds", "games"]


def pretraining_probes(pretrained: str | os.PathLike) -> Path:
    """Where the probe results of a finetuning run's encoder source are: ``RUN/probes.json`` for
    a pretraining run folder (or its ``model.pt``), ``RUN/probes_ckpt_N.json`` for one of its
    checkpoints (`sgi_lab.analysis.probe_encoders.probes_path`)."""
    path = Path(pretrained)
    return path if path.is_dir() else probes_path(path)


def load_probe_scores(
    run_dirs: Sequence[str | os.PathLike] | dict[str, Sequence[str | os.PathLike]] = (),
    probe_paths: Iterable[str | os.PathLike] = (),
) -> pd.DataFrame:
    """One row per probe result behind the explorer's methods.

    Args:
        run_dirs: finetuning run folders (labelled as `sgi_lab.analysis.run_scores.load_run_scores`
            labels them), or ``{method: folders}``: each method gets the probe results of the
            pretraining runs its runs started from (their config's ``pretrained``), each
            pretraining run once.
        probe_paths: pretraining runs, random encoders' folders, experiment folders or roots of
            runs, glob patterns allowed (`sgi_lab.analysis.probe_study.probe_folders`): each probed
            encoder there counts for the method named by its objective (the pretraining params
            without ``_seedN``, or ``random_init``).

    Returns:
        `sgi_lab.analysis.probe_study.probe_frame` rows (``game``, ``seed``: the pretraining run's seed,
        ``overall``, one column per category, ``reward_f1``, ``random_init``, ``majority``, ...)
        with ``method`` first; a pretraining run probed twice on one store counts once (its
        latest result). Empty when there are none.
    """
    if isinstance(run_dirs, dict):
        labelled = [(m, read_run(p)) for m, paths in run_dirs.items() for p in paths]
    else:
        labelled = [(run.label, run) for run in map(read_run, run_dirs)]
    sources = dict.fromkeys(
        (method, pretraining_probes(run.config["pretrained"]))
        for method, run in labelled
        if run.config.get("pretrained")
    )
    # the default readout's results (a folder may hold others: objective_summary refuses a mix)
    frames = [
        probe_frame([where], *DEFAULT_READOUT).assign(method=method) for method, where in sources
    ]
    found = probe_frame(probe_folders(probe_paths), *DEFAULT_READOUT)
    if not found.empty:
        frames.append(found.assign(method=found["objective"]))
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=["method", "folder", "game", "seed", *PROBE_METRICS])
    rows = pd.concat(frames, ignore_index=True)
    rows = rows.drop_duplicates(["method", "folder", "store"], keep="last", ignore_index=True)
    rows = headline_columns(rows)
    return rows[["method", *[c for c in rows.columns if c != "method"]]]


def headline_columns(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with each result's headline in the column of its metric: ``headline_f1`` where it
    is an F1 (AtariARI's mean of category means), ``headline_r2`` where it is an R^2 (MinAtar's
    mean held-out R^2), NaN in the other; so a summary never averages one with the other, and a
    result without a headline (probes.json format 1) has neither."""
    missing = pd.Series(None, index=rows.index, dtype=object)
    metric = rows.get("headline_metric", missing)
    value = pd.to_numeric(rows.get("headline", missing), errors="coerce")
    return rows.assign(**{f"headline_{m}": value.where(metric == m) for m in ("f1", "r2")})


def probe_summary(
    probes: pd.DataFrame,
    methods: Sequence[str] | None = None,
    games: Sequence[str] | None = None,
    metrics: Sequence[str] = PROBE_METRICS,
) -> pd.DataFrame:
    """Per method and metric: the mean over seeds of each seed's mean over ``games``, with a 95%
    t interval over seeds (none from one seed).

    Args:
        probes: `load_probe_scores` rows.
        methods: the methods kept, in this order (default: all, in order of appearance).
        games: the games averaged over (default: all).
        metrics: columns of ``probes`` summarised.

    Returns:
        ``method, metric, value, lower, upper, seeds, games`` rows.
    """
    if probes.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    chosen = probes
    if games is not None:
        chosen = chosen[chosen["game"].isin([canonical_env_game(g) for g in games])]
    if methods is not None:
        chosen = chosen[chosen["method"].isin(methods)]
        order = {m: i for i, m in enumerate(methods)}
        chosen = chosen.sort_values("method", key=lambda c: c.map(order), kind="stable")
    summary = objective_summary(chosen, metrics, by="method")
    return summary if not summary.empty else pd.DataFrame(columns=SUMMARY_COLUMNS)


def probe_table(summary: pd.DataFrame, methods: Sequence[str] | None = None) -> pd.DataFrame:
    """A `probe_summary` as a table: one row per method, one column per probe metric (its
    `PROBE_LABELS` name), each cell ``mean (lower, upper)``; empty without results."""
    if summary.empty:
        return pd.DataFrame()
    present = set(summary["metric"])
    table = aggregate_frame(summary, [m for m in PROBE_METRICS if m in present], methods)
    return table.rename(columns=PROBE_LABELS)


def probe_figure(summary: pd.DataFrame, empty: str = NO_PROBES) -> go.Figure:
    """A `probe_summary` as grouped bars: one group per probe metric, one bar per method, 95% CI
    whiskers, one panel per metric with its name on the axis (F1, held-out R^2, the collapse
    cosines beside random init and step 0, where the results have them), and the same split's
    random-init and majority-class overall F1 (random init's R^2) as reference lines
    (`sgi_lab.viz.probes.probe_bars`); ``empty`` is said without results."""
    summary = summary.rename(columns={"method": "objective"})
    scores = ", ".join(
        {"test F1": "F1", "held-out R²": "R²"}.get(axis, "cosines")
        for axis, _ in probe_panels(summary)
    )
    return probe_bars(
        summary,
        title=f"probe {scores or 'F1'} of the encoders behind each method (95% CIs over seeds)",
        empty=empty,
    )
