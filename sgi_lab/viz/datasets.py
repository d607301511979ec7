"""Plotly figures of TransitionStores: frames, actions, returns, lengths, reward density."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
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


def store_summary_figure(store: TransitionStore, title: str | None = None) -> go.Figure:
    """Action histogram, episode returns, episode lengths and reward density in one figure."""
    returns, lengths, cut = whole_episodes(store)
    left_out = f" ({cut} unfinished left out)" if cut else ""
    fig = make_subplots(
        rows=2,
        cols=2,
        subplot_titles=(
            "action counts",
            f"returns of whole episodes{left_out}",
            f"lengths of whole episodes{left_out}",
            "reward density",
        ),
    )
    title = title or (
        f"{store.game} — {store.manifest.source} ({len(store):,} transitions{_sticky(store)})"
    )
    if len(store) == 0:
        return no_data_message(fig.update_layout(title=title), "the store holds no transitions")
    counts = np.bincount(store.actions, minlength=store.num_actions)
    names = action_labels(store.game, len(counts))
    fig.add_trace(go.Bar(x=names, y=counts, name="actions"), row=1, col=1)
    fig.add_trace(
        go.Histogram(x=returns, name="returns", xbins=integer_bins(returns)), row=1, col=2
    )
    fig.add_trace(
        go.Histogram(x=lengths, name="lengths", xbins=integer_bins(lengths)), row=2, col=1
    )
    window = max(1, len(store) // 200)
    density = _rolling_density(store.rewards != 0, window=window)
    fig.add_trace(
        go.Scatter(x=np.arange(len(density)) * window, y=density, mode="lines", name="reward rate"),
        row=2,
        col=2,
    )
    fig.update_xaxes(title_text="action", row=1, col=1)
    fig.update_yaxes(title_text="transitions", row=1, col=1)
    fig.update_xaxes(title_text="episode return (raw score)", row=1, col=2)
    fig.update_yaxes(title_text="episodes", row=1, col=2)
    fig.update_xaxes(title_text="episode length (agent steps)", row=2, col=1)
    fig.update_yaxes(title_text="episodes", row=2, col=1)
    fig.update_xaxes(title_text=f"row of the store (windows of {window:,})", row=2, col=2)
    fig.update_yaxes(title_text="reward ≠ 0 (fraction)", row=2, col=2)
    fig.update_layout(
        title=title,
        showlegend=False,
        height=600,
    )
    return fig


def whole_episodes(store: TransitionStore) -> tuple[np.ndarray, np.ndarray, int]:
    """``(returns, lengths, left out)`` of the store's whole episodes: one the collection
    stopped in the middle of (no terminal at its end: the store's last) would add a return and
    a length no whole episode has, so it is left out and counted."""
    if not len(store):
        return np.zeros(0), np.zeros(0, np.int64), 0
    whole = store.terminals[store.episode_ends]
    cut = int((~whole).sum())
    return store.episode_returns()[whole], store.episode_lengths()[whole], cut


def integer_bins(values: np.ndarray, most: int = 30) -> dict[str, float] | None:
    """Histogram bins centred on whole numbers for whole-number ``values`` (scores, lengths),
    at most ``most`` of them: plotly's own bins can centre one below a game's lowest score
    (Pong: a bar at -23, under its -21); None (plotly's bins) for other values."""
    values = np.asarray(values, dtype=float)
    if not len(values) or not np.all(values == np.round(values)):
        return None
    low, high = float(values.min()), float(values.max())
    size = float(max(1, int(np.ceil((high - low + 1) / most))))
    return {"start": low - size / 2, "end": high + size / 2, "size": size}


def _sticky(store: TransitionStore) -> str:
    """', sticky actions p=0.25' (DQN Replay), ', no sticky actions' (Atari 100k), or '' when
    the store does not record it."""
    p = store.sticky_action_prob
    if p is None:
        return ""
    return f", sticky actions p={p:g}" if p > 0 else ", no sticky actions"


def _rolling_density(mask: np.ndarray, window: int) -> np.ndarray:
    usable = len(mask) // window * window
    return mask[:usable].reshape(-1, window).mean(axis=1)


def frame_strip(
    store: TransitionStore, episode: int = 0, count: int = 8, stride: int = 10
) -> go.Figure:
    """A strip of ``count`` frames from an episode, every ``stride`` steps, pixels square
    (84x84 frames stay square); a MinAtar frame is a grid of its channels, each in its own
    colour, named in the legend (`sgi_lab.viz.common.channel_image`); a message when the store
    has no such episode."""
    title = f"episode {episode} of {store.game}: frames every {stride} agent steps"
    if not 0 <= episode < store.num_episodes:
        fig = go.Figure().update_layout(title=title, height=220)
        return no_data_message(fig, f"no episode {episode}: the store has {store.num_episodes}")
    start, end = int(store.episode_starts[episode]), int(store.episode_ends[episode])
    rows = np.arange(start, end + 1, max(1, stride))[:count]
    frames = store.gather_frames(rows)
    fig = make_subplots(
        rows=1,
        cols=len(rows),
        subplot_titles=[f"t={r - start}" for r in rows],
        horizontal_spacing=0.01,
    )
    for i, frame in enumerate(frames):
        fig.add_trace(frame_trace(frame), row=1, col=i + 1)
    square_pixels(fig, len(rows))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    grids = frames.ndim == 4  # (N, C, H, W): MinAtar's channels
    if grids:
        add_channel_legend(fig, channel_names(store.game, frames.shape[1]))
    fig.update_layout(
        title=title,
        height=max(220, 1100 // max(1, len(rows)) + 90) + 40 * grids,
        margin={"l": 10, "r": 10, "t": 80, "b": 10 + 40 * grids},
        showlegend=grids,
    )
    return fig


def coverage_figure(
    coverages: dict[str, dict],
    title: str = "state coverage: distinct cells (a frame in 12x12 blocks at 8 gray levels)",
) -> go.Figure:
    """Distinct cells against rows of data, one line per store.

    Args:
        coverages: ``{label: sgi_lab.data.coverage.state_coverage(store, ...)}``.
        title: figure title.
    """
    fig = go.Figure()
    if not coverages:
        no_data_message(fig, "no store to measure")
    for label, cov in coverages.items():
        name = f"{label}: {cov['cells_per_1k']:.1f} cells / 1k rows"
        fig.add_trace(go.Scatter(x=cov["rows"], y=cov["distinct_cells"], mode="lines", name=name))
    fig.update_layout(
        title=title,
        xaxis_title="rows of data",
        yaxis_title="distinct cells",  # a cell: 12x12 blocks at 8 gray levels (the title)
        height=380,
    )
    return fig
