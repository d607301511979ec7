"""The published probe study re-read (``params/experiments/probes.yaml``): every
encoder of the objective ablation read several ways (the published least squares on 10k frames,
least squares on all frames, on the projection y, the logistic probe), as tables whose columns
are the readings, so that a conclusion can be checked against each of them.

`reread_markdown` writes what ``docs/results/probes.md`` shows: per objective and reading, the
headline F1 and its change from the random encoder each run started from (paired by seed), the
reward probe, the objectives with inverse dynamics against those without tested over seeds
(`sgi_lab.studies.probe_seed_tests`: the seed is the unit, its encoders share an
initialisation), and the Spearman correlation of each with the paper's ``tab:controls_hns``
median.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from sgi_lab.analysis.probe_study import (
    experiment_probe_frame,
    objective_summary,
    paper_rank_correlation,
    readout_groups,
)
from sgi_lab.studies.probe_changes import paired_readout_table, readout_table
from sgi_lab.studies.probe_seed_tests import SEED_LEVEL_NOTE, reading_seed_table
from sgi_lab.viz.markdown import markdown_table

__all__ = ["below_random_counts", "rank_correlation_table", "reread_markdown", "reread_tables"]


def rank_correlation_table(
    graph: Any,
    metrics: tuple[str, ...] = ("across_categories", "reward_f1"),
    frame: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per reading (rows) and probe metric (columns): Spearman's rho of the objectives' mean
    ``metric`` with the paper's ``tab:controls_hns`` median HNS, as ``rho (p = .., n = ..)``
    (n: the objectives both have; random init stands for SGI-None). ``frame``: the graph's
    `experiment_probe_frame`, when the caller has it."""
    frame = experiment_probe_frame(graph) if frame is None else frame
    cells: dict[str, dict[str, str]] = {}
    for label, part in readout_groups(frame):
        summary = objective_summary(part.drop_duplicates(["objective", "seed", "game"]), metrics)
        for metric in metrics:
            corr = paper_rank_correlation(summary, metric)
            # None: under 3 objectives in common; NaN: the probe equal for every objective
            known = corr["rho"] is not None and corr["rho"] == corr["rho"]
            cells.setdefault(label, {})[metric] = (
                f"{corr['rho']:+.2f} (p = {corr['p']:.2f}, n = {corr['n']})" if known else "-"
            )
    out = pd.DataFrame.from_dict(cells, orient="index")
    out.index.name = "reading (Spearman rho with the paper's median)"
    return out


def below_random_counts(
    graph: Any, metric: str = "across_categories", frame: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per reading: how many objectives' mean ``metric`` is below random init's, and which
    objectives are above it (``objectives below random init``, ``above or level``); ``frame``
    as `rank_correlation_table`."""
    frame = experiment_probe_frame(graph) if frame is None else frame
    rows = []
    for label, part in readout_groups(frame):
        part = part.drop_duplicates(["objective", "seed", "game"])
        if "random_init" not in set(part["objective"]):
            continue
        means = objective_summary(part, [metric]).set_index("objective")["value"]
        others = means.drop("random_init")
        above = sorted(others[others >= means["random_init"]].index)
        rows.append(
            {
                "reading": label,
                "objectives below random init": f"{int((others < means['random_init']).sum())}"
                f" of {len(others)}",
                "above or level": ", ".join(above) or "none",
            }
        )
    return pd.DataFrame(rows).set_index("reading") if rows else pd.DataFrame()


def reread_tables(graph: Any, frame: pd.DataFrame | None = None) -> list[tuple[str, pd.DataFrame]]:
    """The re-read's tables, each with the sentence that says what it holds: the headline F1
    per objective and reading, its change from the random encoder each run started from, the
    same for agent localisation and the reward probe, how many objectives fall below random
    init under each reading and the correlations with the paper (empty tables left out).
    ``frame``: the graph's `experiment_probe_frame`, when the caller has it (read once either
    way: every table summarises it)."""
    frame = experiment_probe_frame(graph) if frame is None else frame
    tables: list[tuple[str, pd.DataFrame]] = []
    for metric, what in (
        ("across_categories", "the mean of AtariARI's category means"),
        ("agent_localization", "agent localisation"),
        ("reward_f1", "the reward probe"),
    ):
        tables += [
            (
                f"F1 of {what} by reading, mean over seeds of the mean over games [95% t "
                "interval over seeds]:",
                readout_table(graph, metric, frame),
            ),
            (
                "The same minus the random encoder each run started from (same seed, same "
                "reading), mean over seeds [95% t interval], and how many seed pairs fell:",
                paired_readout_table(graph, metric, frame),
            ),
        ]
    tables += [
        (
            "The objectives with inverse dynamics against those without, tested over seeds "
            "(the change from each seed's random encoder, the mean of category means; "
            f"exploratory). {SEED_LEVEL_NOTE}",
            reading_seed_table(frame),
        ),
        (
            "Objectives whose headline F1 is below random init's, per reading:",
            below_random_counts(graph, frame=frame),
        ),
        (
            "Spearman correlation of each probe with the paper's tab:controls_hns median HNS "
            "(ResNet, Mixed data: another encoder and dataset than these probes'):",
            rank_correlation_table(graph, frame=frame),
        ),
    ]
    return [(text, table) for text, table in tables if not table.empty]


def reread_markdown(graph: Any) -> str:
    """`reread_tables` as Markdown, from the experiment graph
    (``sgi_lab.experiments.load_graph(folder)``)."""
    return "\n".join(f"{text}\n\n{markdown_table(table)}\n" for text, table in reread_tables(graph))
