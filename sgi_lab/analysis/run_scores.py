"""Our finetuning runs as scores: run folders found (an experiment folder's finished agents, or
a glob), each run's ``eval.json`` read into one row, their aggregates with stratified bootstrap
CIs, each method's probability of improvement over a baseline, and the evaluation protocols
they were scored under (a capped run says so in its label)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from sgi_lab.analysis.improvement import IMPROVEMENT_COLUMNS, improvement_over
from sgi_lab.analysis.report import read_run
from sgi_lab.envs import canonical_env_game
from sgi_lab.metrics import (
    aggregate_scores,
    aggregate_with_ci,
    normalization_name,
    normalized_score,
    protocol_of,
)
from sgi_lab.metrics.protocol import FRAME_SKIP, PAPER_PROTOCOL, EvalProtocol, comparability_note
from sgi_lab.runs.status import run_folders
from sgi_lab.viz.report_tables import seed_pair_cells

__all__ = [
    "DEFAULT_EXPLORER_METRICS",
    "CAPPED_MARK",
    "EXPERIMENT_STATE",
    "IMPROVEMENT_COLUMNS",
    "capped_label",
    "capped_steps",
    "experiment_finetune_folders",
    "find_runs",
    "improvement_frame",
    "improvement_over",
    "load_run_scores",
    "method_protocols",
    "mixed_families_note",
    "run_aggregates",
    "scores_protocol_note",
    "selection_normalization",
]


DEFAULT_EXPLORER_METRICS = ("iqm", "median", "mean")
"""The aggregates shown unless others are asked for."""
EXPERIMENT_STATE = "experiment.json"
"""The file that marks an experiment folder (``sgi-lab experiment``): its task states."""


def find_runs(root: str | os.PathLike = "outputs/runs", pattern: str = "*") -> list[Path]:
    """Evaluated runs under ``root``: its run folders (`sgi_lab.runs.status.run_folders`: ``root``
    itself when it is one, else every run below it) with an eval.json, whose folder name
    matches ``pattern``.

    ``root`` may be an experiment folder (``outputs/experiments/NAME``, written by
    ``sgi-lab experiment``): then only its finetuning agents are returned, those of the
    finetuning tasks its ``experiment.json`` lists (each ``<ft>__<pretraining>/<Game>__s<seed>``),
    and never a run copied beside them.
    """
    folders = experiment_finetune_folders(root)
    searched = folders if folders is not None else [Path(root)]
    return sorted(
        {
            run
            for folder in searched
            for run in run_folders(folder)
            if (run / "eval.json").is_file() and run.match(pattern)
        }
    )


def experiment_finetune_folders(root: str | os.PathLike) -> list[Path] | None:
    """The finetuning task folders of an experiment folder (from its ``experiment.json``), or
    None when ``root`` is not an experiment folder. Folders are taken relative to ``root``, so
    an experiment folder that was moved or copied still finds its runs."""
    root = Path(root)
    try:
        state = json.loads((root / EXPERIMENT_STATE).read_text())
    except (OSError, ValueError):
        return None
    tasks = state.get("tasks") if isinstance(state, dict) else None
    if not isinstance(tasks, dict):
        return None
    # A population split into parts (max_agents) has tasks ``finetune/X/part1of2``, ...: all of
    # them write into finetune/X.
    folders = [
        root / re.sub(r"/part\d+of\d+$", "", task_id)
        for task_id, task in tasks.items()
        if task.get("kind") == "finetune"
    ]
    return list(dict.fromkeys(folders))


def load_run_scores(
    run_dirs: Sequence[str | os.PathLike] | dict[str, Sequence[str | os.PathLike]],
) -> pd.DataFrame:
    """One row per evaluated run: ``method, run, game, seed, score, hns, normalization``.

    Args:
        run_dirs: finetuning run folders (labelled by `sgi_lab.analysis.report.read_run`), or
            ``{method: folders}``.

    Returns:
        ``score`` is the mean raw evaluation return (eval.json's ``mean``); ``hns`` its
        normalised score, named by ``normalization``: HNS for Atari, the MinAtar score
        (`sgi_lab.metrics.minatar`) for a MinAtar game; measured over
        ``episodes`` episodes capped at ``max_frames`` raw frames (None: no cap or not recorded);
        ``paper_config`` and ``paper_reason`` are the run's paper column and why
        (`sgi_lab.analysis.paper_column.paper_column`); folders without an eval.json are skipped.
    """
    if isinstance(run_dirs, dict):
        labelled = [(m, read_run(p)) for m, paths in run_dirs.items() for p in paths]
    else:
        labelled = [(run.label, run) for run in map(read_run, run_dirs)]
    records = []
    for method, run in labelled:
        if not run.evaluation:
            continue
        evaluation = run.evaluation
        score = float(evaluation["mean"] if "mean" in evaluation else np.mean(evaluation["scores"]))
        column = run.paper_column
        records.append(
            {
                "method": method,
                "run": run.path.name,
                "game": run.game,
                "seed": run.seed or 0,
                "score": score,
                "hns": float(normalized_score(run.game, score)),
                "normalization": normalization_name(run.game),
                "episodes": evaluation.get("episodes", len(evaluation.get("scores") or []) or None),
                "max_frames": evaluation.get("max_frames"),
                "paper_config": column.config,
                "paper_reason": column.reason,
            }
        )
    columns = ["method", "run", "game", "seed", "score", "hns", "normalization", "episodes"]
    columns += ["max_frames", "paper_config", "paper_reason"]
    return pd.DataFrame(records, columns=columns)


def scores_protocol_note(scores: pd.DataFrame) -> str | None:
    """The evaluation protocol of ``scores`` (`load_run_scores`) and whether the paper's
    numbers are comparable with it (`sgi_lab.metrics.comparability_note`); None without runs."""
    if scores.empty:
        return None
    evaluations = [
        {"episodes": e, "max_frames": None if pd.isna(m) else int(m)}
        for e, m in zip(scores["episodes"], scores["max_frames"])
        if not pd.isna(e)
    ]
    return comparability_note(protocol_of(evaluations))


CAPPED_MARK = "capped at"


def capped_steps(protocol: EvalProtocol | None) -> int | None:
    """The agent-step cap of an evaluation whose episodes were cut shorter than the paper's
    (108,000 frames), else None: a cut game scores what it had when it was cut (Pong: -13
    after 500 steps rather than -21), so such a score is no result beside uncut ones."""
    if protocol is None or protocol.max_frames is None:
        return None
    if protocol.max_frames >= PAPER_PROTOCOL.max_frames:
        return None
    return protocol.max_frames // FRAME_SKIP


def method_protocols(scores: pd.DataFrame) -> dict[str, EvalProtocol | None]:
    """``{method: the evaluation protocol of its runs}`` (the weakest when they differ)."""
    out: dict[str, EvalProtocol | None] = {}
    for method, part in scores.groupby("method", sort=False):
        out[str(method)] = protocol_of(
            [
                {"episodes": e, "max_frames": None if pd.isna(m) else int(m)}
                for e, m in zip(part["episodes"], part["max_frames"])
                if not pd.isna(e)
            ]
        )
    return out


def capped_label(method: str, protocol: EvalProtocol | None) -> str:
    """``method``, marked ``"<method> (capped at 500 steps)"`` when its evaluation was capped
    (`capped_steps`): the name every table and figure shows."""
    steps = capped_steps(protocol)
    return method if steps is None else f"{method} ({CAPPED_MARK} {steps:,} steps)"


def selection_normalization(games: Sequence[str]) -> str | None:
    """The normalised score an aggregate over ``games`` is in: ``"HNS"`` (Atari games) or
    ``"MinAtar score"`` (`sgi_lab.metrics.minatar`); None when they mix the two (no aggregate
    then) or there is no game."""
    families = {normalization_name(g) for g in games}
    return families.pop() if len(families) == 1 else None


def mixed_families_note(games: Sequence[str]) -> str:
    """Why nothing is aggregated over ``games`` that mix Atari and MinAtar games."""
    minatar = [g for g in games if normalization_name(g) != "HNS"]
    return (
        f"the selected games mix Atari (HNS) and MinAtar ({', '.join(minatar)}: the MinAtar "
        "score) games: one aggregate never mixes the two; select games of one family"
    )


def _method_matrix(scores: pd.DataFrame, games: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """(runs, games) normalised-score matrix (HNS, or the MinAtar score) of one method over the
    selected games it has, runs trimmed to the smallest count per game (the stratified
    bootstrap needs a full matrix)."""
    present = [g for g in games if g in set(scores["game"])]
    if not present:
        return np.zeros((0, 0)), []
    per_game = {
        g: scores[scores["game"] == g].sort_values("seed")["score"].to_numpy() for g in present
    }
    runs = min(len(v) for v in per_game.values())
    raw = np.stack([per_game[g][:runs] for g in present], axis=1)
    return np.asarray(normalized_score(present, raw), dtype=float), present


def run_aggregates(
    scores: pd.DataFrame,
    games: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    metrics: Sequence[str] = DEFAULT_EXPLORER_METRICS,
    reps: int = 2_000,
    seed: int = 0,
) -> tuple[pd.DataFrame, list[str]]:
    """Aggregate normalised scores (HNS, or the MinAtar score: `selection_normalization`) of
    our methods with stratified bootstrap CIs over their runs; games mixing the two give no
    aggregate, and a note says why.

    Args:
        scores: `load_run_scores` output.
        games: games to aggregate over (default: all in ``scores``).
        methods: methods to keep (default: all).
        metrics: names from `sgi_lab.metrics.METRICS`.
        reps: bootstrap resamples.
        seed: bootstrap seed.

    Returns:
        ``(tidy frame with method, metric, value, lower, upper, runs, games, source; notes)``:
        a method without runs on every selected game is left out (a 1-game score is no
        26-game aggregate), and a note says which games it has.
    """
    columns = ["method", "metric", "value", "lower", "upper", "runs", "games", "source"]
    if scores.empty:
        return pd.DataFrame(columns=columns), []
    games = [canonical_env_game(g) for g in (games or list(dict.fromkeys(scores["game"])))]
    methods = list(methods) if methods is not None else list(dict.fromkeys(scores["method"]))
    frames, notes = [], []
    families = sorted({normalization_name(g) for g in games})
    if len(families) > 1:  # one aggregate never mixes HNS with the MinAtar score
        return pd.DataFrame(columns=columns), [mixed_families_note(games)]
    for method in methods:
        matrix, present = _method_matrix(scores[scores["method"] == method], games)
        if not present:
            notes.append(f"{method}: no run on the selected games")
            continue
        if len(present) < len(games):
            # An aggregate over fewer games is another number: never beside the others.
            notes.append(
                f"{method}: runs on {len(present)} of {len(games)} selected games "
                f"({', '.join(present)}): left out of the aggregates; select only its games "
                "to compare it"
            )
            continue
        if matrix.shape[0] > 1:
            df = aggregate_with_ci({method: matrix}, metrics, reps=reps, seed=seed)
        else:  # one run per game: a bootstrap over runs has nothing to resample
            df = aggregate_scores({method: matrix}, metrics).assign(lower=np.nan, upper=np.nan)
        frames.append(df.assign(runs=matrix.shape[0], games=len(present), source="ours"))
    if not frames:
        return pd.DataFrame(columns=columns), notes
    return pd.concat(frames, ignore_index=True)[columns], notes


def improvement_frame(improvement: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """`improvement_over` as the explorer's table: ``Method``, ``P(> baseline)`` as ``value
    (lower, upper)``, runs and games, and the note."""
    baseline = improvement["baseline"].iloc[0] if len(improvement) else "baseline"
    cells = [
        "" if pd.isna(v) else f"{v:.{digits}f} ({lo:.{digits}f}, {hi:.{digits}f})"
        for v, lo, hi in zip(improvement["value"], improvement["lower"], improvement["upper"])
    ]
    return pd.DataFrame(
        {
            "Method": improvement["method"],
            f"P(> {baseline})": cells,
            "runs per game": improvement["runs"],
            "games": improvement["games"],
            "same seed: above / below / level (sign test p)": seed_pair_cells(improvement),
            "note": improvement["note"],
        }
    )
