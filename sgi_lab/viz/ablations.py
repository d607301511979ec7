"""Figures of the ablation explorer: interval plot and table of aggregates (our runs beside the
paper's rows), and per-game normalised scores, named by their normalisation: HNS for Atari
games, the MinAtar score for MinAtar games (a selection never mixes the two)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Protocol

import pandas as pd
import plotly.graph_objects as go

from sgi_lab.metrics.minatar import SCORE_TITLES, SCORE_TOP
from sgi_lab.viz.aggregates import aggregate_table, interval_plot
from sgi_lab.viz.common import finite_or_none, no_data_message

__all__ = ["ablation_figures", "aggregate_title", "per_game_hns_figure"]


class Selection(Protocol):
    """What the figures need of a selection (`sgi_lab.analysis.ablations.AblationView`)."""

    aggregates: pd.DataFrame
    per_game: pd.DataFrame
    metrics: Sequence[str]
    methods: Sequence[str]


def per_game_hns_figure(
    per_game: pd.DataFrame, title: str | None = None, normalization: str = "HNS"
) -> go.Figure:
    """Grouped bars of per-game normalised scores, one trace per method.

    Args:
        per_game: ``game, method, hns`` rows (`sgi_lab.analysis.ablations.AblationModel.per_game`).
        title: figure title (default: "per-game <score>").
        normalization: what ``hns`` holds: ``"HNS"`` or ``"MinAtar score"`` (titles, axis, and
            the line at 1: "human" or "DQN reference").

    Returns:
        A figure with one ``Bar`` per method (x = games), dotted lines at 0 and 1; a message
        when there is no score.
    """
    fig = go.Figure()
    games = list(dict.fromkeys(per_game["game"]))
    methods = per_game["method"].nunique()
    # Many games: one row per game (bars across, names readable), as tall as they need.
    across = len(games) > HORIZONTAL_FROM_GAMES
    for method, part in per_game.groupby("method", sort=False):
        hns = finite_or_none(part["hns"])
        names = list(part["game"])
        fig.add_trace(
            go.Bar(name=str(method), y=names, x=hns, orientation="h")
            if across
            else go.Bar(name=str(method), x=names, y=hns)
        )
    score_axis = {"title": SCORE_TITLES[normalization]}
    fig.update_layout(
        title=title or f"per-game {SCORE_TITLES[normalization]}",
        barmode="group",
        template="plotly_white",
        legend_title_text="method",
        height=max(420, 18 * len(games) * max(1, methods) // 2 + 160) if across else 420,
        **(
            {"xaxis": score_axis, "yaxis": {"title": "game", "autorange": "reversed"}}
            if across
            else {"yaxis": score_axis, "xaxis": {"title": "game", "tickangle": -45}}
        ),
    )
    if not fig.data:
        return no_data_message(fig, "no per-game score selected")
    # the two labels at opposite ends, so they never overlap when 0 and 1 lie close together
    line = fig.add_vline if across else fig.add_hline
    top = SCORE_TOP[normalization]
    for value, name, where in ((0.0, "random", "bottom left"), (1.0, top, "top right")):
        line(value, line_dash="dot", line_color="gray", annotation_text=name,
             annotation_position=where)  # fmt: skip
    return fig


HORIZONTAL_FROM_GAMES = 8
"""More games than this: per-game bars are drawn across, one row per game."""


def aggregate_title(view: Selection) -> str:
    """The interval plot's title: over how many games, then (wrapped, so a subtitle wider than
    the figure stays whole) our methods left out because they lack some of those games, "k of
    n games", and our runs' evaluation protocol."""
    df = view.aggregates
    chosen = list(getattr(view, "games", []) or [])
    games = len(chosen) or (int(df["games"].max()) if "games" in df and len(df) else 0)
    score = getattr(view, "normalization", "HNS")
    title = (
        f"aggregate {score} over {games} game{'s' * (games != 1)}"
        if games
        else f"aggregate {score}"
    )
    lines = []
    left_out = getattr(view, "left_out", {}) or {}
    if left_out:
        shown = ", ".join(f"{m} ({k} of {games} games)" for m, k in left_out.items())
        lines += textwrap.wrap(f"not aggregated, too few games: {shown}", 80)
    protocol_note = getattr(view, "protocol_note", None)
    if protocol_note:
        lines += textwrap.wrap(f"ours: {protocol_note}", 80)
    return f"{title}<br><sup>{'<br>'.join(lines)}</sup>" if lines else title


def ablation_figures(view: Selection) -> dict[str, go.Figure]:
    """The explorer's three figures for one selection: ``interval``, ``table``, ``per_game``.

    Figures with nothing to show say why: the selection's first note (e.g. "no finetuning runs
    under outputs/runs"), else "nothing selected". The interval plot's title carries the note
    about our runs' evaluation protocol when there is one (``view.protocol_note``).
    """
    df = view.aggregates
    notes = list(getattr(view, "notes", []) or [])
    score = getattr(view, "normalization", "HNS")
    if df.empty:
        message = notes[0] if notes else "nothing selected"
        return {
            key: no_data_message(
                go.Figure().update_layout(title=title, template="plotly_white"), message
            )
            for key, title in (
                ("interval", f"aggregate {score}"),
                ("table", "aggregates"),
                ("per_game", f"per-game {SCORE_TITLES[score]}"),
            )
        }
    metrics = [m for m in view.metrics if m in set(df["metric"])]
    return {
        "interval": interval_plot(
            df,
            metrics=metrics,
            methods=view.methods,
            title=aggregate_title(view),
            capped_from=getattr(view, "capped_from", None),
            normalization=score,
        ),
        "table": aggregate_table(df, metrics=metrics, methods=view.methods, normalization=score),
        "per_game": per_game_hns_figure(view.per_game, normalization=score),
    }
