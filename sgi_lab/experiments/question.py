"""A study's declared question, answered: the primary contrasts' P(improvement) over the baseline
with intervals and Holm-adjusted permutation p values, the secondary family the same way, and the
power the design had before it ran (`sgi_lab.metrics.power`).

An arm is a finetuning label of the experiment file (``sgi_none``, ``reduced_lr__sgi``), pooled
over its pretraining config's draws (`sgi_lab.experiments.spec.arm_labels`). Only the question's
games count; a table over another subset is exploratory by construction.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sgi_lab.experiments.design import NO_PRETRAINING, arm_labels
from sgi_lab.experiments.spec import Experiment, QuestionSpec
from sgi_lab.metrics.hypothesis import holm, iqm_of, p_improvement_test
from sgi_lab.metrics.power import (
    coverage,
    draw_studies,
    minimum_detectable_effect,
    power,
    seeds_needed,
)
from sgi_lab.studies.finetune_study import readout_runs, study_runs
from sgi_lab.viz.forest import ForestRow, forest_svg, write_forest_svg
from sgi_lab.viz.markdown import table_markdown

__all__ = [
    "arm_runs",
    "arm_scores",
    "declared_arms",
    "declared_question",
    "power_markdown",
    "planned_runs",
    "power_report",
    "progress_markdown",
    "question_figure",
    "question_games",
    "question_markdown",
    "question_plan",
    "question_progress",
    "question_table",
]

READOUT = {"final": "eval", "training": "training"}
"""The question's readout -> `sgi_lab.studies.finetune_study.READOUTS`'."""


def declared_question(experiment: Experiment) -> QuestionSpec:
    """The experiment's ``question:``; a ValueError naming the experiment where it has none."""
    if experiment.question is None:
        raise ValueError(f"experiment {experiment.name!r} declares no question:")
    return experiment.question


def declared_arms(question: QuestionSpec) -> list[str]:
    """The baseline, the primary arms and the secondary contrasts' arms, each once, in order."""
    return list(dict.fromkeys([question.baseline, *question.primary, *sum(question.secondary, [])]))


def question_games(experiment: Experiment) -> list[str]:
    """The games that count: the question's, else all the experiment's."""
    return list(declared_question(experiment).games or experiment.games)


def arm_runs(folder: str | Path, experiment: Experiment) -> pd.DataFrame:
    """The finished agents of every arm under ``folder`` (an experiment folder or its archive),
    scored by the question's readout, with an ``arm`` column; the question's games only."""
    runs = study_runs(folder)
    if runs.empty:
        return runs
    runs = readout_runs(runs, READOUT[declared_question(experiment).readout])
    label_arm = {label: arm for arm, labels in arm_labels(experiment).items() for label in labels}
    runs = runs.assign(arm=runs["label"].map(label_arm))
    return runs[
        runs["arm"].notna() & runs["finished"] & runs["game"].isin(question_games(experiment))
    ]


def arm_scores(runs: pd.DataFrame, arm: str, games: list[str]) -> list[np.ndarray] | None:
    """One array of normalised scores per game for ``arm``, or None while a game has none."""
    part = runs[runs["arm"] == arm]
    scores = [part.loc[part["game"] == g, "normalized"].to_numpy(float) for g in games]
    return scores if all(s.size for s in scores) else None


def question_table(
    folder: str | Path, experiment: Experiment, seed: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(contrasts, arms)``: a row per declared contrast (``family`` primary or secondary,
    ``arm``, ``against``, ``p_improvement`` with ``lower``/``upper``, permutation ``p``,
    ``p_holm`` within its family, ``reject`` at the question's alpha, ``runs``), NaN while an
    arm has not finished every game; and a row per arm with its runs and IQM."""
    question = declared_question(experiment)
    games = question_games(experiment)
    runs = arm_runs(folder, experiment)
    planned = planned_runs(experiment)
    rng = np.random.default_rng(seed)
    families = [("primary", [(a, question.baseline) for a in question.primary])]
    families.append(("secondary", [tuple(pair) for pair in question.secondary]))
    rows = []
    for family, pairs in families:
        found = []
        for arm, against in pairs:
            x = arm_scores(runs, arm, games) if not runs.empty else None
            y = arm_scores(runs, against, games) if not runs.empty else None
            row: dict[str, Any] = {"family": family, "arm": arm, "against": against}
            if x is not None and y is not None:
                test = p_improvement_test(x, y, question.resamples, rng)
                row.update(
                    p_improvement=test["value"],
                    lower=test["lower"],
                    upper=test["upper"],
                    p=test["p"],
                    runs=f"{sum(test['runs_x'])} vs {sum(test['runs_y'])}",
                    complete=sum(test["runs_x"]) == planned[arm] * len(games)
                    and sum(test["runs_y"]) == planned[against] * len(games),
                )
            found.append(row)
        complete = [r for r in found if r.get("complete")]
        # Holm only once every contrast of the family has all its runs: an interim answer
        # is not the declared one, and a partial family would adjust by too few contrasts
        if complete and len(complete) == len(found):
            for r, adjusted in zip(complete, holm([r["p"] for r in complete]), strict=True):
                r.update(p_holm=float(adjusted), reject=bool(adjusted <= question.alpha))
        rows += found
    arms = []
    for arm in declared_arms(question):
        scores = arm_scores(runs, arm, games) if not runs.empty else None
        n = 0 if runs.empty else int((runs["arm"] == arm).sum())
        arms.append({"arm": arm, "runs": n, "iqm": iqm_of(scores) if scores else np.nan})
    return pd.DataFrame(rows), pd.DataFrame(arms)


def planned_runs(experiment: Experiment) -> dict[str, int]:
    """Each arm's runs a game: the seeds of its finetuning labels together."""
    seeds = {
        f"{f.name}__{b}" if b != NO_PRETRAINING else f.name: f.seeds
        for f in experiment.finetune
        for b in f.pretrain
    }
    return {
        arm: sum(len(seeds.get(label) or experiment.seeds) for label in labels)
        for arm, labels in arm_labels(experiment).items()
    }


def question_progress(folder: str | Path, experiment: Experiment) -> pd.DataFrame | None:
    """While any arm of the declared question lacks finished runs: a row per arm (``arm``,
    ``runs``, ``planned``: over the question's games), and nothing about any score; None once
    every arm has all its planned runs (the declared answer can be read)."""
    question, games = declared_question(experiment), question_games(experiment)
    runs = arm_runs(folder, experiment)
    planned = planned_runs(experiment)
    rows = [
        {
            "arm": arm,
            "runs": 0 if runs.empty else int((runs["arm"] == arm).sum()),
            "planned": planned[arm] * len(games),
        }
        for arm in declared_arms(question)
    ]
    if all(r["runs"] >= r["planned"] for r in rows):
        return None
    return pd.DataFrame(rows)


def progress_markdown(progress: pd.DataFrame) -> str:
    """`question_progress` as a table and one line that no contrast is shown until every arm
    is complete (a pre-registered answer is read once, whole)."""
    done, planned = int(progress["runs"].sum()), int(progress["planned"].sum())
    rows = [[f"`{r.arm}`", str(r.runs), str(r.planned)] for r in progress.itertuples()]
    return "\n".join(
        [
            table_markdown(["arm", "finished runs", "planned"], rows).rstrip(),
            "",
            f"{done} of {planned} runs of the declared arms have finished. No contrast, interval "
            "or score of an arm is shown before the last of them: the declared answer is read "
            "once, whole.",
        ]
    )


def _interval(row: Any) -> str:
    value = getattr(row, "p_improvement", np.nan)
    if pd.isna(value):
        return "running"
    interim = "" if getattr(row, "complete", False) else " (interim)"
    return f"{value:.2f} [{row.lower:.2f}, {row.upper:.2f}]{interim}"


def _verdict(row: Any, alpha: float) -> str:
    if pd.isna(getattr(row, "p_holm", np.nan)):
        return "-"
    if not row.reject:
        return f"not separable from {row.against} at {alpha:g}"
    side = "above" if row.p_improvement > 0.5 else "below"
    return f"**{side}** {row.against}"


def _number(value: float) -> str:
    return "-" if pd.isna(value) else f"{value:.4f}"


def question_figure(contrasts: pd.DataFrame, alpha: float) -> str:
    """The contrasts as a forest plot (`sgi_lab.viz.forest`): each family's P(improvement) and
    interval, filled where the declared test rejects, the verdict beside it."""
    rows = [
        ForestRow(
            f"{r.arm} vs {r.against}",
            None if pd.isna(getattr(r, "p_improvement", np.nan)) else r.p_improvement,
            None if pd.isna(getattr(r, "lower", np.nan)) else r.lower,
            None if pd.isna(getattr(r, "upper", np.nan)) else r.upper,
            _verdict(r, alpha).replace("**", "")
            if not pd.isna(getattr(r, "p_holm", np.nan))
            else ("interim" if not pd.isna(getattr(r, "p", np.nan)) else "running"),
            strong=bool(getattr(r, "reject", False) is True),
        )
        for r in contrasts.itertuples()
    ]
    return forest_svg(rows, "The declared contrasts: P(improvement), 95 % interval")


def sealed_question_figure(experiment: Experiment, progress: pd.DataFrame) -> str:
    """The forest plot while the study runs (`question_progress` not None): a row per declared
    contrast with no value, and the runs finished against those planned in the title, so that
    a figure shows no interim value either."""
    question = declared_question(experiment)
    pairs = [(arm, question.baseline) for arm in question.primary]
    pairs += [(arm, against) for arm, against in question.secondary]
    rows = [ForestRow(f"{arm} vs {against}", None, None, None, "sealed") for arm, against in pairs]
    done, planned = int(progress["runs"].sum()), int(progress["planned"].sum())
    return forest_svg(rows, f"Sealed until every arm is complete: {done} of {planned} runs")


def question_markdown(
    folder: str | Path, experiment: Experiment, seed: int = 0, figure: str | Path | None = None
) -> str:
    """The pre-registered answer as Markdown: the question, a table per family (P(improvement)
    with its 95 % interval, the permutation p value and its Holm adjustment, the verdict at
    the declared alpha), then each arm's runs and IQM; with ``figure`` (an .svg path), the
    contrasts' forest plot written there (`question_figure`) and linked."""
    question = declared_question(experiment)
    contrasts, arms = question_table(folder, experiment, seed)
    if figure is not None:
        write_forest_svg(figure, question_figure(contrasts, question.alpha))
    games = ", ".join(g.removeprefix("minatar/") for g in question_games(experiment))
    lines = [
        "## The declared question",
        "",
        f"{question.text}",
        "",
        f"Endpoint: P(improvement) over `{question.baseline}` of each agent's "
        f"{'final evaluation' if question.readout == 'final' else 'training episodes'} "
        f"(normalised score), averaged over {games}; 95 % stratified bootstrap intervals and "
        f"two-sided stratified permutation p values ({question.resamples:,} resamples each), "
        f"Holm-adjusted within each family, family-wise error rate {question.alpha:g}.",
        "",
    ]
    for family in ("primary", "secondary"):
        part = contrasts[contrasts["family"] == family]
        if part.empty:
            continue
        rows = [
            [
                f"`{r.arm}`",
                f"`{r.against}`",
                _interval(r),
                _number(getattr(r, "p", np.nan)),
                _number(getattr(r, "p_holm", np.nan)),
                _verdict(r, question.alpha),
                r.runs if isinstance(getattr(r, "runs", None), str) else "-",
            ]
            for r in part.itertuples()
        ]
        header = ["arm", "against", "P(improvement) [95 % CI]", "p", "p (Holm)", "verdict"]
        lines += [f"### {family.capitalize()} contrasts", ""]
        lines += [table_markdown([*header, "runs"], rows), ""]
    if figure is not None:
        lines += [f"![the declared contrasts]({Path(figure).name})", ""]
    arm_rows = [
        [f"`{r.arm}`", str(r.runs), "-" if pd.isna(r.iqm) else f"{r.iqm:.3f}"]
        for r in arms.itertuples()
    ]
    lines += ["Each arm (the question's games):", ""]
    lines += [table_markdown(["arm", "runs", "IQM"], arm_rows), ""]
    return "\n".join(lines)


def power_report(
    pilot: str | Path,
    experiment: Experiment,
    pilot_arm: str | None = None,
    seeds: int | None = None,
    sims: int = 400,
    permutations: int = 1000,
    seed: int = 0,
    alpha: float | None = None,
) -> dict[str, Any]:
    """What the design can detect, from a pilot (an experiment folder or archive whose
    ``pilot_arm``, default the question's baseline, finished the question's games): power at
    the question's effect, the minimum detectable relative gain (80 % power, at Holm's first
    level alpha / primary contrasts), the seeds that effect needs, and the nominal 95 %
    intervals' coverage under no difference, at ``seeds`` runs per arm and game (default:
    the experiment's seeds); ``alpha`` tests each contrast at another level (a single
    contrast's 0.05, say) instead of Holm's first."""
    question = declared_question(experiment)
    games = question_games(experiment)
    runs = study_runs(pilot)
    label = pilot_arm or question.baseline
    runs = readout_runs(runs, READOUT[question.readout]) if not runs.empty else runs
    part = runs[(runs["label"] == label) & runs["finished"]] if not runs.empty else runs
    scores = [part.loc[part["game"] == g, "normalized"].to_numpy(float) for g in games]
    short = [g for g, s in zip(games, scores, strict=True) if s.size < 2]
    if short:
        raise ValueError(
            f"pilot {pilot}: {label!r} has fewer than 2 finished runs on {short}; a pilot needs "
            "at least 2 a game (--pilot-arm names another label)"
        )
    n = seeds or _seeds_per_game(experiment)
    alpha = alpha or question.alpha / len(question.primary)
    draws = draw_studies(scores, n, sims, permutations, seed)
    mde = minimum_detectable_effect(draws, alpha)
    needed = seeds_needed(
        scores, question.effect, alpha, sims=sims, permutations=permutations, seed=seed
    )
    pilot_iqm = iqm_of(scores)
    return {
        "pilot": str(pilot),
        "pilot_arm": label,
        "pilot_runs": [int(s.size) for s in scores],
        "pilot_iqm": pilot_iqm,
        "games": games,
        "seeds": n,
        "alpha": alpha,
        "holm": alpha == question.alpha / len(question.primary),
        "effect": question.effect,
        "power": power(draws, question.effect, alpha),
        "mde_relative": mde,
        "mde_iqm": None if mde is None else mde * pilot_iqm,
        "seeds_power": needed,
        "coverage": coverage(scores, n, sims=min(sims, 200), resamples=1000, seed=seed),
        "sims": sims,
        "permutations": permutations,
    }


def _seeds_per_game(experiment: Experiment) -> int:
    """Runs per arm and game: the experiment's seeds (a drawn arm deals them to its draws)."""
    return len(experiment.seeds)


def power_markdown(report: dict[str, Any]) -> str:
    """`power_report` as a short Markdown section."""
    mde = report["mde_relative"]
    needed = report["seeds_power"]
    reached = [k for k, v in needed.items() if v >= 0.8]
    cov = report["coverage"]
    pilot = re.sub(r".*/docs/", "docs/", report["pilot"])
    lines = [
        "## Power before the run",
        "",
        f"Pilot: `{report['pilot_arm']}` in `{pilot}` "
        f"({', '.join(map(str, report['pilot_runs']))} runs on "
        f"{', '.join(g.removeprefix('minatar/') for g in report['games'])}; IQM "
        f"{report['pilot_iqm']:.3f}). Simulated studies ({report['sims']}, "
        f"{report['permutations']} permutations each) draw each arm's runs from the pilot by a "
        "smoothed bootstrap, multiply the treatment's by 1 + effect, and apply the declared "
        f"test at level {report['alpha']:.4f}"
        f"{' (Holm' + chr(39) + 's first)' if report['holm'] else ''}.",
        "",
        table_markdown(
            ["at", "value"],
            [
                [
                    f"power for +{report['effect']:.0%} IQM, {report['seeds']} seeds",
                    f"{report['power']:.2f}",
                ],
                [
                    f"minimum detectable effect (80 % power), {report['seeds']} seeds",
                    "none up to +400 %"
                    if mde is None
                    else f"+{mde:.0%} IQM ({report['mde_iqm']:.3f} normalised score)",
                ],
                [
                    f"seeds a game for +{report['effect']:.0%} at 80 %",
                    f"{reached[0]}" if reached else f"more than {max(needed)}",
                ],
                [
                    f"coverage of nominal 95 % intervals, no difference, {report['seeds']} seeds",
                    f"P(improvement) {cov['p_improvement']:.2f}, IQM difference "
                    f"{cov['iqm_difference']:.2f}",
                ],
            ],
        ),
        "",
        "Power by seeds a game: " + ", ".join(f"{k}: {v:.2f}" for k, v in needed.items()) + ".",
        "",
    ]
    return "\n".join(lines)


def question_plan(experiment: Experiment) -> str:
    """The declared question as the dry run prints it: the arms (each with the finetuning
    labels it pools), the primary and secondary contrasts, the endpoint and the error rate."""
    question = experiment.question
    if question is None:
        return ""
    arms = arm_labels(experiment)
    planned = planned_runs(experiment)
    games = question_games(experiment)
    lines = [f"question: {question.text}", f"  games that count: {', '.join(games)}"]
    for arm in declared_arms(question):
        role = "baseline" if arm == question.baseline else "arm"
        lines.append(f"  {role} {arm}: {planned[arm]} runs a game ({', '.join(arms[arm])})")
    primary = ", ".join(f"{a} vs {question.baseline}" for a in question.primary)
    lines.append(
        f"  primary test: P(improvement) of the {question.readout} readout, stratified "
        f"permutation p, Holm over {len(question.primary)} at {question.alpha:g}: {primary}"
    )
    if question.secondary:
        pairs = ", ".join(f"{a} vs {b}" for a, b in question.secondary)
        lines.append(f"  secondary (a Holm family of its own): {pairs}")
    return "\n".join(lines)
