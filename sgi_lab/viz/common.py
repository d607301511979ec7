"""What every figure of `sgi_lab.viz` shares: a message when there is nothing to draw, game
action names for labels, image strips with square pixels (grey Atari frames, MinAtar frames as
coloured channel grids), and JSON-safe numbers."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.colors import hex_to_rgb, qualitative

from sgi_lab.envs import action_names
from sgi_lab.envs.minatar import is_minatar

__all__ = [
    "CHANNEL_COLORS",
    "action_labels",
    "add_channel_legend",
    "channel_image",
    "channel_names",
    "chance_lines",
    "finite_or_none",
    "frame_trace",
    "no_data_message",
    "square_pixels",
    "title_above_panels",
]

CHANNEL_COLORS: tuple[str, ...] = tuple(qualitative.Plotly)
"""One colour per channel of a MinAtar frame (10: Seaquest's channel count)."""
CELL_PIXELS = 12
"""Screen pixels per MinAtar cell: a 10x10 grid drawn 120 px wide, a grid line between cells."""
_GRID = (225, 225, 225)
_BACKGROUND = (255, 255, 255)


TITLE_TOP = 10
"""Pixels from a figure's top edge to its title's first line (`title_above_panels`)."""
TITLE_LINE = 22
"""Pixels a title line takes: plotly's line spacing (1.3 em) of its 17-px title font."""
TITLE_GAP = 6
"""Pixels kept clear between a title's last line and the panels' titles below it."""


def title_above_panels(
    title: str | None, panel_title_size: float = 13, panel_title_lines: int = 1
) -> dict[str, Any]:
    """Layout keys that hold a figure's title, however many lines (``<br>``), in its top
    margin above the panels' titles: the title's first line `TITLE_TOP` px from the top, and a
    margin of the title's lines, `TITLE_GAP` and the panels' titles (1.3 em a line and the
    annotation's 2 px). plotly otherwise centres the first line in a 100-px margin and runs the
    next ones down onto the panels' titles (a subtitle sat on "total loss")."""
    lines = title.count("<br>") + 1 if title else 0
    panels = math.ceil((1.3 * panel_title_size + 2) * panel_title_lines)
    top = TITLE_TOP + TITLE_LINE * lines + TITLE_GAP + panels
    placed = {"y": 1, "yref": "container", "yanchor": "top", "pad": {"t": TITLE_TOP}}
    return {"title": {"text": title, **placed}, "margin": {"t": top}}


def chance_lines(fig: go.Figure, levels: Mapping[str, float]) -> go.Figure:
    """A dotted line labelled ``chance`` at ``levels[key]`` in every panel of ``fig`` that
    draws metric ``key`` (a trace named ``key``, or ``key (run)`` for several runs), e.g. the
    inverse-dynamics accuracy at 1 / number of actions, what guessing scores; ``fig`` back."""
    done = set()
    for trace in fig.data:
        name = str(trace.name or "")
        for key, level in levels.items():
            axes = (trace.xaxis or "x", trace.yaxis or "y")
            if (name == key or name.startswith(f"{key} (")) and (axes, key) not in done:
                done.add((axes, key))
                fig.add_shape(
                    type="line", xref=f"{axes[0]} domain", x0=0, x1=1, yref=axes[1], y0=level,
                    y1=level, line={"dash": "dot", "color": "gray", "width": 1}, name=f"chance:{key}",
                )  # fmt: skip
                fig.add_annotation(
                    text=f"chance {level:.2f}", xref=f"{axes[0]} domain", x=1, xanchor="right",
                    yref=axes[1], y=level, yanchor="bottom", showarrow=False,
                    font={"color": "gray", "size": 10}, name=f"chance:{key}",
                )  # fmt: skip
    return fig


def no_data_message(fig: go.Figure, text: str) -> go.Figure:
    """Write ``text`` across the middle of ``fig`` (and hide its empty axes): a figure with
    nothing to show says why instead of drawing blank axes."""
    fig.add_annotation(
        text=text,
        showarrow=False,
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
        font={"size": 14},
        name="no data",
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def action_labels(game: str | None, num_actions: int, full_action_space: bool = False) -> list[str]:
    """The game's action names (``NOOP``, ``FIRE``, ...) for ``num_actions`` actions, from
    ale-py; ``a0, a1, ...`` when the game is unknown or its action set has another size."""
    fallback = [f"a{i}" for i in range(num_actions)]
    if not game:
        return fallback

    for full in dict.fromkeys((full_action_space, num_actions == 18)):
        try:
            names = list(action_names(game, full_action_space=full))
        except Exception:  # an unknown or synthetic game: indices are all there is
            return fallback
        if len(names) == num_actions:
            return names
    return fallback


@functools.cache
def channel_names(game: str | None, channels: int) -> tuple[str, ...]:
    """What each channel of a frame shows: MinAtar's own names (``paddle``, ``ball``,
    ``trail``, ``brick`` for Breakout) when the game is a MinAtar one and minatar is installed,
    ``empty`` for the channels a game was padded with (``channels`` option), else ``channel i``.
    """
    names = [f"channel {i}" for i in range(channels)]
    if game and is_minatar(game):
        try:
            # lazy: minatar (GPL-3.0) is an optional extra, loaded only to name channels
            from sgi_lab.envs.minatar_games import game_module

            own = game_module(game.split("/", 1)[1].lower()).Env().channels
        except Exception:  # not installed, or a game it does not know: indices it is
            return tuple(names)
        for name, index in own.items():
            if index < channels:
                names[index] = name.replace("_", " ")
        names[len(own) :] = ["empty"] * max(0, channels - len(own))
    return tuple(names)


def channel_image(frame: np.ndarray, cell: int = CELL_PIXELS) -> np.ndarray:
    """A (C, H, W) frame of binary channels (MinAtar: 0 or 255 per cell) as an RGB grid.

    Each channel is drawn in its own colour (`CHANNEL_COLORS`, channel ``i`` in colour ``i``);
    a cell where several channels are on gets the mean of their colours, an empty cell white;
    cells are ``cell`` pixels wide with a light grid line between them.

    Returns:
        uint8 array of shape ``(H * cell, W * cell, 3)``.
    """
    frame = np.asarray(frame)
    if frame.ndim != 3:
        raise ValueError(f"a channel grid needs a (C, H, W) frame, got shape {frame.shape}")
    on = (frame > 0).astype(float)  # (C, H, W)
    colors = np.array(
        [hex_to_rgb(CHANNEL_COLORS[i % len(CHANNEL_COLORS)]) for i in range(len(frame))], float
    )
    count = on.sum(axis=0)
    mixed = np.einsum("chw,ck->hwk", on, colors) / np.maximum(count, 1)[..., None]
    rgb = np.where(count[..., None] > 0, mixed, np.array(_BACKGROUND, float))
    image = np.repeat(np.repeat(rgb, cell, axis=0), cell, axis=1).round().astype(np.uint8)
    image[::cell, :] = _GRID  # the first pixel row and column of every cell: grid lines
    image[:, ::cell] = _GRID
    return image


def frame_trace(frame: np.ndarray) -> go.Heatmap | go.Image:
    """A frame as a trace: an (H, W) grey frame as a ``Heatmap`` (rows flipped so the top of
    the screen is up), a (C, H, W) MinAtar frame as a ``go.Image`` of `channel_image`."""
    frame = np.asarray(frame)
    if frame.ndim == 3:
        return go.Image(z=channel_image(frame), hoverinfo="skip")
    return go.Heatmap(z=frame[::-1], colorscale="gray", showscale=False, hoverinfo="skip")


def add_channel_legend(fig: go.Figure, names: Sequence[str]) -> go.Figure:
    """One legend entry per channel (a square of its `CHANNEL_COLORS` colour, named): what the
    colours of `channel_image` mean: a ``Scatter`` with no point each."""
    for i, name in enumerate(names):
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=name,
                marker={"symbol": "square", "size": 12, "color": CHANNEL_COLORS[i % 10]},
                hoverinfo="skip",
            )  # on axes x/y: the first panel's
        )
    fig.update_layout(
        showlegend=True, legend={"orientation": "h", "y": -0.02, "yanchor": "top", "x": 0}
    )
    return fig


def square_pixels(fig: go.Figure, panels: int) -> go.Figure:
    """Lock every panel's y axis to its own x axis (one pixel = one unit both ways), so image
    panels keep their aspect ratio whatever the figure's width."""
    for i in range(1, panels + 1):
        suffix = "" if i == 1 else str(i)
        fig.layout[f"yaxis{suffix}"].update(
            scaleanchor=f"x{suffix}", scaleratio=1, constrain="domain"
        )
        fig.layout[f"xaxis{suffix}"].update(constrain="domain")
    return fig


def finite_or_none(values: Iterable[Any]) -> list[Any]:
    """Floats with NaN and inf replaced by None (JSON null: a gap in plotly), since a widget's
    JSON refuses them ("Out of range float values are not JSON compliant")."""
    out: list[Any] = []
    for v in values:
        if isinstance(v, (float, np.floating)) and not math.isfinite(float(v)):
            out.append(None)
        elif isinstance(v, np.generic):
            out.append(v.item())
        else:
            out.append(v)
    return out


def category_labels(values: Sequence[Any], names: Sequence[str] | None) -> list[str]:
    """``names[v]`` for integer ``v`` where names are given, else ``str(v)``."""
    if names is None:
        return [str(v) for v in values]
    return [names[int(v)] if 0 <= int(v) < len(names) else str(v) for v in values]
