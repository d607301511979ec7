"""Figures of goal-conditioned RL along a trajectory: similarity to the goal, the synthetic
reward, the goal-conditioned Q values, and the stored frames nearest to the goal."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from sgi_lab.data import TransitionStore
from sgi_lab.viz.common import (
    action_labels,
    add_channel_legend,
    channel_names,
    frame_trace,
    no_data_message,
    square_pixels,
)

__all__ = [
    "COLLAPSE_SPREAD",
    "collapse_note",
    "frames_figure",
    "goal_trajectory_figure",
    "nearest_frames_figure",
    "searched_cosine_note",
]


TITLE_WRAP = 90
"""Characters in a line of a figure's subtitle: about the width of a 900-px figure."""

COLLAPSE_SPREAD = 1e-4
"""Cosines to the goal that all lie within this of each other (over a trajectory, or over the
frames searched) mean a collapsed encoder: every state maps to one direction, the goal reward
is about 0 everywhere and the "nearest" frames are ranked by rounding noise."""


def collapse_note(cosines: Sequence[float] | np.ndarray, what: str) -> str:
    """A one-line warning when every one of ``cosines`` (to the goal, one per ``what``: "state
    of the trajectory", "frame searched") lies within `COLLAPSE_SPREAD` of the others; empty
    otherwise (and for fewer than two finite values)."""
    values = np.asarray(cosines, dtype=float)
    values = values[np.isfinite(values)]
    if len(values) < 2 or (spread := float(np.ptp(values))) >= COLLAPSE_SPREAD:
        return ""
    return (
        f"warning: collapsed encoder: every {what} has the same cosine to the goal (spread "
        f"{spread:.1e} < {COLLAPSE_SPREAD:.0e}), so the goal reward is ~0 everywhere and tells "
        "nothing; a longer-trained encoder (watch its charts/cosine_similarity stay below 1) "
        "gives a meaningful one"
    )


def _collapse_annotation(fig: go.Figure, note: str) -> None:
    """The warning in red across the goal-reward panel (empty: every reward is ~0)."""
    text = note.replace("warning: ", "").replace("), so ", ")<br>so ").replace("; ", "<br>")
    fig.add_annotation(
        text=f"<b>{text}</b>",
        xref="x2 domain",
        yref="y2 domain",
        x=0.5,
        y=0.5,
        showarrow=False,
        font={"color": "#d62728", "size": 12},
        bgcolor="rgba(255,255,255,0.85)",
        name="collapsed encoder",
    )


def goal_trajectory_figure(
    df: pd.DataFrame, action_names: Sequence[str] | None = None, title: str | None = None
) -> go.Figure:
    """Three stacked panels over the trajectory's steps: s(z_t, g), the goal reward of t -> t+1
    (green toward the goal, red away), and the goal-conditioned Q value of every action with the
    action the data took marked.

    Args:
        df: `sgi_lab.analysis.goals.goal_analysis` output.
        action_names: labels of the actions (default: the game's, from ``df.attrs["game"]``,
            else ``a0, a1, ...``).
        title: figure title (default: the goal's label).

    Returns:
        A figure with traces ``"similarity"``, ``"goal reward"``, ``"Q(<action>)"`` for each
        action (when the model has a goal head) and ``"action taken"``; a dotted line marks the
        goal's step when the goal is a state on the trajectory (never for a noise goal); a red
        warning across the reward panel when the ``cosine`` column is flat (`collapse_note`).
    """
    q_columns = [c for c in df.columns if c.startswith("q_") and c[2:].isdigit()]
    if df.empty:
        fig = go.Figure().update_layout(title=title or "goal", template="plotly_white")
        return no_data_message(fig, "the trajectory is empty")
    panels = 3 if q_columns else 2
    fig = make_subplots(
        rows=panels,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=(
            "similarity to the goal s(z_t, g)",
            "goal reward r_t (green: toward the goal, red: away)",
            "goal-conditioned Q values",
        )[:panels],
    )
    step = df["step"].to_numpy()
    fig.add_trace(go.Scatter(x=step, y=df["similarity"], mode="lines", name="similarity"), 1, 1)
    reward = df["goal_reward"].to_numpy(float)
    fig.add_trace(
        go.Bar(
            x=step,
            y=reward,
            name="goal reward",
            marker={"color": np.where(np.nan_to_num(reward) >= 0, "#2ca02c", "#d62728")},
        ),
        2,
        1,
    )
    if q_columns:
        _add_q_panel(fig, df, q_columns, action_names)
    _mark_goal_step(fig, df, panels)
    if "cosine" in df.columns and (note := collapse_note(df["cosine"], "state on the trajectory")):
        _collapse_annotation(fig, note)
    fig.update_xaxes(title_text="step in episode (agent steps)", row=panels, col=1)
    fig.update_yaxes(title_text="similarity (0 to 1)", row=1, col=1)
    fig.update_yaxes(title_text="goal reward", row=2, col=1)
    if q_columns:
        fig.update_yaxes(title_text="expected return", row=3, col=1)
    fig.update_layout(
        title=title or df.attrs.get("goal_label", "goal"),
        template="plotly_white",
        height=260 * panels,
        # beside the panels: a row below them would sit on the x axis's title
        legend={"x": 1.02, "xanchor": "left", "y": 1.0, "yanchor": "top"},
    )
    return fig


def _add_q_panel(
    fig: go.Figure, df: pd.DataFrame, q_columns: list[str], action_names: Sequence[str] | None
) -> None:
    """Panel 3: the goal-conditioned Q value of every action, and the action the data took."""
    names = (
        list(action_names) if action_names else action_labels(df.attrs.get("game"), len(q_columns))
    )
    palette = qualitative.Plotly + qualitative.D3
    step = df["step"].to_numpy()
    for k, column in enumerate(q_columns):
        fig.add_trace(
            go.Scatter(
                x=step,
                y=df[column],
                mode="lines",
                name=f"Q({names[k]})",
                line={"color": palette[k % len(palette)], "width": 1.5},
            ),
            3,
            1,
        )
    taken = df[q_columns].to_numpy()[np.arange(len(df)), df["action"].to_numpy()]
    fig.add_trace(
        go.Scatter(
            x=step,
            y=taken,
            mode="markers",
            name="action taken",
            marker={"color": "black", "size": 4, "symbol": "x"},
        ),
        3,
        1,
    )


def _mark_goal_step(fig: go.Figure, df: pd.DataFrame, panels: int) -> None:
    """A dotted line at the goal's step in every panel, when the goal lies on the trajectory."""
    goal_row = df.attrs.get("goal_row")
    # Only a goal on this trajectory has a step on its x axis (never another episode's state)
    on_trajectory = df.attrs.get("goal_kind") == "future"
    if on_trajectory and goal_row is not None and goal_row in set(df["row"]):
        goal_step = int(df.loc[df["row"] == goal_row, "step"].iloc[0])
        for r in range(1, panels + 1):
            fig.add_vline(x=goal_step, line_dash="dot", line_color="gray", row=r, col=1)


def frames_figure(
    frames: np.ndarray,
    titles: Sequence[str],
    title: str | None = None,
    height: int = 230,
    game: str | None = None,
) -> go.Figure:
    """A strip of (N, 84, 84) grayscale frames, or (N, C, 10, 10) MinAtar frames drawn as
    coloured channel grids (their channels, named after ``game``'s, in the legend), with a
    title each, pixels square; a message when there are none."""
    n = max(1, len(frames))
    if len(frames) == 0:
        fig = go.Figure().update_layout(title=title, height=height + 40)
        return no_data_message(fig, "no frames to show")
    fig = make_subplots(rows=1, cols=n, subplot_titles=list(titles), horizontal_spacing=0.02)
    fig.update_annotations(font_size=11)
    for i, frame in enumerate(frames):
        fig.add_trace(frame_trace(frame), row=1, col=i + 1)
    square_pixels(fig, n)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    grids = np.ndim(frames) == 4  # (N, C, H, W): MinAtar's channels
    if grids:
        add_channel_legend(fig, channel_names(game, np.shape(frames)[1]))
    fig.update_layout(
        title={"text": title, "y": 0.98, "yanchor": "top"},
        height=height + 40 + 40 * grids,
        margin={
            "l": 10,
            "r": 10,
            "t": 100 + 18 * (title or "").count("<br>"),
            "b": 10 + 40 * grids,
        },
        showlegend=grids,
    )
    return fig


def nearest_frames_figure(store: TransitionStore, nearest: pd.DataFrame, goal=None) -> go.Figure:
    """The goal's own frame (when it came from a state) and the stored frames nearest to it.

    Args:
        store: the dataset searched.
        nearest: `sgi_lab.analysis.goals.nearest_to_goal` output.
        goal: the `sgi_lab.analysis.goals.Goal` (its source frame is shown first).

    Returns:
        A frame strip (one ``Heatmap`` per frame) titled with rows and cosine similarities.
    """
    rows = list(nearest["row"])
    cosine = nearest["cosine"].to_numpy(float)
    # cosines that agree to 3 decimals are shown to as many as tell them apart (up to 6)
    spread = float(np.ptp(cosine)) if len(cosine) > 1 else 1.0
    digits = int(min(6, max(3, np.ceil(-np.log10(spread)) + 1))) if spread > 0 else 6
    titles = [
        f"ep {e}<br>t={s}<br>cos {c:.{digits}f}"  # short lines: narrow panels side by side
        for e, s, c in zip(nearest["episode"], nearest["step"], cosine)
    ]
    if goal is not None and goal.row is not None:
        rows = [goal.row, *rows]
        titles = [f"<b>goal</b><br>row {goal.row}", *titles]
    frames = store.gather_frames(np.asarray(rows, dtype=np.int64))
    label = goal.label if goal is not None else "goal"
    title = f"stored frames nearest to the {label}"
    # a line a part, each wrapped: one long line is cut at the figure's edges, never wrapped
    for part in _searched_cosine_lines(nearest.attrs.get("searched_cosine")):
        title += "".join(f"<br><sup>{line}</sup>" for line in textwrap.wrap(part, TITLE_WRAP))
    return frames_figure(frames, titles, title=title, game=store.game)


NEAR_ONE = 0.99
"""A cosine from which every searched frame counts as "as near as the nearest"."""


def searched_cosine_note(stats: dict | None) -> str:
    """What the nearest frames' cosines are worth, in one line: the cosine over every frame
    searched, and when even the farthest is near 1, that nearness says little here (a random
    or barely trained encoder maps every frame close to every other)."""
    return ": ".join(_searched_cosine_lines(stats))


def _searched_cosine_lines(stats: dict | None) -> list[str]:
    """`searched_cosine_note` in its parts: the cosines, then what they are worth (if said)."""
    if not stats or not stats.get("searched"):
        return []
    lines = [
        f"cosine to the goal over the {stats['searched']:,} frames searched: "
        f"min {stats['min']:.4f}, median {stats['median']:.4f}, max {stats['max']:.4f}"
    ]
    if stats["max"] - stats["min"] < COLLAPSE_SPREAD:
        lines.append(
            f"all within {COLLAPSE_SPREAD:.0e}, a collapsed encoder: this ranking is rounding noise"
        )
    elif stats["min"] >= NEAR_ONE:
        lines.append("every frame is near 1, so 'nearest' says little for this encoder")
    return lines
