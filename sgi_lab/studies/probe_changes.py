"""Where a probe drop comes from, as tables: each objective's change of probe F1 from its own
initialisation (paired, step by step), and the readout table (every final encoder read by each
readout and feature choice, beside random encoders on the same frames). The probe-drop
attribution study (``params/experiments/probes_attribution.yaml``) is made of them
(`attribution_markdown`), the published study's re-read too (`sgi_lab.studies.probe_reread`).

Which objectives the study compares is read from its run names (``i_seed0``, ``sgi_noaug_seed1``:
the objective is the name without ``_seedN``), so the same functions read any experiment whose
pretraining runs probe themselves (``probe_every``) and whose probe configs name readouts.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from sgi_lab.analysis.probe_study import (
    experiment_probe_frame,
    objective_summary,
    paired_changes,
    readout_groups,
    training_probe_curves,
)
from sgi_lab.metrics.aggregate import mean_ci
from sgi_lab.studies.probe_seed_tests import SEED_LEVEL_NOTE, reading_seed_table
from sgi_lab.viz.markdown import format_interval, markdown_table

__all__ = [
    "CHANGE_METRICS",
    "READOUT_METRICS",
    "attribution_markdown",
    "change_curve_table",
    "change_table",
    "paired_readout_table",
    "per_run_table",
    "readout_table",
]

CHANGE_METRICS = (
    "across_categories",
    "overall",
    "agent_localization",
    "small_object_localization",
    "coordinate_r2",
    "reward_f1",
)
"""What the paired-change table shows: AtariARI's headline (the mean of category means), every
variable's mean, the two localisation categories where SGI lost most, the coordinates' ridge R²
(information a linear map reads whatever the code's classes) and the reward probe."""

READOUT_METRICS = ("across_categories", "agent_localization", "coordinate_r2", "reward_f1")


def change_table(
    runs: Iterable[str | os.PathLike],
    metrics: Sequence[str] = CHANGE_METRICS,
    step: int | None = None,
) -> pd.DataFrame:
    """Per objective (rows) and metric (columns): the mean change from each run's own step-0
    probe at ``step`` (default: the last step of the longest run; runs that have not reached it
    yet are left out, and ``seeds`` says how many are in), with its 95% t interval over seeds,
    as text; beside them the step-0 mean (``start``) of the first metric.

    Raises:
        ValueError: no run probed itself; a run without a step-0 probe (`paired_changes`).
    """
    curves = training_probe_curves(runs)
    if curves.empty:
        raise ValueError("no pretraining run here probed itself (probe_every)")
    if step is None:
        step = int(curves["step"].max())
    reached = curves.loc[curves["step"] == step, "run"].unique()
    curves = curves[curves["run"].isin(reached)]
    table: dict[str, dict[str, str]] = {}
    for metric in metrics:
        if metric not in curves or curves[metric].isna().all():
            continue
        changes = paired_changes(curves, metric)
        for row in changes[changes["step"] == step].to_dict("records"):
            cells = table.setdefault(row["objective"], {"seeds": str(row["seeds"])})
            cells[metric] = format_interval(row["value"], row["lower"], row["upper"], signed=True)
    start = curves[curves["step"] == 0].groupby("objective")[metrics[0]].mean()
    frame = pd.DataFrame.from_dict(table, orient="index")
    frame.insert(0, f"start ({metrics[0]})", start.reindex(frame.index).map("{:.3f}".format))
    frame.index.name = f"objective (change at step {step})"
    return frame


def change_curve_table(
    runs: Iterable[str | os.PathLike], metric: str = "across_categories"
) -> pd.DataFrame:
    """``metric``'s paired change from step 0 (`paired_changes`) per objective (rows) and step
    (columns), as text with 95% t intervals over the seeds that reached each step."""
    curves = training_probe_curves(runs)
    if curves.empty:
        raise ValueError("no pretraining run here probed itself (probe_every)")
    changes = paired_changes(curves, metric)
    cells = {
        (row["objective"], int(row["step"])): format_interval(
            row["value"], row["lower"], row["upper"], signed=True
        )
        for row in changes.to_dict("records")
    }
    frame = pd.Series(cells).unstack()
    frame.index.name = f"objective ({metric}, change from step 0)"
    return frame


def per_run_table(
    runs: Iterable[str | os.PathLike], metric: str = "across_categories"
) -> pd.DataFrame:
    """``metric`` of every run (rows) at every probed step (columns), to three decimals: the
    values the paired intervals summarise."""
    curves = training_probe_curves(runs)
    if curves.empty:
        raise ValueError("no pretraining run here probed itself (probe_every)")
    frame = curves.pivot_table(index="run", columns="step", values=metric).round(3)
    frame.index.name = f"run ({metric})"
    return frame


def readout_table(
    graph: Any, metric: str = "across_categories", frame: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per objective (rows, random init first) and reading (columns): ``metric`` of the
    experiment's finished probe tasks (``frame``: their `experiment_probe_frame`, when the
    caller has it), mean over seeds with a 95% t interval, as text; ``n`` in each cell's
    brackets when fewer than 2 seeds finished. A last row, ``majority class``, holds the
    majority-class baseline of the same splits (the mean over games of each game's split:
    one value, no interval) where the probes recorded it for ``metric``."""
    frame = experiment_probe_frame(graph) if frame is None else frame
    if frame.empty:
        return pd.DataFrame()
    cells: dict[str, dict[str, str]] = {}
    baseline = f"majority_{metric}"
    for column, group in readout_groups(frame):
        summary = objective_summary(group.drop_duplicates(["objective", "seed", "game"]), [metric])
        for row in summary.to_dict("records"):
            cell = format_interval(row["value"], row["lower"], row["upper"])
            if row["seeds"] < 2:
                cell += f" (n = {row['seeds']})"
            cells.setdefault(row["objective"], {})[column] = cell
        if baseline in group and group[baseline].notna().any():
            # every encoder probed on a game's split has the same majority baseline
            per_game = group.dropna(subset=[baseline]).groupby("game")[baseline].first()
            cells.setdefault("majority class", {})[column] = f"{per_game.mean():.3f}"
    out = pd.DataFrame.from_dict(cells, orient="index")
    order = ["random_init"] + sorted(
        i for i in out.index if i not in ("random_init", "majority class")
    )
    order.append("majority class")
    out = out.reindex([i for i in order if i in out.index])
    out.index.name = f"objective ({metric})"
    return out


def paired_readout_table(
    graph: Any, metric: str = "across_categories", frame: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per objective (rows) and reading (columns): each final encoder's ``metric`` minus
    that of the random encoder of its own seed (its initialisation: a run of seed s starts from
    the weights of random encoder s) read the same way, mean over seeds with a 95% t interval,
    and how many of the pairs fell (``3/3 lower``): the attribution's test under every readout,
    not only the least squares of the curves. ``frame``: as `readout_table`."""
    frame = experiment_probe_frame(graph) if frame is None else frame
    if frame.empty or "random_init" not in set(frame["objective"]):
        return pd.DataFrame()
    cells: dict[str, dict[str, str]] = {}
    for column, part in readout_groups(frame):
        group = part.groupby(["objective", "seed", "game"], sort=False)[metric].mean()
        if "random_init" not in group.index.get_level_values(0):
            continue
        start = group.loc["random_init"]
        for objective in group.index.get_level_values(0).unique():
            if objective == "random_init":
                continue
            # paired game by game (a seed's games may not all have finished), then each
            # seed's mean over its games
            by_game = (group.loc[objective] - start).dropna()
            change = by_game.groupby(level="seed").mean().to_numpy()
            if len(change) == 0:
                continue
            cell = format_interval(*mean_ci(change), signed=True)
            cells.setdefault(objective, {})[column] = (
                f"{cell}, {int((change < 0).sum())}/{len(change)} lower"
            )
    out = pd.DataFrame.from_dict(cells, orient="index")
    out = out.reindex(sorted(out.index))
    out.index.name = f"objective ({metric}, minus its seed's random init)"
    return out


def attribution_markdown(graph: Any) -> str:
    """The study's tables as Markdown, from its experiment graph
    (``sgi_lab.experiments.load_graph(folder)``): the paired changes, the headline step by step,
    every run, then the readout table for each of `READOUT_METRICS`."""
    runs = [t.folder for t in graph.tasks if t.kind == "pretrain" and t.folder.is_dir()]
    parts = [
        "Change of each run's probe from its own step-0 probe (least squares, renormalised "
        "conv map), mean over seeds [95% t interval over seeds]:",
        "",
        markdown_table(change_table(runs)),
        "",
        "The headline (the mean of AtariARI's category means) step by step:",
        "",
        markdown_table(change_curve_table(runs)),
        "",
        "Each run, step by step:",
        "",
        markdown_table(per_run_table(runs)),
        "",
    ]
    for metric in ("across_categories", "agent_localization"):
        table = paired_readout_table(graph, metric)
        if table.empty:
            continue
        parts += [
            f"{metric} of each final encoder minus its own seed's random encoder, read the same "
            "way, mean over seeds [95% t interval], and how many pairs fell:",
            "",
            markdown_table(table),
            "",
        ]
    seeds = reading_seed_table(experiment_probe_frame(graph))
    if not seeds.empty:
        parts += [
            "The objectives with inverse dynamics against those without, per reading, tested "
            f"over seeds (exploratory). {SEED_LEVEL_NOTE}",
            "",
            markdown_table(seeds),
            "",
        ]
    for metric in READOUT_METRICS:
        table = readout_table(graph, metric)
        if table.empty:
            continue
        parts += [
            f"{metric} of the final encoders by readout and features, mean over seeds [95% t "
            "interval]:",
            "",
            markdown_table(table),
            "",
        ]
    return "\n".join(parts)
