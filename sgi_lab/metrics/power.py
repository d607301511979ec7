"""What a study can detect before it runs: power, minimum detectable effect, seeds needed and
the simulated coverage of its intervals, by resampling a pilot's per-game scores.

The model: each simulated study draws ``seeds`` runs per game for the baseline and for the
treatment from the pilot's runs of that game (a smoothed bootstrap, `_smoothed`); the treatment's scores are
multiplied by ``1 + effect`` (a relative gain, which multiplies the IQM by exactly that; a
normalised score of 0 stays 0: an arm that cannot learn a game is not helped by any effect).
It is then tested as the study's question says: the stratified permutation test of
P(improvement) (`sgi_lab.metrics.hypothesis`), at the level Holm's first step uses for the
family (alpha / contrasts), so the power is that of the contrast that must clear the
strictest bar. Every effect is tried on the same simulated draws (common random numbers), so
power grows with the effect as it should and the search for the smallest effect is stable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from sgi_lab.metrics.hypothesis import GameScores, iqm_of

__all__ = [
    "Draws",
    "coverage",
    "draw_studies",
    "minimum_detectable_effect",
    "power",
    "seeds_needed",
]


@dataclass(frozen=True)
class Draws:
    """Simulated studies: per game, ``baseline`` and ``treatment`` of shape (sims, seeds), and
    each game's permutation orders (perms, 2 seeds): shared by every effect tried."""

    baseline: list[np.ndarray]
    treatment: list[np.ndarray]
    orders: list[np.ndarray]

    @property
    def seeds(self) -> int:
        return self.baseline[0].shape[1]


def draw_studies(
    pilot: GameScores, seeds: int, sims: int = 400, permutations: int = 1000, seed: int = 0
) -> Draws:
    """``sims`` studies of ``seeds`` runs per arm and game, drawn from ``pilot`` (one array of
    scores per game), with the permutation orders their tests use."""
    if seeds < 2:
        raise ValueError(f"seeds: at least 2 per arm and game, got {seeds}")
    rng = np.random.default_rng(seed)
    games = [np.asarray(g, float).ravel() for g in pilot]
    if not games or any(g.size < 2 for g in games):
        raise ValueError("pilot: at least 2 runs on every game")
    base = [_smoothed(g, rng, (sims, seeds)) for g in games]
    treat = [_smoothed(g, rng, (sims, seeds)) for g in games]
    orders = [np.argsort(rng.random((permutations, 2 * seeds)), axis=1) for _ in games]
    return Draws(base, treat, orders)


def _smoothed(scores: np.ndarray, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Draws from a pilot game's runs by the variance-corrected smoothed bootstrap: a run drawn
    with replacement plus Gaussian noise of Silverman's bandwidth, shrunk toward the mean so the
    spread is the pilot's sample standard deviation (Efron and Tibshirani 1993, sec. 16.5). A plain bootstrap of 3
    runs has 3 values: baseline and treatment then tie often, and a multiplied tie always goes
    to the treatment, which inflates power several-fold."""
    mean, sd = scores.mean(), scores.std(ddof=1)
    drawn = scores[rng.integers(0, scores.size, shape)]
    if sd == 0:
        return drawn
    h = sd * (4 / (3 * scores.size)) ** 0.2
    # scaled so the draws' variance is the pilot's unbiased one (its plug-in variance + h^2)
    scale = sd / np.sqrt(scores.var() + h**2)
    return mean + (drawn - mean + h * rng.standard_normal(shape)) * scale


def _rejections(draws: Draws, effect: float, alpha: float) -> np.ndarray:
    """Whether each simulated study's permutation test rejects "no difference" (two-sided)."""
    n = draws.seeds
    observed = 0.0
    null = 0.0
    for base, treat, order in zip(draws.baseline, draws.treatment, draws.orders, strict=True):
        pooled = np.concatenate([treat * (1 + effect), base], axis=1)  # (sims, 2n)
        ranks = rankdata(pooled, axis=1)
        observed = observed + (ranks[:, :n].sum(axis=1) - n * (n + 1) / 2) / (n * n)
        chosen = ranks[:, order[:, :n]]  # (sims, perms, n): each permutation's X ranks
        null = null + (chosen.sum(axis=2) - n * (n + 1) / 2) / (n * n)
    games = len(draws.baseline)
    observed, null = observed / games, null / games
    hits = (np.abs(null - 0.5) >= np.abs(observed - 0.5)[:, None] - 1e-12).sum(axis=1)
    p = (1 + hits) / (1 + null.shape[1])
    return p <= alpha


def power(draws: Draws, effect: float, alpha: float = 0.05) -> float:
    """The fraction of the simulated studies whose test rejects at ``alpha`` with the
    treatment's scores multiplied by ``1 + effect``."""
    return float(_rejections(draws, effect, alpha).mean())


def minimum_detectable_effect(
    draws: Draws, alpha: float = 0.05, target: float = 0.8, largest: float = 4.0
) -> float | None:
    """The smallest relative gain detected with probability ``target`` (bisection to 0.005 on
    the common draws); None when even ``largest`` is not (a floor no gain lifts)."""
    if power(draws, largest, alpha) < target:
        return None
    low, high = 0.0, largest
    while high - low > 0.005:
        mid = (low + high) / 2
        low, high = (mid, high) if power(draws, mid, alpha) < target else (low, mid)
    return high


def seeds_needed(
    pilot: GameScores,
    effect: float,
    alpha: float = 0.05,
    target: float = 0.8,
    candidates: Sequence[int] = (3, 5, 10, 15, 20, 30, 40, 60),
    sims: int = 400,
    permutations: int = 1000,
    seed: int = 0,
) -> dict[int, float]:
    """Power at each candidate seed count (runs per arm and game) for ``effect``, stopping at
    the first that reaches ``target``: ``{seeds: power}``."""
    found = {}
    for n in candidates:
        found[n] = power(draw_studies(pilot, n, sims, permutations, seed), effect, alpha)
        if found[n] >= target:
            break
    return found


def coverage(
    pilot: GameScores,
    seeds: int,
    sims: int = 400,
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Under no difference (both arms drawn from the pilot), how often the nominal ``level``
    stratified bootstrap intervals cover the truth: P(improvement)'s 1/2, and the IQM
    difference's 0. Returns ``{"p_improvement": ..., "iqm_difference": ...}``."""
    rng = np.random.default_rng(seed)
    games = [np.asarray(g, float).ravel() for g in pilot]
    tail = (1 - level) / 2
    covered = {"p_improvement": 0, "iqm_difference": 0}
    for _ in range(sims):
        x = [_smoothed(g, rng, (seeds,)) for g in games]
        y = [_smoothed(g, rng, (seeds,)) for g in games]
        poi = np.zeros(resamples)
        diff = np.zeros(resamples)
        bx = [a[rng.integers(0, seeds, (resamples, seeds))] for a in x]
        by = [b[rng.integers(0, seeds, (resamples, seeds))] for b in y]
        for a, b in zip(bx, by, strict=True):
            ranks = rankdata(np.concatenate([a, b], axis=1), axis=1)
            poi += (ranks[:, :seeds].sum(axis=1) - seeds * (seeds + 1) / 2) / seeds**2
        poi /= len(games)
        for r in range(resamples):
            diff[r] = iqm_of([a[r] for a in bx]) - iqm_of([b[r] for b in by])
        lo, hi = np.quantile(poi, [tail, 1 - tail])
        covered["p_improvement"] += lo <= 0.5 <= hi
        lo, hi = np.quantile(diff, [tail, 1 - tail])
        covered["iqm_difference"] += lo <= 0 <= hi
    return {k: v / sims for k, v in covered.items()}
