"""A probe experiment's report (``params/experiments/probes.yaml``): ``report.html``,
``results.csv``, ``results.aggregates.csv`` and ``results.md``, one summary per reading, and the
readings side by side (`sgi_lab.studies.probe_reread`) when the encoders were read several
ways; `results_markdown`, the study's numbers as docs/results/probes.md shows them."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pandas as pd

from sgi_lab.analysis.probe_study import (
    experiment_probe_frame,
    objective_summary,
    paper_rank_correlation,
    readout_groups,
    summary_table,
)
from sgi_lab.base.files import atomic_write_text
from sgi_lab.studies.probe_reread import reread_tables
from sgi_lab.viz.markdown import markdown_table

__all__ = ["results_markdown", "write_probe_report"]


def write_probe_report(graph: Any) -> Path:
    """A probe experiment's ``report.html``, ``results.csv`` (one row per probed encoder and
    game), ``results.aggregates.csv`` (per reading and objective, 95% CIs over seeds)
    and ``results.md`` (those numbers as markdown, for docs/results); an experiment that reads
    its encoders several ways gets one summary per reading (`reading_label`), the default's
    first."""

    out = Path(graph.out)
    frame = experiment_probe_frame(graph)
    if frame.empty:
        raise RuntimeError(f"{out}: no probe task has a result yet")
    groups = [(label, part, objective_summary(part)) for label, part in readout_groups(frame)]
    aggregates = pd.concat(
        [
            summary.assign(
                reading=label, readout=part["readout"].iloc[0], features=part["features"].iloc[0]
            )
            for label, part, summary in groups
        ],
        ignore_index=True,
    )
    atomic_write_text(out / "results.csv", frame.to_csv(index=False))
    atomic_write_text(out / "results.aggregates.csv", aggregates.to_csv(index=False))
    side_by_side = reread_tables(graph, frame) if len(groups) > 1 else []
    atomic_write_text(
        out / "results.md",
        "\n".join(
            (f"## Readout: {label}\n\n" if len(groups) > 1 else "")
            + results_markdown(part, summary)
            for label, part, summary in groups
        )
        + "".join(
            f"\n{'## Readings side by side' if i == 0 else ''}\n\n{text}\n\n"
            f"{markdown_table(table)}\n"
            for i, (text, table) in enumerate(side_by_side)
        ),
    )
    # lazy: plotly draws only here; `sgi-lab`'s parser imports this module through
    # `sgi_lab.experiments` on machines that may lack plotly (the GPU image trains without it)
    from sgi_lab.viz.probes import probe_bars

    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(graph.experiment.name)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>",
        f"<h1>Probes: {html.escape(graph.experiment.name)}</h1>",
        f"<p>{html.escape(graph.experiment.description)}; {len(frame)} probed encoders, games "
        f"{', '.join(sorted(frame['game'].unique()))}.</p>",
        "<p>across_categories: the mean of the category means (AtariARI's headline); overall: "
        "the mean over every variable.</p>",
    ]
    for index, (label, _, summary) in enumerate(groups):
        correlations = "".join(
            f"<p>Spearman rank correlation of {metric} F1 with the paper's tab:controls_hns "
            f"median HNS: {json.dumps({k: v for k, v in corr.items() if k != 'pairs'})}</p>"
            for metric in ("across_categories", "overall", "reward_f1")
            for corr in [paper_rank_correlation(summary, metric)]
        )
        parts += [
            f"<h2>Test F1 per objective, {html.escape(label)} "
            "(mean over seeds of the mean over games; 95% t CIs)</h2>",
            summary_table(summary).to_html(na_rep="-"),
            correlations,
            probe_bars(summary).to_html(full_html=False, include_plotlyjs=index == 0),
        ]
    if side_by_side:
        parts.append("<h2>Readings side by side</h2>")
    for text, table in side_by_side:
        parts += [f"<p>{html.escape(text)}</p>", table.to_html(na_rep="-")]
    parts += [
        "<h2>Every probed encoder</h2>",
        frame.to_html(index=False, float_format=lambda x: f"{x:.3f}", na_rep="-"),
        "</body></html>",
    ]
    path = out / "report.html"
    atomic_write_text(path, "\n".join(parts))
    return path


def results_markdown(frame: pd.DataFrame, summary: pd.DataFrame) -> str:
    """The study's numbers as markdown (for docs/results/probes.md): F1 per objective and
    category with 95% CIs over seeds, the baselines, and the Spearman correlation with the
    paper's tab:controls_hns (median and mean HNS)."""
    games = ", ".join(sorted(frame["game"].unique())) if not frame.empty else "-"
    seeds = summary.groupby("objective")["seeds"].max().to_dict() if not summary.empty else {}
    readouts = (
        ", ".join(sorted({f"{r} on {f}" for r, f in zip(frame["readout"], frame["features"])}))
        if {"readout", "features"} <= set(frame.columns)
        else "-"
    )
    parts = [
        f"Encoders probed: {len(frame)} (games: {games}; seeds per objective: {seeds}; "
        f"readout: {readouts}).",
        "",
        "Test scores, mean over seeds of each seed's mean over games [95% t interval over "
        "seeds]. F1 of the classified labels: across_categories is the mean of the category "
        "means (AtariARI's headline), overall the mean over every classified variable; "
        "state_r2 is the mean held-out R^2 of the labels read by regression (MinAtar's "
        "positions, counters and ramp: its headline), never averaged with an F1; "
        "coordinate_r2 and coordinate_within are the coordinates' ridge regressions (R^2, "
        "accuracy within +-2 units); cosine the collapse diagnostic (mean pairwise cosine of "
        "the projection):",
        "",
        markdown_table(summary_table(summary)),
        "",
    ]
    for metric in ("across_categories", "overall", "reward_f1"):
        for paper_metric in ("median", "mean"):
            corr = paper_rank_correlation(summary, metric, paper_metric)
            pairs = ", ".join(f"{n} {ours:.3f}/{paper:.3f}" for n, ours, paper in corr["pairs"])
            rho = "n/a" if corr["rho"] is None else f"{corr['rho']:.3f} (p = {corr['p']:.3f})"
            parts.append(
                f"Spearman rho of {metric} F1 with the paper's {paper_metric} HNS "
                f"(tab:controls_hns, n = {corr['n']}): {rho}; ours/paper: {pairs}"
            )
            parts.append("")
    return "\n".join(parts)
