"""A finetuning study's page: `study_markdown`, the ``results.md`` tables every finetuning
experiment's report writes (`sgi_lab.experiments.experiment_report`), with its learning curves
drawn beside (`write_curves_figure`).

    from sgi_lab.experiments import load_graph
    from sgi_lab.studies.finetune_report import study_markdown

    folder = "outputs/experiments/minatar_objectives"
    print(study_markdown(folder, planned=180, graph=load_graph(folder)))
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from sgi_lab.analysis.probe_study import experiment_probe_frame
from sgi_lab.studies.finetune_budgets import budget_curve
from sgi_lab.studies.finetune_probes import (
    PROBE_COLUMNS,
    PROBE_WORDS,
    probe_finetune_table,
    probe_metric,
)
from sgi_lab.studies.finetune_study import (
    BUDGET_SUFFIX,
    complete_objectives,
    learning_curves,
    method_labels,
    normalization_of,
    objective_table,
    paired_table,
    paper_rank_correlation,
    per_game_returns,
    per_game_table,
    per_seed_markdown,
    scheme_agents,
    scheme_methods,
    study_runs,
    with_readouts,
)
from sgi_lab.viz.markdown import frame_markdown
from sgi_lab.viz.method_curves import method_curves_svg
from sgi_lab.viz.study_tables import (
    aggregates_markdown,
    budget_markdown,
    over_note,
    paired_markdown,
    returns_markdown,
)
from sgi_lab.viz.svg import write_svg

__all__ = ["CURVES_MARK", "curves_svg", "study_markdown", "write_curves_figure"]


def _probe_lines(graph: Any, table: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """`probe_finetune_table`'s section of the study's Markdown ([] without probes)."""
    if graph is None or table.empty:
        return []
    _, games = scheme_agents(runs, "reduced_lr")  # the games the IQMs are over
    probes = experiment_probe_frame(graph)
    metric = probe_metric(probes)  # the R^2 headline where the results have it, else F1
    frame, corr = probe_finetune_table(probes, table, metric, games=games)
    if frame.empty:
        return []
    rho = (
        "n/a (fewer than 3 objectives)"
        if corr["rho"] is None
        else (f"{corr['rho']:.2f} (p = {corr['p']:.2f}, {corr['n']} objectives)")
    )
    rows = frame.assign(
        probe=frame["probe"].map("{:.3f}".format), iqm=frame["iqm"].map("{:.3f}".format)
    ).rename(columns={"probe": PROBE_COLUMNS[metric]})
    return [
        "### Probes beside finetuning",
        "",
        f"Each encoder's linear probe on the game-state labels ({PROBE_WORDS[metric]}; random "
        "encoders for none), on the games the IQMs are over, beside its reduced-lr finetuning "
        f"IQM. Spearman rho between the two: {rho}.",
        "",
        frame_markdown(rows),
        "",
    ]


CURVES_MARK = "sgi-lab minatar_study.curves_svg"
"""Inside every figure `curves_svg` draws: what `study_markdown` may overwrite."""


def curves_svg(
    curves: pd.DataFrame,
    methods: Sequence[str] | None = None,
    panel: tuple[int, int] = (210, 150),
) -> str:
    """Learning curves (`learning_curves`) as a standalone SVG
    (`sgi_lab.viz.method_curves.method_curves_svg`): one panel per game, the training episodes'
    return against agent steps, one line (colour, then dash) per method, the mean over the seeds
    that have an episode in the bin; ``methods``: which, in that order, default all."""
    frame = curves.assign(method=method_labels(curves)) if len(curves) else curves
    return method_curves_svg(frame, methods, panel, CURVES_MARK)


def write_curves_figure(
    runs: pd.DataFrame,
    path: str | Path,
    methods: Sequence[str] | None = None,
    bin_steps: int = 2000,
) -> Path:
    """`curves_svg` of the finished agents of ``runs`` (binned every ``bin_steps`` agent
    steps) written to ``path`` atomically, only over a file `curves_svg` wrote.

    Raises:
        FileExistsError: ``path`` holds something else (it is left as it is).
    """
    curves = learning_curves(runs[runs["finished"]], bin_steps)
    return write_svg(path, curves_svg(curves, methods), CURVES_MARK, "a learning-curve figure")


def _objective_section(
    title: str, part: pd.DataFrame, scheme: str | None, reps: int, graph: Any
) -> list[str]:
    """One aggregates section of `study_markdown`: a scheme's objectives (``scheme`` None: SGI's
    schemes side by side), with the pretraining-budget curve, the probes and the paper's
    ranking where they apply."""
    running = pd.DataFrame()
    if scheme and not part.empty:
        # An objective still running would shrink every row to the games it has finished:
        # the complete ones are tabled over every game, the running ones beside them.
        complete = complete_objectives(part, scheme)
        if len(complete) >= 2 and set(complete) < set(scheme_agents(part, scheme)[0]["objective"]):
            running = objective_table(part, scheme, reps=reps)
            part = part[part["objective"].isin(complete)]
    table = objective_table(part, scheme, reps=reps) if not part.empty else pd.DataFrame()
    lines = [f"### {title}", ""]
    if table.empty:
        return lines + ["No game has finished on every seed for every method yet.", ""]
    lines += [over_note(table), "", aggregates_markdown(table), ""]
    if not running.empty:
        lines += [
            "With the objectives still running, over the games every objective in it has "
            "finished (" + ", ".join(sorted(set(running.index) - set(table.index))) + "):",
            "",
            over_note(running),
            "",
            aggregates_markdown(running),
            "",
        ]
    curve = budget_curve(table) if scheme else pd.DataFrame()
    if not curve.empty:
        lines += ["Pretraining budget (the same agents, by steps):", "", budget_markdown(curve), ""]
    if scheme:
        lines += _probe_lines(graph, table, part)
    correlation = paper_rank_correlation(table) if scheme else {"rho": None}
    if correlation["rho"] is not None:
        lines += [
            "Spearman correlation of the IQM ranking with the paper's tab:controls_hns "
            f"median HNS: rho = {correlation['rho']:.2f} (p = {correlation['p']:.2f}, "
            f"{correlation['n']} objectives).",
            "",
        ]
    return lines


def _seed_sections(
    runs: pd.DataFrame, readouts: pd.DataFrame, methods: Sequence[str] | None, per_seed: bool
) -> list[str]:
    """`study_markdown`'s tables seed by seed: each method against scratch, each agent."""
    lines = []
    pairs = paired_markdown(paired_table(readouts), methods)
    if pairs:
        lines += [
            "### Each method against the same seed from scratch",
            "",
            "Over every game and seed both finished: how many pairs end above, below and level "
            "with the agent of the same game and seed trained from scratch, under each readout "
            "(the final evaluation; the mean of every training episode), and the two-sided sign "
            "test's p (level pairs left out).",
            "",
            pairs,
            "",
        ]
    seeds = per_seed_markdown(runs, methods) if per_seed else ""
    if seeds:
        lines += [
            "### Each agent's final evaluation (mean raw return), each seed beside the same seed "
            "from scratch",
            "",
            seeds,
            "",
        ]
    return lines


def study_markdown(
    folder: str | Path,
    planned: int | None = None,
    reps: int = 2000,
    graph: Any = None,
    curves: str | Path | None = None,
    methods: Sequence[str] | None = None,
    per_seed: bool = False,
) -> str:
    """The study's tables as Markdown: how many agents finished (of ``planned``), the objectives'
    aggregates and probabilities of improvement over no pretraining, SGI's schemes, the
    per-game table and the correlation with the paper's ranking; with the experiment's
    ``graph`` (``sgi_lab.experiments.load_graph(folder)``), its encoders' probes beside their
    finetuning scores too; with ``curves`` (an .svg path), the finished agents' learning curves
    drawn there (`write_curves_figure`, ``methods`` in that order) and linked; each method
    against scratch seed by seed under both readouts (`paired_table`); with ``per_seed``, each
    agent's final evaluation beside the same seed's (`per_seed_markdown`)."""
    runs = study_runs(folder)
    if runs.empty:
        return f"No finetuning agent under {folder}/finetune yet.\n"
    # an experiment at another finetuning budget (``reduced_lr_2x``) reads as the study does
    runs = runs.assign(scheme=runs["scheme"].str.replace(BUDGET_SUFFIX, "", regex=True))
    lines = [
        f"Finished agents: {int(runs['finished'].sum())} of {planned or len(runs)} "
        f"({normalization_of(runs)}: 0 = uniform random, 1 = the reference score).",
        "",
    ]
    lines += _objective_section(
        "Objectives (reduced-lr finetuning)", runs, "reduced_lr", reps, graph
    )
    lines += _objective_section("SGI's finetuning schemes", scheme_methods(runs), None, reps, graph)
    readouts = with_readouts(runs)  # each run's metrics read once, for two tables
    per_game = per_game_table(runs)
    if not per_game.empty:
        lines += ["### Per game (mean normalised score over finished seeds)", ""]
        lines += [frame_markdown(per_game), ""]
        lines += [
            "### Per game, raw returns: the final evaluation and the mean of every training "
            "episode (how soon it learned); mean over seeds [95% t interval]",
            "",
            returns_markdown(per_game_returns(readouts)),
            "",
        ]
    if curves is not None:
        path = write_curves_figure(runs, curves, methods)
        lines += [
            "### Learning curves: the return of the training episodes ending in each 2,000-step "
            "bin, mean over seeds",
            "",
            f"![Training returns against agent steps, per game and method]({Path(path).name})",
            "",
        ]
    lines += _seed_sections(runs, readouts, methods, per_seed)
    return "\n".join(lines)
