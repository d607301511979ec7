"""Plotly figure of linear-probe scores: F1 per category and objective with confidence intervals
(the tidy frame of `sgi_lab.analysis.probe_study.objective_summary`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from sgi_lab.viz.common import no_data_message

__all__ = ["NO_PROBES", "PROBE_REFERENCES", "probe_bars", "probe_curve_figure", "reference_levels"]

DEFAULT_METRICS = (
    "overall",
    "agent_localization",
    "small_object_localization",
    "other_localization",
    "score_clock_lives_display",
    "miscellaneous",
    "reward_f1",
)


PROBE_REFERENCES = {"random_init": "random init", "majority": "majority class"}
"""The baselines drawn as reference lines over the overall F1 (their ``metric`` in a summary,
their label): a randomly initialized encoder and the majority class, probed on the same split."""
_REFERENCE_STYLE = {"random_init": ("#d62728", "dash"), "majority": ("#7f7f7f", "dot")}
NO_PROBES = "no probe results yet: sgi-lab probe PRETRAINING_RUN --data STORE"


def reference_levels(summary: pd.DataFrame) -> dict[str, float]:
    """``{metric: value}`` of the `PROBE_REFERENCES` baselines in a summary: the mean over its
    objectives of each one's baseline (the same split's random-init and majority overall F1)."""
    if summary.empty:
        return {}
    levels = {}
    for metric in PROBE_REFERENCES:
        values = summary.loc[summary["metric"] == metric, "value"].astype(float).dropna()
        if len(values):
            levels[metric] = float(values.mean())
    return levels


def probe_bars(
    summary: pd.DataFrame,
    metrics: Sequence[str] = DEFAULT_METRICS,
    title: str = "Probe F1 per category (95% CIs over seeds)",
    empty: str = NO_PROBES,
) -> go.Figure:
    """Grouped bars: one group per metric (category), one bar per objective, CI whiskers, and
    the random-init and majority-class overall F1 (`reference_levels`) as lines across the
    overall group, so a bar is read against what an untrained encoder reaches.

    Args:
        summary: ``objective, metric, value, lower, upper`` rows.
        metrics: the metrics shown, in order (those absent from ``summary`` are skipped).
        title: figure title.
        empty: what the figure says when there are no results.
    """
    fig = go.Figure()
    shown = [m for m in metrics if not summary.empty and m in set(summary["metric"])]
    if not shown:
        return no_data_message(fig, empty)
    for objective, group in summary.groupby("objective", sort=False):
        rows = group.set_index("metric").reindex(shown)
        value = rows["value"].to_numpy(float)
        upper = np.nan_to_num(rows["upper"].to_numpy(float) - value)
        lower = np.nan_to_num(value - rows["lower"].to_numpy(float))
        fig.add_bar(
            name=str(objective),
            x=[m.replace("_", " ") for m in shown],
            y=value,
            error_y={"type": "data", "symmetric": False, "array": upper, "arrayminus": lower},
        )
    _reference_lines(fig, reference_levels(summary), shown)
    fig.update_layout(
        title=title, barmode="group", yaxis_title="test F1", yaxis_range=[0, 1.05], height=420
    )
    return fig


def _reference_lines(fig: go.Figure, levels: dict[str, float], shown: list[str]) -> None:
    # The baselines are overall F1s: drawn over the overall group only (category i spans
    # i - 0.5 .. i + 0.5 on a categorical axis), across the whole chart without that group.
    at = shown.index("overall") if "overall" in shown else None
    x0, x1, xref = (at - 0.5, at + 0.5, "x") if at is not None else (0, 1, "paper")
    for metric, level in levels.items():
        color, dash = _REFERENCE_STYLE[metric]
        label = f"{PROBE_REFERENCES[metric]} {level:.3f}"
        fig.add_shape(
            type="line",
            xref=xref,
            yref="y",
            x0=x0,
            x1=x1,
            y0=level,
            y1=level,
            line={"color": color, "dash": dash, "width": 2},
            name=label,
            showlegend=True,
            legendgroup="references",
        )


def probe_curve_figure(
    curves: pd.DataFrame, metric: str = "overall", empty: str | None = None
) -> go.Figure:
    """Probe F1 against pretraining step, one line per (run, game) (`probe_curves` rows); with
    none, ``empty`` (what would draw them) across the figure."""
    fig = go.Figure()
    if curves.empty:
        text = empty or "no checkpoint probes yet: sgi-lab probe RUN/checkpoints/*.pt --data STORE"
        return no_data_message(fig, text).update_layout(height=300)
    for (run, game), group in curves.groupby(["run", "game"], sort=False, dropna=False):
        fig.add_scatter(
            x=group["step"], y=group[metric], mode="lines+markers", name=f"{run} ({game})"
        )
    fig.update_layout(
        title=f"Probe F1 ({metric}) over pretraining",
        xaxis_title="pretraining step",
        yaxis_title="test F1",
        height=380,
    )
    return fig
