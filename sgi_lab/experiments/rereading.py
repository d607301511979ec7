"""A declared question's contrasts read other ways, to test a sentence before it is written: under
the other readout, on each game alone, on each half of the seeds, and from each draw of a pooled
arm alone. Exploratory by construction (not declared, not adjusted, no p values): a verdict that
holds only under the declared reading is said to, and one that turns under another is not
written as general.

The declared reading itself is `sgi_lab.experiments.question.question_table`'s; this module
re-cuts the same finished agents (`arm_runs`) and reuses its interval (`p_improvement_test`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from sgi_lab.experiments.design import arm_labels
from sgi_lab.experiments.question import (
    arm_runs,
    arm_scores,
    declared_question,
    question_games,
)
from sgi_lab.experiments.spec import Experiment
from sgi_lab.metrics.hypothesis import p_improvement_test
from sgi_lab.viz.markdown import table_markdown

__all__ = ["REREADING_NOTE", "declared_pairs", "rereading_markdown", "rereading_table"]

OTHER_READOUT = {"final": "training", "training": "final"}
READOUT_WORDS = {"final": "final evaluation", "training": "training episodes"}

MIN_HALF_SEEDS = 3
"""The seeds each half needs before the seed halves are a reading."""

REREADING_NOTE = (
    "Exploratory: the declared contrasts re-cut from the same agents, P(improvement) with its "
    "95 % stratified bootstrap interval, no p value and no adjustment. A verdict that holds "
    "in one row only is not written as general."
)


def declared_pairs(experiment: Experiment) -> list[tuple[str, str]]:
    """The question's contrasts in its order: each primary arm against the baseline, then the
    secondary pairs."""
    question = declared_question(experiment)
    pairs = [(arm, question.baseline) for arm in question.primary]
    return pairs + [(a, b) for a, b in question.secondary]


def _cell(runs: pd.DataFrame, pair: tuple[str, str], games: list[str], reps: int, seed: int):
    x, y = (arm_scores(runs, arm, games) for arm in pair)
    if x is None or y is None:
        return None
    test = p_improvement_test(x, y, reps, np.random.default_rng(seed))
    return test["value"], test["lower"], test["upper"], sum(test["runs_x"]), sum(test["runs_y"])


def _draw_runs(
    runs: pd.DataFrame, labels: dict[str, list[str]], pair: tuple[str, str], k: int
) -> pd.DataFrame | None:
    """``runs`` with each side of ``pair`` that pools draws (``labels``: `arm_labels`) cut to
    its ``k``-th draw (a side with one label stays whole); None when a pooled side has no
    ``k``-th draw or neither side pools."""
    keep = runs
    cut = False
    for arm in pair:
        if len(labels[arm]) > 1:
            if k >= len(labels[arm]):
                return None
            keep = keep[(keep["arm"] != arm) | (keep["label"] == labels[arm][k])]
            cut = True
    return keep if cut else None


def rereading_table(
    folder: str | Path, experiment: Experiment, reps: int | None = None, seed: int = 0
) -> pd.DataFrame:
    """A row per reading and declared contrast: ``reading`` (``declared``, the other readout,
    ``GAME only``, ``seeds ...``, ``draw dK``), ``arm``, ``against``, ``p_improvement``,
    ``lower``, ``upper``, ``runs`` ("x vs y"); readings a contrast cannot take (no such draw,
    an arm without runs) are left out. ``reps`` defaults to the question's resamples."""
    question = declared_question(experiment)
    games = question_games(experiment)
    labels = arm_labels(experiment)
    reps = question.resamples if reps is None else reps
    other = OTHER_READOUT[question.readout]
    reread = dataclasses.replace(experiment, question=dataclasses.replace(question, readout=other))
    runs, runs_other = arm_runs(folder, experiment), arm_runs(folder, reread)
    seeds = sorted(runs["seed"].unique()) if not runs.empty else []
    half = seeds[: len(seeds) // 2], seeds[len(seeds) // 2 :]
    readings: list[tuple[str, pd.DataFrame | None, list[str]]] = [
        (f"declared ({READOUT_WORDS[question.readout]})", runs, games),
        (READOUT_WORDS[other], runs_other, games),
        *[(f"{g.split('/')[-1]} only", runs, [g]) for g in games if len(games) > 1],
    ]
    if len(seeds) >= 2 * MIN_HALF_SEEDS:  # a half of fewer seeds has no interval to speak of
        for part in half:
            readings.append((f"seeds {part[0]}-{part[-1]}", runs[runs["seed"].isin(part)], games))
    rows = []
    for pair in declared_pairs(experiment):
        cuts = list(readings)
        draws = max(len(labels[arm]) for arm in pair)
        cuts += [(f"draw d{k} only", _draw_runs(runs, labels, pair, k), games) for k in
                 range(draws if draws > 1 else 0)]  # fmt: skip
        for reading, part, part_games in cuts:
            if part is None or part.empty:
                continue
            found = _cell(part, pair, part_games, reps, seed)
            if found is None:
                continue
            value, lower, upper, nx, ny = found
            rows.append(
                {"reading": reading, "arm": pair[0], "against": pair[1],
                 "p_improvement": value, "lower": lower, "upper": upper, "runs": f"{nx} vs {ny}"}
            )  # fmt: skip
    return pd.DataFrame(rows)


def rereading_markdown(table: pd.DataFrame) -> str:
    """`rereading_table` as one Markdown table: a row per reading, a column per contrast, each
    cell ``P [lower, upper]`` with a ``*`` where the interval leaves out 1/2; the note first."""
    if table.empty:
        return REREADING_NOTE + "\n\nNo contrast has finished runs on both sides yet."
    table = table.assign(contrast=table["arm"] + " vs " + table["against"])
    contrasts = list(dict.fromkeys(table["contrast"]))
    readings = list(dict.fromkeys(table["reading"]))
    cells = {(r.reading, r.contrast): r for r in table.itertuples()}
    rows = []
    for reading in readings:
        row = [reading]
        for contrast in contrasts:
            r = cells.get((reading, contrast))
            if r is None:
                row.append("-")
                continue
            star = "*" if r.lower > 0.5 or r.upper < 0.5 else ""
            row.append(f"{r.p_improvement:.2f} [{r.lower:.2f}, {r.upper:.2f}]{star}")
        rows.append(row)
    header = ["reading", *[f"`{c.split(' vs ')[0]}` vs `{c.split(' vs ')[1]}`" for c in contrasts]]
    return "\n".join([REREADING_NOTE, "", table_markdown(header, rows).rstrip()])
