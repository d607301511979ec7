"""The MinAtar score: 0 at the measured uniform-random return, 1 at the reference agent's, HNS
for Atari games, and clear refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

import sgi_lab.metrics.minatar as minatar_score
from sgi_lab.envs.minatar import MINATAR_GAMES
from sgi_lab.metrics import (
    human_normalized_score,
    minatar_normalized_score,
    minatar_random_score,
    minatar_reference_score,
    normalization_name,
    normalized_score,
)

REFERENCE = {g: 10.0 * (i + 2) for i, g in enumerate(MINATAR_GAMES)}  # 20, 30, ..., 60


@pytest.fixture
def with_reference(monkeypatch):
    """The table with hand-set references, round numbers to compute by hand."""
    table = json.loads(minatar_score.MINATAR_SCORES_FILE.read_text())
    table["reference"]["values"] = dict(REFERENCE)
    monkeypatch.setattr(minatar_score, "_table", lambda: table)
    return table


def test_the_shipped_table_holds_measured_random_returns():
    table = json.loads(minatar_score.MINATAR_SCORES_FILE.read_text())
    assert set(table["random"]) == set(MINATAR_GAMES) == set(table["reference"]["values"])
    for row in table["random"].values():
        assert row["episodes"] >= 1000 and 0 <= row["mean"] < 10 and row["stderr"] > 0
    assert "Young & Tian (2019)" in table["reference"]["source"]
    assert (
        minatar_random_score("MinAtar/Space-Invaders")
        == table["random"]["minatar/space_invaders"]["mean"]
    )


def test_random_is_zero_and_reference_is_one(with_reference):
    for game in MINATAR_GAMES:
        low = minatar_random_score(game)
        high = minatar_reference_score(game)
        assert high == REFERENCE[game]
        assert minatar_normalized_score(game, low) == 0.0
        assert minatar_normalized_score(game, high) == pytest.approx(1.0)
    # Hand-computed: Breakout, halfway between random (0.416) and 30.
    low = with_reference["random"]["minatar/breakout"]["mean"]
    half = (low + 30.0) / 2
    assert minatar_normalized_score("minatar/breakout", half) == pytest.approx(0.5)


def test_arrays_broadcast_per_game_column(with_reference):
    games = ["minatar/breakout", "minatar/seaquest"]
    lows = [minatar_random_score(g) for g in games]
    scores = np.array([lows, [30.0, 50.0]])  # (runs, games)
    np.testing.assert_allclose(minatar_normalized_score(games, scores), [[0, 0], [1, 1]])


def test_normalized_score_picks_hns_or_the_minatar_score(with_reference):
    assert normalization_name("Pong") == "HNS"
    assert normalization_name("minatar/pong-like") == "MinAtar score"
    assert normalized_score("Pong", -3.05) == human_normalized_score("Pong", -3.05) == 0.5
    assert normalized_score("minatar/freeway", 40.0) == pytest.approx(1.0)
    mixed = normalized_score(["Pong", "minatar/freeway"], [[14.6, 40.0]])
    np.testing.assert_allclose(mixed, [[1.0, 1.0]])


def test_the_shipped_references_are_dqns_published_final_returns():
    published = {  # Young & Tian (2019), DQN at 5M frames, read off their learning curves
        "minatar/asterix": 16.8,
        "minatar/breakout": 10.0,
        "minatar/freeway": 50.2,
        "minatar/seaquest": 20.0,
        "minatar/space_invaders": 43.5,
    }
    for game, value in published.items():
        assert minatar_reference_score(game) == value
        assert minatar_normalized_score(game, value) == pytest.approx(1.0)
        assert minatar_normalized_score(game, minatar_random_score(game)) == 0.0
    # Hand-computed: Space Invaders at 23.8 is (23.8 - 4.095) / (43.5 - 4.095) = 0.5.
    assert minatar_normalized_score("minatar/space_invaders", 23.7975) == pytest.approx(0.5)


def test_refusals_name_the_culprit(monkeypatch):
    with pytest.raises(ValueError, match="'Pong' is not a MinAtar game"):
        minatar_normalized_score("Pong", 1.0)
    table = json.loads(minatar_score.MINATAR_SCORES_FILE.read_text())
    table["reference"]["values"]["minatar/breakout"] = None
    monkeypatch.setattr(minatar_score, "_table", lambda: table)
    with pytest.raises(ValueError, match=r"minatar/breakout: no published reference return .*json"):
        minatar_reference_score("minatar/breakout")


def test_metric_titles_name_what_a_score_of_one_is():
    from sgi_lab.metrics import SCORE_TITLES, SCORE_TOP, metric_label

    assert metric_label("games_above_human") == "#Games > Human"
    assert metric_label("games_above_human", "MinAtar score") == "#Games > DQN"
    assert metric_label("iqm", "MinAtar score") == "IQM"
    assert SCORE_TITLES["MinAtar score"].startswith("MinAtar score")
    assert SCORE_TOP == {"HNS": "human", "MinAtar score": "DQN reference"}
