"""Probe F1 beside the ablation explorer's scores: how well linear probes read game state out of
the encoders behind each method (`sgi_lab.probes`), with 95% confidence intervals over seeds.

* `load_probe_scores` gives one row per probe result behind a method: a finetuning run's
  method gets the results of the pretraining run it started from (``sgi-lab probe`` wrote them
  into that run's ``probes.json``); the encoders of a probe study (pretraining runs, random
  encoders, an experiment folder) are methods named by their objective (``s_g``,
  ``random_init``);
* `probe_summary` turns them into the mean over seeds of each seed's mean over the selected
  games, per method and metric (`sgi_lab.analysis.probe_study.objective_summary`);
* `probe_table` and `probe_figure` show that summary: ``mean (lower, upper)`` cells, and bars
  per category with CI whiskers.
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
from sgi_lab.viz.probes import NO_PROBES, probe_bars
from sgi_lab.viz.tables import aggregate_frame

__all__ = [
    "PROBE_LABELS",
    "PROBE_METRICS",
    "load_probe_scores",
    "pretraining_probes",
    "probe_figure",
    "probe_summary",
    "probe_table",
]

PROBE_METRICS = ("overall", *CATEGORIES, "reward_f1", "random_init", "majority")
"""The explorer's probe columns: overall F1 (AtariARI's mean over variables), F1 per category,
the reward probe's F1, and the same split's random-init and majority-class overall F1."""
PROBE_LABELS = {
    "overall": "F1 overall",
    "agent_localization": "agent loc.",
    "small_object_localization": "small objects",
    "other_localization": "other loc.",
    "score_clock_lives_display": "score/clock/lives",
    "miscellaneous": "misc.",
    "reward_f1": "reward F1",
    "random_init": "random init (overall)",
    "majority": "majority (overall)",
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
        run_dirs: finetuning run folders (labelled as `sgi_lab.analysis.ablations.load_run_scores`
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
    return rows[["method", *[c for c in rows.columns if c != "method"]]]


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
    whiskers, and the same split's random-init and majority-class overall F1 as reference lines
    (`sgi_lab.viz.probes.probe_bars`); ``empty`` is said without results."""
    return probe_bars(
        summary.rename(columns={"method": "objective"}),
        title="probe F1 of the encoders behind each method (95% CIs over seeds)",
        empty=empty,
    )
