"""Each method's probability of improvement over a baseline: `improvement_over`, the one such
table (``sgi-lab report --baseline`` and the ablation explorer both ask it), on run folders or on
a frame of runs."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sgi_lab.analysis.report import _hns_matrix, _protocol_stamp, read_run, run_results
from sgi_lab.base.paths import name_hint
from sgi_lab.metrics import normalization_name, probability_of_improvement_with_ci, seed_pairs

__all__ = ["IMPROVEMENT_COLUMNS", "improvement_over", "scores_by_seed"]


IMPROVEMENT_COLUMNS = [
    "method", "baseline", "normalization", "games", "runs", "baseline_runs",
    "value", "lower", "upper", "note", "pairs", "above", "below", "level", "sign_p",
]  # fmt: skip


def improvement_over(
    runs: Sequence[str | Path] | pd.DataFrame,
    baseline: str,
    games: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    reps: int = 2_000,
    seed: int = 0,
    allow_unfinished: bool = False,
) -> pd.DataFrame:
    """Each method's probability of improvement over ``baseline`` (rliable's; Agarwal et al.
    2021), with a stratified bootstrap CI: the chance that a run of the method beats a run of
    the baseline on a game drawn at random from those compared (ties count half), on their
    normalised scores (HNS or the MinAtar score, never the two mixed). The one such table:
    ``sgi-lab report --baseline`` and the ablation explorer both ask it.

    Args:
        runs: finetuning run folders (read by `run_results`; a method is a run label,
            `read_run`), or a frame of runs with ``method, game, seed, hns, episodes,
            max_frames`` (`run_results`, `sgi_lab.analysis.run_scores.load_run_scores`).
        baseline: the method the others are compared with (a label among the runs').
        games: the games compared; None: for each method, every game both it and the
            baseline have. With a selection, a method (or the baseline) without runs on
            every selected game gets a note instead of a number.
        methods: the methods set against the baseline (default: every other one, in the
            runs' order; the baseline itself is skipped).
        reps: bootstrap resamples (runs of each method resampled within each game).
        seed: bootstrap seed.
        allow_unfinished: with run folders, include runs that never finished.

    Returns:
        One row per method: method, baseline, normalization, games (how many are compared),
        runs and baseline_runs (per game, the fewest), value, lower, upper (NaN with a
        ``note`` when there is nothing to compare: no common game, a selected game missing,
        another normalisation, or one side capped and the other not) and the seed-by-seed
        pairs (`sgi_lab.metrics.seed_pairs`).

    Raises:
        ValueError: no run has the label ``baseline``; the message lists the labels.
    """
    if not isinstance(runs, pd.DataFrame):
        runs = run_results(runs, allow_unfinished=allow_unfinished)
    present = list(dict.fromkeys(runs["method"]))
    if baseline not in present:
        scratch = [
            m
            for m, r in zip(runs["method"], runs["run"])
            if Path(r).is_dir() and not read_run(r).pretrained
        ]
        hint = name_hint(baseline, present, {"from scratch": scratch, "none": scratch})
        raise ValueError(
            f"--baseline {baseline!r} is none of the runs' methods: {hint}"
            f"methods: {', '.join(present)}"
        )
    base = runs[runs["method"] == baseline]
    rows = []
    for method in present if methods is None else methods:
        if method == baseline:
            continue
        own = runs[runs["method"] == method]
        row, compared, note = _improvement_setting(own, base, games)
        row = {"method": method, "baseline": baseline, **row}
        if note:
            rows.append({**row, "value": np.nan, "lower": np.nan, "upper": np.nan, "note": note})
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # unequal runs per game: trimmed
            x, y = _hns_matrix(own, compared), _hns_matrix(base, compared)
        (poi,) = probability_of_improvement_with_ci(
            {method: x, baseline: y}, pairs=[(method, baseline)], reps=reps, seed=seed
        ).to_dict("records")
        pairs = seed_pairs(scores_by_seed(own, compared), scores_by_seed(base, compared))
        rows.append(
            {**row, "runs": x.shape[0], "baseline_runs": y.shape[0], "note": "",
             **{k: poi[k] for k in ("value", "lower", "upper")}, **pairs}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=IMPROVEMENT_COLUMNS)


def _improvement_setting(
    own: pd.DataFrame, base: pd.DataFrame, games: Sequence[str] | None
) -> tuple[dict[str, Any], list[str], str]:
    """What `improvement_over` compares a method's runs ``own`` with the baseline's ``base``
    on: the row's counts so far, the games, and the note that says why not ("" when it is
    compared)."""
    if games is None:  # every game both have
        compared = sorted(set(own["game"]) & set(base["game"]))
        row: dict[str, Any] = {"games": len(compared)}
        missing = "" if compared else f"no game in common with {base['method'].iloc[0]}"
    else:  # the selection, whole or not at all
        compared = list(games)
        have = [g for g in compared if g in set(own["game"])]
        base_have = [g for g in compared if g in set(base["game"])]
        counts = [int((own["game"] == g).sum()) for g in have]
        row = {"games": len(have), "runs": min(counts) if counts else 0}
        missing = ""
        if len(base_have) < len(compared):
            name = base["method"].iloc[0]
            missing = f"{name} has runs on {len(base_have)} of {len(compared)} selected games"
        elif len(have) < len(compared):
            missing = f"runs on {len(have)} of {len(compared)} selected games"
    families = {normalization_name(g) for g in compared}
    row["normalization"] = ", ".join(sorted(families)) or None
    if missing:
        return row, compared, missing
    if len(families) > 1:
        mixed = "its games mix normalisations: compare Atari and MinAtar runs separately"
        return row, compared, mixed
    if _protocol_stamp(own)["capped"] != _protocol_stamp(base)["capped"]:
        return row, compared, "one side's evaluation was capped: not compared with whole games"
    return row, compared, ""


def scores_by_seed(runs: pd.DataFrame, games: Sequence[str]) -> pd.Series:
    """A method's runs on ``games`` (rows with ``game``, ``seed`` and ``hns``: `run_results`,
    `sgi_lab.analysis.run_scores.load_run_scores`) as normalised scores indexed by (game, seed),
    what `sgi_lab.metrics.seed_pairs` pairs."""
    chosen = runs[runs["game"].isin(games)]
    return chosen.set_index(["game", "seed"])["hns"]
