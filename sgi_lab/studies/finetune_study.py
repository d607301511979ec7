"""A finetuning study's agents and numbers, read from its experiment folder
(`params/experiments/minatar_objectives.yaml` and every study of the same shape): each finished
agent's normalised score and both readouts, the objectives' aggregates with stratified
bootstrap CIs and each one's probability of improvement over no pretraining, the per-game
tables, each method against the same seed from scratch, the Spearman correlation of the
objectives' ranking with the paper's ``tab:controls_hns``, and learning curves. Its Markdown
page is `sgi_lab.studies.finetune_report`'s; budgets, `sgi_lab.studies.finetune_budgets`'.

An experiment folder holds ``finetune/<label>/<game>__s<seed>/`` per agent (`sgi_lab.experiments`),
where ``<label>`` is ``<scheme>__<objective>`` for a pretrained start (``reduced_lr__s_g``,
``naive__sgi``) or the config alone from scratch (``sgi_none``). Only agents whose run finished
with an evaluation count; the tables say how many did of how many planned, so an interim
reading is never mistaken for the study's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sgi_lab.analysis.probe_study import rank_correlation_with_paper
from sgi_lab.analysis.report import read_run
from sgi_lab.base.files import read_jsonl
from sgi_lab.metrics.aggregate import (
    aggregate_with_ci,
    mean_ci,
    probability_of_improvement_with_ci,
    seed_pairs,
)
from sgi_lab.metrics.minatar import normalized_score
from sgi_lab.runs.status import read_status
from sgi_lab.viz.study_tables import seed_table_markdown

__all__ = [
    "READOUTS",
    "check_readout",
    "complete_objectives",
    "learning_curves",
    "method_labels",
    "normalization_of",
    "objective_table",
    "paired_table",
    "paper_rank_correlation",
    "per_game_returns",
    "per_game_table",
    "per_seed_markdown",
    "readout_runs",
    "scheme_agents",
    "scheme_methods",
    "score_matrices",
    "split_label",
    "study_runs",
    "with_readouts",
]

SCRATCH = {"sgi_none": "none", "sgi_none_2x": "none"}
"""Finetuning labels that start from scratch -> the objective name ``none``."""


METRICS = ("iqm", "mean", "median")


BUDGET_SUFFIX = r"_\d+x$"
"""A finetuning budget's mark on a scheme's name (``reduced_lr_2x``: twice the study's steps)."""


def split_label(label: str) -> tuple[str, str]:
    """``(objective, scheme)`` of a finetuning folder's label: ``reduced_lr__s_g`` ->
    ``("s_g", "reduced_lr")``; ``sgi_none`` -> ``("none", "none")``."""
    if label in SCRATCH:
        return SCRATCH[label], "none"
    scheme, _, objective = label.partition("__")
    return (objective, scheme) if objective else (label, "none")


def study_runs(folder: str | Path) -> pd.DataFrame:
    """One row per agent folder under ``folder/finetune``: ``label, objective, scheme, game,
    seed, finished, score`` (the evaluation's mean return), ``normalized`` (its normalised
    score) and ``normalization`` (``MinAtar score`` or ``HNS``); unfinished agents have NaNs."""
    rows = []
    for label_dir in sorted((Path(folder) / "finetune").glob("*")):
        if not label_dir.is_dir():
            continue
        objective, scheme = split_label(label_dir.name)
        for agent in sorted(p for p in label_dir.iterdir() if (p / "status.json").exists()):
            run = read_run(agent)
            evaluation = run.evaluation
            finished = (read_status(agent) or {}).get("state") == "finished" and bool(evaluation)
            rows.append(
                {
                    "label": label_dir.name,
                    "objective": objective,
                    "scheme": scheme,
                    "game": run.game,
                    "seed": run.seed,
                    "finished": finished,
                    "score": evaluation.get("mean", np.nan) if finished else np.nan,
                    "normalized": _normalized(evaluation) if finished else np.nan,
                    # an unfinished agent has no evaluation to say which score it uses
                    "normalization": evaluation.get("normalization", "HNS") if finished else None,
                    "folder": str(agent),
                }
            )
    return pd.DataFrame(rows)


def _normalized(evaluation: dict[str, Any]) -> float:
    value = evaluation.get("normalized_score", evaluation.get("hns"))
    return np.nan if value is None else float(value)


def scheme_agents(runs: pd.DataFrame, scheme: str | None) -> tuple[pd.DataFrame, list[str]]:
    """The finished agents of one scheme (plus ``none``), and the games every one of their
    objectives has finished on every seed: the games the aggregates are over."""
    done = runs[runs["finished"]]
    if scheme is not None:
        done = done[(done["scheme"] == scheme) | (done["objective"] == "none")]
    if done.empty:
        return done, []
    seeds = sorted(done["seed"].unique())
    full = done.groupby(["objective", "game"])["seed"].nunique() == len(seeds)
    games_of = full[full].reset_index().groupby("objective")["game"].apply(set)
    return done, sorted(set.intersection(*games_of)) if len(games_of) else []


def complete_objectives(runs: pd.DataFrame, scheme: str | None = "reduced_lr") -> list[str]:
    """The objectives of one scheme (and ``none``) that have finished every game of the study on
    every seed: every (game, seed) any agent of the study runs. The others are still running."""
    if runs.empty:
        return []
    planned = set(zip(runs["game"], runs["seed"], strict=True))
    done, _ = scheme_agents(runs, scheme)
    finished = done.groupby("objective").apply(
        lambda part: set(zip(part["game"], part["seed"], strict=True)), include_groups=False
    )
    return sorted(o for o, pairs in finished.items() if pairs >= planned)


def score_matrices(runs: pd.DataFrame, scheme: str | None = "reduced_lr") -> dict[str, np.ndarray]:
    """``{objective: (seeds, games) normalised scores}`` over the finished agents of one scheme
    (plus ``none``), only games every included objective has finished on every seed of, so that
    every matrix has the same columns (rliable's stratified bootstrap needs that)."""
    done, common = scheme_agents(runs, scheme)
    if not common:
        return {}
    out = {}
    for objective, part in done[done["game"].isin(common)].groupby("objective"):
        if set(part["game"]) != set(common):
            continue
        table = part.pivot_table(index="seed", columns="game", values="normalized")
        out[objective] = table[common].to_numpy()
    return out


def objective_table(
    runs: pd.DataFrame, scheme: str | None = "reduced_lr", reps: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Per objective: IQM, mean and median normalised score with 95% stratified bootstrap CIs,
    and the probability of improvement over no pretraining with its CI, over the games every
    objective finished (``games``) and the seeds (``runs``)."""
    matrices = score_matrices(runs, scheme)
    if not matrices:
        return pd.DataFrame()
    aggregates = aggregate_with_ci(matrices, metrics=METRICS, reps=reps, seed=seed)
    table = aggregates.pivot_table(index="method", columns="metric", values="value")
    for bound in ("lower", "upper"):
        wide = aggregates.pivot_table(index="method", columns="metric", values=bound)
        table = table.join(wide.add_suffix(f"_{bound}"))
    pairs = [(k, "none") for k in matrices if k != "none"] if "none" in matrices else []
    if pairs:  # none alone (a study of other names) has nothing to improve on
        poi = probability_of_improvement_with_ci(matrices, pairs, reps=reps, seed=seed)
        poi = poi.set_index("x")[["value", "lower", "upper"]].add_prefix("p_improve_")
        table = table.join(poi)
    first = next(iter(matrices.values()))
    table["runs"] = first.shape[0]
    table["games"] = first.shape[1]
    return table.sort_values("iqm", ascending=False)


def per_game_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean normalised score over finished seeds, objective/scheme x game (``n`` seeds each)."""
    done = runs[runs["finished"]]
    if done.empty:
        return pd.DataFrame()
    done = done.assign(method=method_labels(done))
    return done.pivot_table(index="method", columns="game", values="normalized", aggfunc="mean")


def per_seed_markdown(runs: pd.DataFrame, methods: Sequence[str] | None = None) -> str:
    """Each finished agent's final evaluation (mean raw return), a row per game and seed and a
    column per method (``none``, ``sgi``, ``sgi (naive)``; ``methods`` picks and orders them),
    so that each seed can be read beside the same seed from scratch."""
    done = runs[runs["finished"]]
    if done.empty:
        return ""
    done = done.assign(method=method_labels(done))
    table = done.pivot_table(index=["game", "seed"], columns="method", values="score")
    return seed_table_markdown(table, methods)


def method_labels(frame: pd.DataFrame) -> pd.Series:
    """Each agent's method: its objective (reduced lr or scratch), else ``objective (scheme)``."""
    return pd.Series(
        np.where(
            frame["scheme"].isin(["reduced_lr", "none"]),
            frame["objective"],
            frame["objective"] + " (" + frame["scheme"] + ")",
        ),
        index=frame.index,
    )


def with_readouts(runs: pd.DataFrame) -> pd.DataFrame:
    """The finished agents with their ``method`` and both readouts in raw returns: ``eval``
    (the final evaluation's mean) and ``training`` (the mean of every training episode, read
    from each run's metrics.jsonl; a frame that has them already is returned as it is)."""
    if "training" in runs.columns:
        return runs
    done = runs[runs["finished"]]
    if done.empty:
        return done
    training = {}
    for run in done.itertuples():
        returns = [
            row.get("episode/return", row.get("charts/episodic_return"))
            for row in read_jsonl(Path(run.folder) / "metrics.jsonl")
        ]
        returns = [float(r) for r in returns if r is not None]
        training[run.Index] = float(np.mean(returns)) if returns else np.nan
    return done.assign(method=method_labels(done), training=pd.Series(training), eval=done["score"])


READOUTS = ("eval", "training")
"""How a finished agent is scored: its final evaluation, or the mean of its training episodes."""


def check_readout(readout: str) -> None:
    if readout not in READOUTS:
        raise ValueError(f"readout {readout!r}: not one of {', '.join(READOUTS)}")


def readout_runs(runs: pd.DataFrame, readout: str = "training") -> pd.DataFrame:
    """The finished agents of ``runs`` scored by ``readout`` (`READOUTS`, `with_readouts`):
    ``score`` and ``normalized`` replaced by that readout's raw return and its normalised
    score, so every table built on them (`objective_table`, `sgi_lab.studies.reruns`'
    baseline table) can be read a second way. An agent without a training episode is left
    out (``finished`` false) under ``training``.

    Raises:
        ValueError: an unknown ``readout`` (named, with the known ones).
    """
    check_readout(readout)
    done = with_readouts(runs)
    if done.empty:
        return done
    scores = done[readout].astype(float)
    normalized = normalized_score(list(done["game"]), scores.to_numpy())  # NaN stays NaN
    return done.assign(score=scores, normalized=normalized, finished=scores.notna())


def paired_table(
    runs: pd.DataFrame, reference: str = "none", readouts: Sequence[str] = ("eval", "training")
) -> pd.DataFrame:
    """Each method against ``reference`` seed by seed: over every (game, seed) both finished,
    under each readout (`with_readouts`), how many pairs end ``above``, ``below`` and
    ``level`` (equal returns) and the two-sided sign test's ``p`` (level pairs left out), with
    the ``games`` and ``pairs`` counted. A row per method and readout; unlike the aggregates it
    uses every game a method finished, not only the games every method shares. ``runs``:
    `study_runs` rows, or `with_readouts` of them (then read once for several tables)."""
    done = with_readouts(runs)
    if done.empty or reference not in set(done["method"]):
        return pd.DataFrame()
    rows = []
    for readout in readouts:
        wide = done.pivot_table(index=["game", "seed"], columns="method", values=readout)
        for method in [m for m in wide.columns if m != reference]:
            both = wide[[method, reference]].dropna()
            if both.empty:
                continue
            games = both.index.get_level_values("game").nunique()
            rows.append(
                {"method": method, "readout": readout, "reference": reference, "games": games}
                | seed_pairs(both[method], both[reference])
            )
    return pd.DataFrame(rows)


def per_game_returns(runs: pd.DataFrame) -> pd.DataFrame:
    """Two readouts of each finished agent, in raw returns, per method and game: the final
    evaluation's mean return (``eval``) and the mean return of every training episode of the
    run (``training``: the area under its learning curve, which counts how soon it learned),
    each as the mean over seeds with a 95% t interval (``method, game, readout, value, lower,
    upper, seeds``). A conclusion the normalised aggregates draw should hold under both."""
    done = with_readouts(runs)
    if done.empty:
        return pd.DataFrame()
    rows = []
    for (method, game), group in done.groupby(["method", "game"]):
        for readout in ("eval", "training"):
            value, lower, upper = mean_ci(group[readout])
            rows.append(
                {"method": method, "game": game, "readout": readout, "value": value}
                | {"lower": lower, "upper": upper, "seeds": int(group[readout].notna().sum())}
            )
    return pd.DataFrame(rows)


def paper_rank_correlation(table: pd.DataFrame, metric: str = "iqm") -> dict[str, Any]:
    """Spearman's rank correlation of the objectives' ``metric`` with the paper's
    ``tab:controls_hns`` median HNS (pretraining on Mixed Atari data, the ResNet): the objectives
    both have (``none`` is SGI-None)."""
    return rank_correlation_with_paper(table[metric])


def learning_curves(runs: pd.DataFrame, bin_steps: int = 1000) -> pd.DataFrame:
    """Training episodes' returns, binned by agent step: ``objective, scheme, game, seed,
    step`` (the bin's end: an episode ending at step 2,000 is in the bin (1,000, 2,000]) and
    ``return`` (mean of the episodes ending in it), from each agent's ``metrics.jsonl`` (rows
    with ``episode/return``)."""
    rows = []
    for run in runs.itertuples():
        path = Path(run.folder) / "metrics.jsonl"
        if not path.exists():
            continue
        for row in read_jsonl(path):
            value = row.get("episode/return", row.get("charts/episodic_return"))
            if value is None:
                continue
            rows.append(
                {
                    "objective": run.objective,
                    "scheme": run.scheme,
                    "game": run.game,
                    "seed": run.seed,
                    "step": max(1, -(-int(row["step"]) // bin_steps)) * bin_steps,
                    "return": float(value),
                }
            )
    if not rows:
        return pd.DataFrame()
    keys = ["objective", "scheme", "game", "seed", "step"]
    return pd.DataFrame(rows).groupby(keys, as_index=False)["return"].mean()


def scheme_methods(runs: pd.DataFrame) -> pd.DataFrame:
    """SGI's agents under each scheme as their own methods (``sgi (naive)``), with ``none``."""
    sgi = runs[runs["objective"].isin(["sgi", "none"])]
    suffix = sgi["scheme"].map(lambda s: "" if s in ("none", "reduced_lr") else f" ({s})")
    return sgi.assign(objective=sgi["objective"] + suffix)


def normalization_of(runs: pd.DataFrame) -> str:
    """The finished agents' normalisation (``MinAtar score``, ``HNS``), or both named."""
    names = sorted(runs.loc[runs["finished"], "normalization"].dropna().unique())
    return " and ".join(names) if names else "no agent finished yet"
