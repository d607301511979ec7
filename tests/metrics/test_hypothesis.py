"""The pre-registered test's pieces: P(improvement), its interval and permutation p value, Holm,
and the power simulation, against hand-computed values and their defining properties."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sgi_lab.metrics.aggregate import iqm, probability_of_improvement
from sgi_lab.metrics.hypothesis import (
    holm,
    iqm_of,
    p_improvement,
    p_improvement_test,
    permutation_statistics,
)
from sgi_lab.metrics.power import (
    coverage,
    draw_studies,
    minimum_detectable_effect,
    power,
    seeds_needed,
)


def test_p_improvement_counts_ties_as_halves_and_equals_the_matrix_version():
    # game 1: X (1, 3) vs Y (2, 3): pairs 1<2, 1<3, 3>2, 3=3 -> (1 + 0.5) / 4
    # game 2: X (5, 5) vs Y (4, 6): 5>4, 5<6 twice -> 2 / 4
    x = [np.array([1.0, 3.0]), np.array([5.0, 5.0])]
    y = [np.array([2.0, 3.0]), np.array([4.0, 6.0])]
    assert p_improvement(x, y) == pytest.approx((1.5 / 4 + 2 / 4) / 2)
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 4, (5, 3)).astype(float), rng.integers(0, 4, (7, 3)).astype(float)
    assert p_improvement(list(a.T), list(b.T)) == pytest.approx(probability_of_improvement(a, b))


def test_the_permutation_p_value_is_the_exact_one_up_to_resampling():
    # one game, X (1, 2) vs Y (3, 4): P = 0. Of the C(4, 2) = 6 relabellings, two (P = 0 and
    # P = 1) are as far from 1/2: the exact two-sided p value is 1/3.
    x, y = [np.array([1.0, 2.0])], [np.array([3.0, 4.0])]
    test = p_improvement_test(x, y, resamples=20_000, rng=np.random.default_rng(0))
    assert test["value"] == 0.0
    assert test["p"] == pytest.approx(1 / 3, abs=0.015)
    # the relabellings' statistics are those of the 6 splits, each about equally often
    stats = permutation_statistics(x, y, 6_000, np.random.default_rng(2))
    pooled = [1.0, 2.0, 3.0, 4.0]
    exact = sorted(
        p_improvement([np.array(c)], [np.array([v for v in pooled if v not in c])])
        for c in itertools.combinations(pooled, 2)
    )
    assert sorted(set(np.round(stats, 6))) == sorted(set(np.round(exact, 6)))


def test_the_interval_holds_the_value_and_separated_arms_are_rejected():
    rng = np.random.default_rng(0)
    x = [rng.normal(1.0, 0.1, 10), rng.normal(2.0, 0.1, 10)]
    y = [rng.normal(0.0, 0.1, 10), rng.normal(1.0, 0.1, 10)]
    test = p_improvement_test(x, y, resamples=10_000, rng=rng)
    assert test["value"] == 1.0 and test["lower"] == 1.0 and test["p"] < 1e-3
    same = p_improvement_test(x, x, resamples=10_000, rng=rng)
    assert same["value"] == 0.5 and same["lower"] < 0.5 < same["upper"] and same["p"] > 0.9
    with pytest.raises(ValueError, match="game 1"):
        p_improvement_test(x, [y[0], np.array([])])


def test_holm_matches_the_hand_computed_step_down():
    # sorted 0.01, 0.03, 0.04: x3 = 0.03, x2 = 0.06, x1 = 0.04 -> kept non-decreasing: 0.06
    assert holm([0.01, 0.04, 0.03]).tolist() == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]).tolist() == pytest.approx([1.0, 1.0])
    assert holm([0.02]).tolist() == [0.02]


def test_iqm_of_ragged_games_equals_rliables_on_a_matrix():
    scores = np.arange(24, dtype=float).reshape(8, 3)
    assert iqm_of(list(scores.T)) == pytest.approx(iqm(scores))


PILOT = [np.array([0.02, 0.01, 0.03]), np.array([0.30, 0.28, 0.25]), np.array([0.13, 0.24, 0.11])]


def test_power_holds_its_size_under_no_effect_and_grows_with_the_effect():
    draws = draw_studies(PILOT, 5, sims=400, permutations=500, seed=0)
    assert power(draws, 0.0, 0.05) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 400)  # the test's size
    powers = [power(draws, e, 0.05) for e in (0.0, 0.25, 0.5, 1.0, 2.0)]
    assert powers == sorted(powers) and powers[-1] > 0.9
    mde = minimum_detectable_effect(draws, 0.05)
    assert mde is not None and power(draws, mde, 0.05) >= 0.8 > power(draws, mde - 0.01, 0.05)


def test_a_floor_no_gain_lifts_has_no_detectable_effect_and_more_seeds_give_more_power():
    floor = [np.zeros(3), np.zeros(3)]
    assert minimum_detectable_effect(draw_studies(floor, 5, sims=50, permutations=200)) is None
    found = seeds_needed(PILOT, 0.5, 0.05, candidates=(3, 10, 40), sims=200, permutations=300)
    assert list(found) == sorted(found) and list(found.values()) == sorted(found.values())
    assert found[max(found)] >= 0.8


def test_the_smoothed_bootstrap_keeps_the_pilots_mean_and_spread():
    draws = draw_studies(PILOT, 10, sims=4000, permutations=10)
    for game, drawn in zip(PILOT, draws.baseline, strict=True):
        assert drawn.mean() == pytest.approx(game.mean(), abs=0.005)
        assert drawn.std() == pytest.approx(game.std(ddof=1), rel=0.1)
        assert np.unique(drawn).size > 1000  # not 3 values: no ties handed to the treatment


def test_coverage_under_no_difference_is_near_nominal_at_ten_seeds():
    found = coverage(PILOT, 10, sims=60, resamples=300, seed=1)
    assert 0.8 <= found["p_improvement"] <= 1.0 and 0.8 <= found["iqm_difference"] <= 1.0
