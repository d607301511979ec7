"""What every figure of `sgi_lab.viz` shares: a message when there is nothing to draw, game
action names for labels, image strips with square pixels, and JSON-safe numbers."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from sgi_lab.envs import action_names

__all__ = ["action_labels", "finite_or_none", "no_data_message", "square_pixels"]


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
