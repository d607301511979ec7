"""The goal-reward figures keep their titles whole and apart: the nearest frames' subtitle is
wrapped (plotly cuts a long line at the figure's edge) inside a top margin that holds it above
the panels' titles, and the trajectory's legend stays off its x axis's title."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from sgi_lab.data import TransitionStoreWriter
from sgi_lab.data.store import TransitionStore
from sgi_lab.viz import goal_rewards


@pytest.fixture
def store(tmp_path):
    writer = TransitionStoreWriter.create(
        tmp_path / "s", game="Pong", source="synthetic", num_actions=6, chunk_size=16
    )
    for t in range(30):
        writer.append(np.full((84, 84), t, np.uint8), t % 6, 0.0, t == 29, t == 0)
    return TransitionStore(writer.close())


def _nearest(collapsed: bool) -> pd.DataFrame:
    nearest = pd.DataFrame(
        {"row": [3, 4, 5, 6, 7, 8, 9, 10], "episode": 0, "step": range(3, 11)}
    ).assign(cosine=[0.999999 - 1e-7 * i for i in range(8)])
    low = 0.99999 if collapsed else 0.2
    nearest.attrs["searched_cosine"] = {
        "searched": 123_456, "min": low, "median": 0.999995, "max": 0.999999
    }  # fmt: skip
    return nearest


def _lines(text: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", line) for line in text.split("<br>")]


@pytest.mark.parametrize("collapsed", [True, False])
def test_the_nearest_frames_title_is_wrapped_and_clear_of_the_panel_titles(store, collapsed):
    fig = goal_rewards.nearest_frames_figure(store, _nearest(collapsed))
    title = fig.layout.title.text
    lines = _lines(title)
    assert all(len(line) <= goal_rewards.TITLE_WRAP for line in lines)
    said = " ".join(lines)
    assert ("a collapsed encoder: this ranking is rounding noise" in said) is collapsed
    # pixels from the top: where the title starts, its lines (22 px, a subtitle's 16), then the
    # panels' titles above the panels (up to three lines of 15 px)
    top = (1 - fig.layout.title.y) * fig.layout.height
    panel_lines = max(len(a.text.split("<br>")) for a in fig.layout.annotations)
    needed = top + 22 + 16 * (len(lines) - 1) + 15 * panel_lines
    assert fig.layout.margin.t >= needed


def test_the_trajectory_legend_sits_beside_the_panels():
    df = pd.DataFrame(
        {
            "step": range(10),
            "row": range(10),
            "similarity": np.linspace(0.1, 0.9, 10),
            "goal_reward": np.full(10, 0.08),
            "action": [i % 3 for i in range(10)],
            **{f"q_{a}": np.linspace(0, 1, 10) + a for a in range(3)},
        }
    )
    fig = goal_rewards.goal_trajectory_figure(df, ["NOOP", "FIRE", "RIGHT"])
    legend = fig.layout.legend
    # a horizontal legend under the panels sat on "step in episode (agent steps)"
    assert legend.orientation != "h" and legend.x >= 1.0 and legend.xanchor == "left"
