"""Figures of what data and encoders look like: 2-D embeddings of latents coloured by what is
known about each state, representation-diversity curves (the paper's Fig. 4), how far a dataset
strays from its start states, and several datasets side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from sgi_lab.data import TransitionStore
from sgi_lab.viz.common import action_labels, category_labels, no_data_message
from sgi_lab.viz.datasets import (
    SUMMARY_HEIGHT,
    SUMMARY_MARGIN,
    SUMMARY_SPACING,
    SUMMARY_TITLE_SIZE,
    integer_bins,
    whole_episodes,
)
from sgi_lab.viz.training import figure_width

__all__ = [
    "compare_stores_figure",
    "diversity_figure",
    "embedding_grid",
    "start_distance_figure",
    "stores_table",
]

_CATEGORICAL = {"action", "episode"}
REWARD_SCALE = [[0.0, "#b2182b"], [0.5, "#8c8c8c"], [1.0, "#2166ac"]]
"""The reward colouring: negative red, zero gray, positive blue."""
_PALETTE = qualitative.Plotly + qualitative.D3
# Actions and episodes side by side must not look alike: each categorical colouring its palette.
_CATEGORY_PALETTES = {"action": qualitative.Plotly, "episode": qualitative.Dark24}


def embedding_grid(
    df: pd.DataFrame,
    colors: Sequence[str] = ("step", "action", "reward", "episode"),
    encoders: Sequence[str] | None = None,
    title: str | None = None,
    game: str | None = None,
) -> go.Figure:
    """2-D embeddings, one column per encoder and one row per colouring.

    Args:
        df: `sgi_lab.analysis.representations.embedding_frame` rows (``x, y, encoder`` and the colour
            columns), several encoders concatenated.
        colors: columns to colour by; ``action`` and ``episode`` get discrete colours, others a
            continuous scale.
        encoders: encoder labels (columns), in order; default: as they appear in ``df``.
        title: figure title.
        game: names the actions (ale-py's ``NOOP``, ``FIRE``...); default ``df.attrs["game"]``.

    Returns:
        A figure with one ``Scattergl`` per panel, named ``"<encoder> | <colour>"``, except that
        a categorical colouring has one trace per value, named by the value (``NOOP``, ``0``)
        under a legend group titled ``action`` (``episode``), each colouring with its own
        palette, shown in the legend once (clicking an entry toggles it in every column);
        continuous colourings have a colour bar. No points: a message.
    """
    title = title or "latent space (UMAP)"
    if df.empty:
        fig = go.Figure().update_layout(title=title, template="plotly_white")
        return no_data_message(fig, "no states were embedded")
    encoders = list(dict.fromkeys(df["encoder"])) if encoders is None else list(encoders)
    colors = [c for c in colors if c in df.columns]
    names = _action_names(df, game or df.attrs.get("game"))
    fig = make_subplots(
        rows=len(colors),
        cols=len(encoders),
        subplot_titles=[f"{e} — by {c}" for c in colors for e in encoders],
        horizontal_spacing=0.06,
        vertical_spacing=0.08 / max(1, len(colors) / 4),
    )
    legends: dict[str, Any] = {}
    for i, color in enumerate(colors):
        if color in _CATEGORICAL:
            # each categorical colouring its own legend beside its own row (as a colour bar),
            # so action and episode entries never mix
            key = "legend" if not legends else f"legend{len(legends) + 1}"
            legends[key] = {
                "title": {"text": color},
                "x": 1.02,
                "xanchor": "left",
                "y": 1 - i / len(colors),
                "yanchor": "top",
                "orientation": "v",
            }
        for j, encoder in enumerate(encoders):
            part = df[df["encoder"] == encoder]
            if color in _CATEGORICAL:
                _add_categorical_panel(fig, part, color, names, i + 1, j + 1, key)
            else:
                colorbar = _colorbar(color, i, len(colors), show=j == len(encoders) - 1)
                _add_continuous_panel(fig, part, color, encoder, names, colorbar, i + 1, j + 1)
    fig.update_xaxes(showticklabels=False, title_text="embedding dim 1 (no unit)")
    fig.update_yaxes(showticklabels=False, title_text="embedding dim 2")
    fig.update_layout(
        title=title,
        template="plotly_white",
        height=320 * len(colors) + 60,
        # four encoders or more: the cell's whole width (420 px each would be cut off)
        **figure_width(len(encoders), per_column=420, extra=0, least=700),
        **legends,
    )
    return fig


def _action_names(df: pd.DataFrame, game: str | None) -> list[str] | None:
    """The game's action names (ale-py's ``NOOP``, ``FIRE``...) for the embedded states'
    actions, ``df.attrs["num_actions"]`` of them, else one past the largest action seen."""
    num_actions = df.attrs.get("num_actions") or (int(df["action"].max()) + 1)
    return action_labels(game, num_actions) if num_actions else None


def _add_categorical_panel(
    fig: go.Figure,
    part: pd.DataFrame,
    color: str,
    names: Sequence[str] | None,
    row: int,
    col: int,
    legend: str = "legend",
) -> None:
    """One encoder's points coloured by ``color`` (``action`` or ``episode``): a trace per
    value, named by it, in ``legend`` (titled ``color``) from the first column only (one entry
    toggles the value in every column)."""
    values = part[color].to_numpy()
    palette = _CATEGORY_PALETTES.get(color, _PALETTE)
    for value in sorted(set(values.tolist())):
        inside = part[values == value]
        label = category_labels([value], names if color == "action" else None)[0]
        fig.add_trace(
            go.Scattergl(
                x=inside["x"],
                y=inside["y"],
                mode="markers",
                name=label,  # the encoder is the column's title; not repeated
                legendgroup=f"{color}={label}",
                legend=legend,
                showlegend=col == 1,
                marker={
                    "size": 4,
                    "opacity": 0.8,
                    "color": palette[int(value) % len(palette)],
                },
                text=_hover(inside, names),
                hoverinfo="text",
            ),
            row=row,
            col=col,
        )


def _colorbar(color: str, index: int, count: int, show: bool) -> dict[str, Any]:
    """The continuous scale of colouring ``index`` of ``count`` (rows top to bottom): its colour
    bar beside its own row, drawn once (``show``: the last column)."""
    return {
        # rewards: red below zero, blue above, and zero (most states) a visible gray, not the
        # white middle of RdBu that vanishes on a light background
        "colorscale": "Viridis" if color != "reward" else REWARD_SCALE,
        "showscale": show,
        "colorbar": {
            "title": color,
            "len": 1 / count,
            "y": 1 - (index + 0.5) / count,
            "thickness": 12,
        },
    }


def _add_continuous_panel(
    fig: go.Figure,
    part: pd.DataFrame,
    color: str,
    encoder: str,
    names: Sequence[str] | None,
    colorbar: dict[str, Any],
    row: int,
    col: int,
) -> None:
    """One encoder's points coloured by a continuous column on ``colorbar``'s scale, in one
    trace named ``"<encoder> | <color>"``; rewards on a scale symmetric about zero."""
    values = part[color].to_numpy()
    marker = {"color": values.astype(float), **colorbar}
    if color == "reward":
        bound = max(float(np.abs(values).max()) if len(values) else 1.0, 1e-6)
        marker.update(cmin=-bound, cmax=bound)
    fig.add_trace(
        go.Scattergl(
            x=part["x"],
            y=part["y"],
            mode="markers",
            name=f"{encoder} | {color}",
            marker={"size": 4, "opacity": 0.8, **marker},
            text=_hover(part, names),
            hoverinfo="text",
            showlegend=False,
        ),
        row=row,
        col=col,
    )


def _hover(part: pd.DataFrame, names: Sequence[str] | None) -> list[str]:
    actions = category_labels(part["action"].tolist(), names)
    return [
        f"row {r}, episode {e}, step {s}, action {a}, reward {w:g}"
        for r, e, s, a, w in zip(
            part["row"], part["episode"], part["step"], actions, part["reward"]
        )
    ]


def diversity_figure(df: pd.DataFrame, title: str | None = None) -> go.Figure:
    """Mean pairwise cosine similarity of representations over pretraining, one line per run.

    Args:
        df: `sgi_lab.analysis.representations.diversity_curves` (``run, step, cosine_similarity``).
        title: figure title.

    Returns:
        A figure with one ``Scatter`` per run, named after it; lower means more diverse, 1 is
        collapse. Without runs (a random encoder only), its annotation says what to pass.
    """
    fig = go.Figure()
    for run, part in df.groupby("run", sort=False):
        fig.add_trace(
            go.Scatter(x=part["step"], y=part["cosine_similarity"], mode="lines", name=str(run))
        )
    if not fig.data:  # else a researcher sees blank axes
        fig.add_annotation(
            text="no pretraining run logged a cosine similarity: "
            "set <i>pretrained</i> or <i>diversity_runs</i>",
            showarrow=False,
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
        )
    fig.update_layout(
        title=title or "representation diversity (paper Fig. 4): lower is more diverse",
        xaxis_title="pretraining step",
        yaxis_title="mean pairwise cosine similarity",
        template="plotly_white",
    )
    return fig


def start_distance_figure(
    frames: Mapping[str, pd.DataFrame] | pd.DataFrame, title: str | None = None
) -> go.Figure:
    """How far the data goes from the start state: pixel distance to the episode's first frame
    over time (mean and max over episodes), and the distribution of steps since an episode start.

    Args:
        frames: `sgi_lab.analysis.representations.start_distance` output, or ``{store label: output}``.
        title: figure title.

    Returns:
        A two-panel figure; traces are named ``"<label> median"`` (over episodes, per step),
        ``"<label> max"`` (left) and ``"<label> steps"`` (right); the title lists the episodes
        measured from their second frame (`start_distance`'s reset-frame episodes).
    """
    frames = {"data": frames} if isinstance(frames, pd.DataFrame) else dict(frames)
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            "pixel distance from the episode's first frame",
            "steps since episode start (all states)",
        ),
    )
    for k, (label, df) in enumerate(frames.items()):
        color = _PALETTE[k % len(_PALETTE)]
        # the median over episodes: one odd episode moves the mean, not the median
        by_step = df.groupby("step")["pixel_distance"].agg(["median", "max"]).reset_index()
        fig.add_trace(
            go.Scatter(
                x=by_step["step"],
                y=by_step["median"],
                name=f"{label} median",
                line={"color": color},
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=by_step["step"],
                y=by_step["max"],
                name=f"{label} max",
                line={"color": color, "dash": "dot"},
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Histogram(x=df["step"], name=f"{label} steps", marker={"color": color}, opacity=0.6),
            row=1,
            col=2,
        )
    reset = {
        label: df.attrs.get("reset_frame_episodes") or []
        for label, df in frames.items()
        if df.attrs.get("reset_frame_episodes")
    }
    if reset:
        listed = "; ".join(
            f"{label}: episode(s) {', '.join(map(str, e))}" for label, e in reset.items()
        )
        title = (
            f"{title or 'distance from the start state'}<br><sup>began on the emulator's reset "
            f"frame (no no-op start), shaded unlike the rest, so measured from their second "
            f"frame: {listed}</sup>"
        )
    fig.update_xaxes(title_text="step in episode (agent steps)")
    fig.update_yaxes(title_text="distance (gray levels)", row=1, col=1)
    fig.update_yaxes(title_text="states", row=1, col=2)
    if not frames:
        no_data_message(fig, "no store to measure")
    fig.update_layout(title=title, barmode="overlay", template="plotly_white", height=380)
    return fig


def compare_stores_figure(
    stores: Mapping[str, TransitionStore], title: str | None = None
) -> go.Figure:
    """Several datasets side by side: action frequencies, episode returns and lengths, and the
    share of steps with a non-zero reward.

    Returns:
        A 2x2 figure; every trace is named after its store's label.
    """
    whole = {label: whole_episodes(store) for label, store in stores.items()}
    cut = sum(w[2] for w in whole.values())
    left_out = f" ({cut} unfinished left out)" if cut else ""
    fig = make_subplots(
        rows=2,
        cols=2,
        # the store summary's geometry: row 1's turned action names, its axis titles and row
        # 2's panel titles fit between the rows (plotly's default spacing put them on each other)
        vertical_spacing=SUMMARY_SPACING,
        subplot_titles=(
            "action frequency",
            f"returns of whole episodes{left_out}",
            f"lengths of whole episodes{left_out}",
            "reward density (share of steps with r != 0)",
        ),
    )
    # one set of bins for every store, centred on whole scores (`integer_bins`)
    bins = [integer_bins(np.concatenate([w[i] for w in whole.values()] or [[]])) for i in (0, 1)]
    for k, (label, store) in enumerate(stores.items()):
        color = _PALETTE[k % len(_PALETTE)]
        counts = np.bincount(store.actions, minlength=store.num_actions)
        common = {"name": label, "legendgroup": label, "marker": {"color": color}}
        fig.add_trace(
            go.Bar(
                x=action_labels(store.game, len(counts)),
                y=counts / max(1, counts.sum()),
                **common,
            ),
            row=1,
            col=1,
        )
        for i, (row, col) in enumerate(((1, 2), (2, 1))):  # returns, lengths
            histogram = go.Histogram(
                x=whole[label][i], xbins=bins[i], opacity=0.6, showlegend=False, **common
            )
            fig.add_trace(histogram, row=row, col=col)
        fig.add_trace(
            go.Bar(x=[label], y=[float((store.rewards != 0).mean())], showlegend=False, **common),
            row=2,
            col=2,
        )
    for (row, col), (x_title, y_title) in {
        (1, 1): ("action", "share of steps"),
        (1, 2): ("episode return (raw score)", "episodes"),
        (2, 1): ("episode length (agent steps)", "episodes"),
        (2, 2): ("store", "share of steps with r != 0"),
    }.items():
        fig.update_xaxes(title_text=x_title, row=row, col=col)
        fig.update_yaxes(title_text=y_title, row=row, col=col)
    if not stores:
        no_data_message(fig, "no store to compare")
    fig.update_annotations(font_size=SUMMARY_TITLE_SIZE)
    top, bottom = SUMMARY_MARGIN
    fig.update_layout(
        title=title,
        barmode="group",
        template="plotly_white",
        height=SUMMARY_HEIGHT,
        margin={"t": top, "b": bottom},
    )
    return fig


def stores_table(stores: Mapping[str, TransitionStore]) -> go.Figure:
    """The stores' `TransitionStore.summary` values as a table, one column per store."""
    summaries = {label: store.summary() for label, store in stores.items()}
    keys = list(next(iter(summaries.values())))
    columns = [keys]
    for summary in summaries.values():
        columns.append(
            [f"{v:.4g}" if isinstance(v, float) else str(v) for v in (summary[k] for k in keys)]
        )
    fig = go.Figure(
        go.Table(
            header={"values": ["", *summaries], "align": "left"},
            cells={"values": columns, "align": "left"},
        )
    )
    fig.update_layout(
        template="plotly_white",
        height=60 + 26 * len(keys),
        margin={"l": 10, "r": 10, "t": 10, "b": 10},
    )
    return fig
