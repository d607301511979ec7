"""Finetuning learning curves: one run's episode returns with a rolling mean, or several runs'
overlaid, with the game's reference scores as lines.

A run too short to finish an episode (the finetune notebook's 300-step smoke set on Pong, whose
episodes last over a thousand agent steps) still gets a curve: the agent's mean Q value over
training (the return it expects), said so in the title, never empty axes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from sgi_lab.viz.common import no_data_message
from sgi_lab.viz.training import metric_axis_title, metric_title, runs_metrics

__all__ = ["STAND_IN_KEYS", "compare_learning_curves", "learning_curve"]

STAND_IN_KEYS: tuple[tuple[str, str], ...] = (
    ("charts/q_mean", "the return the agent expects"),
    ("losses/total", "what training minimizes"),
)
"""What a learning curve draws over training steps when no episode has finished, the first
logged: ``(metrics key, what it says)``."""

PALETTE = ("#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692")


def _reference_lines(fig: go.Figure, reference: Mapping[str, float] | None) -> None:
    # labelled at the left end, so a label never sits on a curve's end or the legend
    for name, value in (reference or {}).items():
        fig.add_hline(
            y=value, line_dash="dot", line_color="gray", annotation_text=name,
            annotation_position="bottom left",
        )  # fmt: skip


def _without_episodes(
    fig: go.Figure, df: pd.DataFrame, x: str, runs: str | None = None
) -> go.Figure:
    """``fig`` (titled, no episode to draw) showing the first `STAND_IN_KEYS` metric logged
    over training steps, one line per run, with the title saying why; with none logged, a
    message across empty space instead of axes."""
    steps = int(df[x].max()) if x in df.columns and df[x].notna().any() else 0
    if not steps:
        return no_data_message(fig, "no episode has finished yet" + " in these runs" * bool(runs))
    whose = "these runs" if runs else "this run"
    found = [(k, why) for k, why in STAND_IN_KEYS if k in df.columns and df[k].notna().any()]
    if not found:
        return no_data_message(fig, f"no episode finished in the {steps:,} steps of {whose}")
    key, why = found[0]
    fig.data = ()
    groups = df.groupby(runs, sort=False) if runs else [(None, df)]
    for j, (run, part) in enumerate(groups):
        data = part[[x, key]].dropna()
        fig.add_scatter(
            x=data[x], y=data[key], mode="lines", line={"color": PALETTE[j % len(PALETTE)]},
            name=metric_title(key) if run is None else str(run),
        )  # fmt: skip
    note = f"no episode finished in the {steps:,} steps of {whose}: {metric_title(key)} ({why})"
    title = fig.layout.title.text
    fig.update_layout(
        title=f"{title}<br><sup>{note}</sup>" if title else note,
        yaxis_title=metric_axis_title(key),
        showlegend=runs is not None,
        margin={"t": 90},
    )
    fig.update_xaxes(rangemode="tozero")
    return fig


def learning_curve(
    metrics: pd.DataFrame | Iterable[Mapping[str, Any]],
    key: str = "episode/return",
    window: int = 10,
    x: str = "step",
    title: str | None = None,
    reference: Mapping[str, float] | None = None,
    x_title: str = "agent step",
) -> go.Figure:
    """Episode returns during finetuning with a rolling mean.

    Args:
        metrics: finetuning metrics rows (those without ``key`` are ignored).
        key: the return column.
        window: episodes in the rolling mean.
        x: x-axis column (agent steps).
        title: figure title.
        reference: horizontal lines to draw, e.g. ``{"random": -20.7, "human": 14.6}``.
        x_title: the x axis's title.

    Returns:
        A figure with ``Scatter`` traces ``"episodes"`` and ``"mean of <window>"``; with no
        finished episode, the mean Q value (or the loss) over training steps, the title saying
        why (`STAND_IN_KEYS`); with nothing logged, a message instead of empty axes.
    """
    df = metrics if isinstance(metrics, pd.DataFrame) else pd.DataFrame(list(metrics))
    data = df[[x, key]].dropna() if key in df.columns else pd.DataFrame({x: [], key: []})
    fig = go.Figure(
        [
            go.Scatter(x=data[x], y=data[key], mode="markers", name="episodes", marker={"size": 5}),
            go.Scatter(
                x=data[x],
                y=data[key].rolling(window, min_periods=1).mean(),
                mode="lines",
                name=f"mean of {window}",
            ),
        ]
    )
    fig.update_layout(
        title=title or f"learning curve ({key})",
        xaxis_title=x_title,
        yaxis_title=metric_axis_title(key),
        template="plotly_white",
    )
    if data.empty:
        return _without_episodes(fig, df, x)
    # From step 0: a short run's few episodes sit where they ended, not on an axis of 961-963
    fig.update_xaxes(rangemode="tozero")
    if len(data) < 3:
        fig.data[0].marker.size = 10
        fig.add_annotation(
            text=f"{len(data)} episode{'s' * (len(data) != 1)} finished in this run",
            # above the plot area: inside it, the human or random line could strike it out
            xref="paper",
            yref="paper",
            x=1.0,
            y=1.0,
            xanchor="right",
            yanchor="bottom",
            showarrow=False,
            name="few episodes",
        )
    _reference_lines(fig, reference)
    return fig


def compare_learning_curves(
    run_dirs: Sequence[str | os.PathLike] | Mapping[str, str | os.PathLike],
    key: str = "episode/return",
    window: int = 10,
    title: str | None = None,
    reference: Mapping[str, float] | None = None,
) -> go.Figure:
    """Finetuning runs' learning curves overlaid (every agent of a population, or runs to
    compare): each run's episode returns as faint points and their rolling mean as a line in
    the run's colour; when no run has finished an episode, each run's mean Q value over
    training steps (`STAND_IN_KEYS`), the title saying why.

    Args:
        run_dirs: finetuning run folders, or ``{label: folder}``.
        key: the return column.
        window: episodes in each rolling mean.
        title: figure title.
        reference: horizontal lines (``{"random": ..., "human": ...}``) for runs of one game.
    """
    df = runs_metrics(run_dirs)
    data = df[["run", "step", key]].dropna() if key in df.columns else pd.DataFrame()
    fig = go.Figure()
    for j, (run, part) in enumerate(data.groupby("run", sort=False) if len(data) else []):
        color = PALETTE[j % len(PALETTE)]
        fig.add_scatter(
            x=part["step"], y=part[key], mode="markers", name=f"{run} episodes",
            marker={"size": 4, "color": color, "opacity": 0.35}, legendgroup=str(run),
            showlegend=False,
        )  # fmt: skip
        fig.add_scatter(
            x=part["step"], y=part[key].rolling(window, min_periods=1).mean(), mode="lines",
            name=str(run), line={"color": color}, legendgroup=str(run),
        )  # fmt: skip
    fig.update_layout(
        title=title or f"learning curves, mean of {window} episodes ({key})",
        xaxis_title="agent step",
        yaxis_title=metric_axis_title(key),
        template="plotly_white",
        legend_title_text="run",
    )
    if not fig.data:
        return _without_episodes(fig, df, "step", runs="run")
    fig.update_xaxes(rangemode="tozero")
    _reference_lines(fig, reference)
    return fig
