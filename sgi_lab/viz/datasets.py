"""Plotly figures of TransitionStores: frames, actions, returns, lengths, reward rates."""

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

# The 2x2 summary's geometry: the gap between its rows holds row 1's tick labels (action names
# may turn 45 degrees), its axis titles and row 2's panel titles (a test measures it in pixels).
SUMMARY_HEIGHT, SUMMARY_MARGIN, SUMMARY_SPACING, SUMMARY_TITLE_SIZE = 720, (90, 60), 0.2, 13


def store_summary_figure(store: TransitionStore, title: str | None = None) -> go.Figure:
    """Action histogram, episode returns, episode lengths and the reward rate in one figure."""
    returns, lengths, cut = whole_episodes(store)
    left_out = f" ({cut} unfinished left out)" if cut else ""
    rates = reward_rates(store.rewards)
    fig = make_subplots(
        rows=2,
        cols=2,
        vertical_spacing=SUMMARY_SPACING,
        subplot_titles=(
            "action counts",
            f"returns of whole episodes{left_out}",
            f"lengths of whole episodes{left_out}",
            f"rewards per 1,000 transitions (mean {rates['mean']:.3g})"
            if len(store)
            else "rewards per 1,000 transitions",
        ),
    )
    fig.update_annotations(font_size=SUMMARY_TITLE_SIZE)
    title = title or (
        f"{store.game} — {store.manifest.source} ({len(store):,} transitions{_sticky(store)})"
    )
    top, bottom = SUMMARY_MARGIN
    fig.update_layout(
        title=title, showlegend=False, height=SUMMARY_HEIGHT, margin={"t": top, "b": bottom}
    )
    if len(store) == 0:
        return no_data_message(fig, "the store holds no transitions")
    counts = np.bincount(store.actions, minlength=store.num_actions)
    names = action_labels(store.game, len(counts))
    fig.add_trace(go.Bar(x=names, y=counts, name="actions", showlegend=False), row=1, col=1)
    fig.add_trace(
        go.Histogram(x=returns, name="returns", xbins=integer_bins(returns), showlegend=False),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Histogram(x=lengths, name="lengths", xbins=integer_bins(lengths), showlegend=False),
        row=2,
        col=1,
    )
    _add_reward_rates(fig, rates, row=2, col=2)
    fig.update_xaxes(title_text="action", row=1, col=1)
    fig.update_yaxes(title_text="transitions", row=1, col=1)
    fig.update_xaxes(title_text="episode return (raw score)", row=1, col=2)
    fig.update_yaxes(title_text="episodes", row=1, col=2)
    fig.update_xaxes(title_text="episode length (agent steps)", row=2, col=1)
    fig.update_yaxes(title_text="episodes", row=2, col=1)
    fig.update_xaxes(
        title_text=f"row of the store (windows of {rates['window']:,} rows)", row=2, col=2
    )
    fig.update_yaxes(title_text="rewards per 1k transitions", rangemode="tozero", row=2, col=2)
    return fig


def reward_rates(rewards: np.ndarray, points: int = 100, per_window: int = 10) -> dict:
    """Rewards of each sign per 1,000 transitions, in consecutive windows of the store's rows.

    A window is at least ``len // points`` rows (at most ``points`` windows) and long enough to
    hold ``per_window`` rewards on average (a shorter one draws a comb of 0s and single rewards).

    Returns:
        ``window`` (rows per window), ``starts`` (each window's first row), ``positive`` and
        ``negative`` (rewards > 0 and < 0 per 1,000 rows of each window), ``mean`` (rewards
        != 0 per 1,000 rows over the whole store).
    """
    rewards = np.asarray(rewards, dtype=float)
    n = len(rewards)
    nonzero = int(np.count_nonzero(rewards))
    mean = 1000.0 * nonzero / n if n else 0.0
    window = max(1, n // points)
    if nonzero:
        window = max(window, int(np.ceil(per_window * n / nonzero)))
    window = min(window, max(1, n))
    usable = n // window * window
    blocks = rewards[:usable].reshape(-1, window)
    return {
        "window": window,
        "starts": np.arange(len(blocks)) * window,
        "positive": 1000.0 * (blocks > 0).mean(axis=1),
        "negative": 1000.0 * (blocks < 0).mean(axis=1),
        "mean": mean,
    }


def _add_reward_rates(fig: go.Figure, rates: dict, row: int, col: int) -> None:
    """The reward-rate panel: a step line per sign that occurs, green r > 0 and red r < 0."""
    for key, name, color in (("positive", "r > 0", "#2ca02c"), ("negative", "r < 0", "#d62728")):
        if not np.any(rates[key]):
            continue
        fig.add_trace(
            go.Scatter(
                x=rates["starts"],
                y=rates[key],
                mode="lines",
                line={"shape": "hv", "color": color},
                name=name,
                showlegend=True,
                legendgroup="rewards",
            ),
            row=row,
            col=col,
        )
    if any(t.legendgroup == "rewards" for t in fig.data):
        fig.update_layout(
            showlegend=True, legend={"x": 1.0, "xanchor": "right", "y": 0.36, "yanchor": "top"}
        )


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
