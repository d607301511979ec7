"""Plotly figure of linear-probe scores: F1 per category and objective with confidence intervals
(the tidy frame of `sgi_lab.analysis.probe_study.objective_summary`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

__all__ = ["probe_bars", "probe_curve_figure"]

DEFAULT_METRICS = (
    "overall",
    "agent_localization",
    "small_object_localization",
    "other_localization",
    "score_clock_lives_display",
    "miscellaneous",
    "reward_f1",
)


def probe_bars(
    summary: pd.DataFrame,
    metrics: Sequence[str] = DEFAULT_METRICS,
    title: str = "Probe F1 per category (95% CIs over seeds)",
) -> go.Figure:
    """Grouped bars: one group per metric (category), one bar per objective, CI whiskers.

    Args:
        summary: ``objective, metric, value, lower, upper`` rows.
        metrics: the metrics shown, in order (those absent from ``summary`` are skipped).
        title: figure title.
    """
    fig = go.Figure()
    if summary.empty:
        fig.add_annotation(text="no probe results yet", showarrow=False)
        return fig
    shown = [m for m in metrics if m in set(summary["metric"])]
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
    fig.update_layout(
        title=title, barmode="group", yaxis_title="test F1", yaxis_range=[0, 1.05], height=420
    )
    return fig


def probe_curve_figure(curves: pd.DataFrame, metric: str = "overall") -> go.Figure:
    """Probe F1 against pretraining step, one line per (run, game) (`probe_curves` rows)."""
    fig = go.Figure()
    if curves.empty:
        fig.add_annotation(text="no checkpoint probes yet (sgi-lab probe RUN/checkpoints/*.pt)")
        return fig
    for (run, game), group in curves.groupby(["run", "game"], sort=False):
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
