"""The datasets notebook's store summary: a reward panel that reads (rates per 1,000 rows, by
sign, in windows long enough to hold rewards) and panel titles that never overlap."""

from __future__ import annotations

import numpy as np
import pytest

from sgi_lab.data import TransitionStoreWriter
from sgi_lab.data.store import TransitionStore
from sgi_lab.viz import datasets


def test_reward_rates_against_hand_counts():
    # 2,000 rows: a -1 every 50 rows (40 of them), a +1 at rows 10, 1,010 and 1,510
    rewards = np.zeros(2000)
    rewards[49::50] = -1.0
    rewards[[10, 1010, 1510]] = 1.0
    rates = datasets.reward_rates(rewards, points=100, per_window=10)
    # 43 rewards: 10 of them on average take ceil(10 * 2000 / 43) = 466 rows (> 2000 // 100)
    assert rates["window"] == 466
    assert list(rates["starts"]) == [0, 466, 932, 1398]  # 4 whole windows, 136 rows left over
    # rows 0-465: -1 at 49, 99, ..., 449 (9 of them) and the +1 at 10
    assert rates["negative"][0] == pytest.approx(1000 * 9 / 466)
    assert rates["positive"][0] == pytest.approx(1000 * 1 / 466)
    assert rates["positive"][1] == 0.0  # rows 466-931 won no point
    assert rates["mean"] == pytest.approx(1000 * 43 / 2000)  # 21.5 per 1,000 rows


def test_reward_rates_of_a_store_without_rewards_or_rows():
    assert datasets.reward_rates(np.zeros(500))["window"] == 5  # 500 // 100: nothing to wait for
    empty = datasets.reward_rates(np.zeros(0))
    assert empty["mean"] == 0.0 and len(empty["starts"]) == 0


@pytest.fixture
def pong_store(tmp_path):
    """1,200 rows of Pong-like play: a point lost every 40 rows, one won, 21-point episodes."""
    writer = TransitionStoreWriter.create(
        tmp_path / "s", game="Pong", source="synthetic", num_actions=6, chunk_size=256
    )
    points, first = 0, True
    for t in range(1200):
        reward = -1.0 if t % 40 == 39 else (1.0 if t == 500 else 0.0)
        points += reward != 0
        terminal = points == 21
        writer.append(np.zeros((84, 84), np.uint8), t % 6, reward, terminal, first)
        first, points = terminal, 0 if terminal else points
    return TransitionStore(writer.close())


def test_the_reward_panel_shows_each_sign_per_thousand_rows(pong_store):
    fig = datasets.store_summary_figure(pong_store)
    lines = {t.name: t for t in fig.data if t.legendgroup == "rewards"}
    assert set(lines) == {"r < 0", "r > 0"}
    # 31 rewards: windows of ceil(10 * 1200 / 31) = 388 rows; rows 388-775 lose 10 points
    assert list(lines["r < 0"].x) == [0, 388, 776]
    assert max(lines["r < 0"].y) == pytest.approx(1000 * 10 / 388)
    titles = [a.text for a in fig.layout.annotations]
    assert "rewards per 1,000 transitions (mean 25.8)" in titles  # 31 rewards in 1,200 rows
    assert [t.showlegend for t in fig.data[:3]] == [False] * 3  # only the reward lines in it


def _text_width(text: str, size: float) -> float:
    """A generous width of one line of text in pixels (0.6 em a character)."""
    return 0.6 * size * max(len(line) for line in text.split("<br>"))


def test_no_two_titles_of_the_summary_overlap(pong_store):
    fig = datasets.store_summary_figure(pong_store)
    width = 1000  # the notebook's width (JupyterLab's output area at 100% zoom, about)
    layout = fig.layout
    plot_w = width - layout.margin.l - layout.margin.r if layout.margin.l else width - 160
    plot_h = layout.height - layout.margin.t - layout.margin.b
    titles = list(layout.annotations)
    # side by side: the two titles of a row keep apart
    for left, right in ((titles[0], titles[1]), (titles[2], titles[3])):
        size = left.font.size
        gap = (right.x - left.x) * plot_w
        assert gap > (_text_width(left.text, size) + _text_width(right.text, size)) / 2
    # between the rows: row 1's tick labels (up to 45 px turned), its axis titles (20 px) and
    # row 2's titles (one line) fit in the spacing
    row1_bottom = layout.yaxis.domain[0]
    row2_top = layout.yaxis3.domain[1]
    assert (row1_bottom - row2_top) * plot_h >= 45 + 20 + titles[2].font.size + 10
    # the figure's title sits in the top margin, above row 1's titles (one line each)
    assert layout.margin.t >= 2 * 20 + titles[0].font.size
