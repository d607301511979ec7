"""A study's pre-registered test: P(improvement) of one arm over another, its stratified bootstrap
interval, a stratified permutation test, and Holm's adjustment across a family of contrasts.

Scores come per game (a list of 1-D arrays, one per game, any number of runs each): an arm's
agents on a game are exchangeable, its games are strata. P(improvement) is rliable's
(Agarwal et al., 2021): the mean over games of P(X > Y) + P(X = Y) / 2, each the Mann-Whitney
statistic U / (n m). Under "the arm makes no difference" the labels are exchangeable within
each game, which the permutation test uses: its p value is exact up to the resampling
(``(1 + hits) / (1 + permutations)``, never 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import rankdata

__all__ = [
    "GameScores",
    "holm",
    "iqm_of",
    "p_improvement",
    "p_improvement_test",
    "permutation_statistics",
]

GameScores = Sequence[np.ndarray]
"""One 1-D array of scores per game (the runs of one arm on that game)."""


def _games(x: GameScores, y: GameScores) -> list[tuple[np.ndarray, np.ndarray]]:
    if len(x) != len(y) or not len(x):
        raise ValueError(f"scores for the same games on both sides, got {len(x)} and {len(y)}")
    pairs = [(np.asarray(a, float).ravel(), np.asarray(b, float).ravel()) for a, b in zip(x, y)]
    for k, (a, b) in enumerate(pairs):
        if not (a.size and b.size) or np.isnan(a).any() or np.isnan(b).any():
            raise ValueError(f"game {k}: at least one finite score on each side")
    return pairs


def p_improvement(x: GameScores, y: GameScores) -> float:
    """P(X > Y) + P(X = Y) / 2 over every pair of runs of each game, averaged over games.

    >>> p_improvement([np.array([1.0, 3.0])], [np.array([2.0])])
    0.5
    """
    values = []
    for a, b in _games(x, y):
        greater = (a[:, None] > b[None, :]).mean()
        equal = (a[:, None] == b[None, :]).mean()
        values.append(greater + equal / 2)
    return float(np.mean(values))


def permutation_statistics(
    x: GameScores, y: GameScores, permutations: int, rng: np.random.Generator
) -> np.ndarray:
    """P(improvement) of ``permutations`` relabellings: within each game the pooled runs are
    shuffled and the first ``len(x[g])`` called X. Uses ranks: U = (sum of X's midranks) -
    n(n+1)/2, which equals the pairwise count with ties as halves. Returns shape
    ``(permutations,)``."""
    total = np.zeros(permutations)
    pairs = _games(x, y)
    for a, b in pairs:
        ranks = rankdata(np.concatenate([a, b]))  # midranks: ties count a half
        n, m = a.size, b.size
        order = np.argsort(rng.random((permutations, n + m)), axis=1)[:, :n]
        u = ranks[order].sum(axis=1) - n * (n + 1) / 2
        total += u / (n * m)
    return total / len(pairs)


def p_improvement_test(
    x: GameScores,
    y: GameScores,
    resamples: int = 10_000,
    rng: np.random.Generator | None = None,
    level: float = 0.95,
) -> dict[str, Any]:
    """P(improvement) of X over Y with its stratified bootstrap interval (each arm's runs
    resampled within each game, ``resamples`` times, percentile ends) and the two-sided
    stratified permutation p value of "no difference" (|P - 1/2| at least as large).

    Returns:
        ``{"value", "lower", "upper", "p", "resamples", "runs_x", "runs_y", "games"}``.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    pairs = _games(x, y)
    value = p_improvement(x, y)
    boot = np.zeros(resamples)
    for a, b in pairs:
        ra = a[rng.integers(0, a.size, (resamples, a.size))]
        rb = b[rng.integers(0, b.size, (resamples, b.size))]
        # P(X > Y) per resample through ranks of the pooled resample (ties as halves)
        pooled = np.concatenate([ra, rb], axis=1)
        ranks = rankdata(pooled, axis=1)
        u = ranks[:, : a.size].sum(axis=1) - a.size * (a.size + 1) / 2
        boot += u / (a.size * b.size)
    boot /= len(pairs)
    tail = (1 - level) / 2
    lower, upper = np.quantile(boot, [tail, 1 - tail])
    null = permutation_statistics(x, y, resamples, rng)
    hits = int((np.abs(null - 0.5) >= abs(value - 0.5) - 1e-12).sum())
    return {
        "value": value,
        "lower": float(lower),
        "upper": float(upper),
        "p": (1 + hits) / (1 + resamples),
        "resamples": resamples,
        "runs_x": [a.size for a, _ in pairs],
        "runs_y": [b.size for _, b in pairs],
        "games": len(pairs),
    }


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjustment: the k-th smallest of m p values times (m - k + 1), made
    non-decreasing in that order and capped at 1. A contrast is rejected at family-wise error
    rate alpha when its adjusted p value is at most alpha.

    >>> holm([0.01, 0.04, 0.03]).round(2).tolist()
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(p_values, float)
    order = np.argsort(p, kind="stable")
    m = p.size
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out


def iqm_of(scores: GameScores) -> float:
    """The interquartile mean of every run's score on every game together (rliable's IQM of a
    runs x games matrix, which here may be ragged): the mean of the middle 50 %."""
    flat = np.sort(np.concatenate([np.asarray(s, float).ravel() for s in scores]))
    n = flat.size
    if n == 0:
        raise ValueError("no scores")
    # scipy.stats.trim_mean's cut: int(0.25 n) from each end
    cut = int(0.25 * n)
    return float(flat[cut : n - cut].mean())
