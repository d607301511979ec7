"""The experiment's report: ``report.html`` and ``results.csv`` of its finished finetuning runs."""

from __future__ import annotations

import json
from pathlib import Path

from sgi_lab.analysis.report import format_aggregates, report
from sgi_lab.analysis.score_matrices import write_study_scores
from sgi_lab.base.files import atomic_write_text
from sgi_lab.experiments.data_report import write_data_report
from sgi_lab.experiments.graph import (
    Graph,
    is_data_experiment,
)
from sgi_lab.experiments.question import question_markdown
from sgi_lab.experiments.rereading import rereading_markdown, rereading_table
from sgi_lab.experiments.spec import (
    STATE_FILE,
)
from sgi_lab.experiments.study_cost import cost_markdown, graph_cost
from sgi_lab.runs.status import read_status
from sgi_lab.studies.finetune_report import study_markdown
from sgi_lab.studies.probe_report import write_probe_report

# -- the report ---------------------------------------------------------------------------------


def finished_agent_folders(graph: Graph) -> list[Path]:
    """Every finetuning agent folder of the graph that finished with an evaluation."""
    return [
        f
        for t in graph.tasks
        for f in t.agent_folders
        if (read_status(f) or {}).get("state") == "finished" and (f / "eval.json").exists()
    ]


def write_report(graph: Graph, reps: int = 2000) -> Path:
    """The experiment's report, by what it ran: finetuning (`write_finetune_report`), probes
    only (`write_probe_report`) or only data (`write_data_report`); returns report.html."""
    if is_data_experiment(graph):
        return write_data_report(graph)
    if not any(t.kind == "finetune" for t in graph.tasks):  # a probe study
        return write_probe_report(graph)
    return write_finetune_report(graph, reps)


def write_finetune_report(graph: Graph, reps: int = 2000) -> Path:
    """``report.html``, ``results.csv`` (per game), ``results.aggregates.csv``, ``scores.npz``
    and ``.json`` (`write_study_scores`) of the experiment's finished finetuning runs, beside
    the paper's column for each configuration,
    and ``results.md``: the study's tables (`sgi_lab.studies.finetune_report.study_markdown`:
    each objective's aggregates and probability of improvement over no pretraining, SGI's
    schemes, per game, per seed beside the same seed from scratch, raw returns under two
    readouts) with the learning curves drawn in ``curves.svg``.

    Returns:
        The path of report.html.
    """
    import html

    import pandas as pd

    # lazy: plotly draws only here; `sgi-lab`'s parser imports this package on a machine that
    # may lack plotly (the GPU image trains without it)
    from sgi_lab.viz import interval_plot, per_game_hns_figure

    out = graph.out
    runs = finished_agent_folders(graph)
    per_game, aggregates = report(runs, csv=out / "results.csv", reps=reps)
    write_study_scores(runs, out)  # scores.npz, scores.json: per seed, rliable's shape
    figures = []
    ours = aggregates[["method", "metric", "value", "lower", "upper"]]
    paper = aggregates.dropna(subset=["paper_same_games"]).assign(
        method=lambda d: d["paper_config"].astype(str) + " (paper, same games)",
        value=lambda d: d["paper_same_games"],
        lower=float("nan"),
        upper=float("nan"),
    )[["method", "metric", "value", "lower", "upper"]]
    both = pd.concat([ours, paper], ignore_index=True)
    metrics = [m for m in ("iqm", "median", "mean") if m in set(both["metric"])]
    figures.append(interval_plot(both, metrics=metrics, title="Aggregate HNS (95% CIs over runs)"))
    bars = per_game[["method", "game", "hns"]]
    paper_bars = per_game.dropna(subset=["paper_hns"]).assign(
        method=lambda d: d["paper_config"].astype(str) + " (paper)", hns=lambda d: d["paper_hns"]
    )[["method", "game", "hns"]]
    paper_bars = paper_bars.drop_duplicates(["method", "game"])
    figures.append(per_game_hns_figure(pd.concat([bars, paper_bars], ignore_index=True)))
    states = {}
    state_file = out / STATE_FILE
    if state_file.exists():
        states = json.loads(state_file.read_text()).get("tasks", {})
    failed = {k: v for k, v in states.items() if v.get("state") in ("failed", "blocked")}
    e = graph.experiment
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(e.name)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>",
        f"<h1>Experiment {html.escape(e.name)}</h1>",
        f"<p>{html.escape(e.description)}"
        + (f" (paper {html.escape(e.table)})" if e.table else "")
        + f"; {len(runs)} finetuning runs, {len(e.games)} games x {len(e.seeds)} seeds.</p>",
    ]
    if failed or graph.dropped:
        parts.append("<h2>Missing</h2><ul>")
        for task_id, entry in failed.items():
            parts.append(
                f"<li>{html.escape(task_id)}: {entry.get('state')} "
                f"(log {html.escape(str(entry.get('log', '')))})</li>"
            )
        parts += [f"<li>dropped: {html.escape(d)}</li>" for d in graph.dropped]
        parts.append("</ul>")
    parts.append("<h2>Aggregates (HNS; 95% stratified bootstrap CIs over runs)</h2>")
    parts.append(format_aggregates(aggregates).to_html(index=False, na_rep="-"))
    for i, fig in enumerate(figures):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))
    parts.append("<h2>Per game (mean raw score over runs; the paper's column beside)</h2>")
    parts.append(per_game.to_html(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"))
    parts.append("</body></html>")
    path = out / "report.html"
    atomic_write_text(path, "\n".join(parts))
    write_results_markdown(graph, reps)
    return path


EXPLORATORY = (
    "Everything below is exploratory: not declared before the run, not adjusted for the many "
    "intervals it draws from the same agents, and over whatever games and readouts each table "
    "names. It can suggest the next study's question; it cannot answer this one."
)


COST_NOTE = (
    "Training hours of the tasks that have run, from their own logged speeds "
    "(`sgi_lab.experiments.study_cost`: a population once; start-up, evaluation and time "
    "stopped not counted), on the machine and load each met."
)


def write_results_markdown(graph: Graph, reps: int = 2000) -> Path:
    """``results.md`` of a finetuning experiment (and ``curves.svg``, its learning curves): what
    docs/results pages are made of, regenerated with every report."""
    planned = sum(len(t.agent_folders) for t in graph.tasks if t.kind == "finetune")
    tables = study_markdown(
        graph.out,
        planned=planned,
        reps=reps,
        graph=graph,
        curves=graph.out / "curves.svg",
        per_seed=True,
    )
    e = graph.experiment
    head = [f"# {e.name}", "", e.description, ""]
    if e.question is not None:  # the declared answer first; every other table is exploratory
        head += [question_markdown(graph.out, e, figure=graph.out / "question.svg")]
        head += ["## Exploratory", ""]
        head += [EXPLORATORY, ""]
        head += ["### The declared contrasts, re-read", ""]
        head += [rereading_markdown(rereading_table(graph.out, e)), ""]
    cost = ["", "## What it cost", "", COST_NOTE, "", cost_markdown(graph_cost(graph))]
    path = graph.out / "results.md"
    atomic_write_text(path, "\n".join([*head, tables, *cost]))
    return path
