"""Aggregate metrics of human-normalized scores, with stratified bootstrap confidence intervals.

A metric is a function of a ``(num_runs, num_games)`` HNS array, as in rliable (Agarwal et al.,
2021), which the paper follows for its IQM table (tab:IQMs). Median and mean are taken over the
per-game means, as in the paper's median/mean columns; IQM and optimality gap over all
runs × games. Confidence intervals come from `rliable.library.get_interval_estimates`
(percentile method, runs resampled within each game); rliable is a declared dependency.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.stats

__all__ = [
    "DEFAULT_METRICS",
    "METRICS",
    "METRIC_LABELS",
    "aggregate_scores",
    "aggregate_with_ci",
    "games_above_human",
    "games_above_zero",
    "iqm",
    "mean_hns",
    "median_hns",
    "mean_ci",
    "metric_label",
    "optimality_gap",
    "probability_of_improvement",
    "probability_of_improvement_with_ci",
    "seed_pairs",
]

Metric = Callable[[np.ndarray], float]


def _check(hns: np.ndarray) -> np.ndarray:
    hns = np.asarray(hns, dtype=float)
    if hns.ndim != 2:
        raise ValueError(f"expected a (num_runs, num_games) array, got shape {hns.shape}")
    return hns


def median_hns(hns: np.ndarray) -> float:
    """Median over games of the per-game mean HNS (the paper's "Mdn").

    Args:
        hns: ``(num_runs, num_games)`` human-normalized scores.
    """
    return float(np.median(_check(hns).mean(axis=0)))


def mean_hns(hns: np.ndarray) -> float:
    """Mean over games of the per-game mean HNS (the paper's "Mean").

    Args:
        hns: ``(num_runs, num_games)`` human-normalized scores.
    """
    return float(_check(hns).mean(axis=0).mean())


def iqm(hns: np.ndarray) -> float:
    """Interquartile mean: the mean of the middle 50% of all run × game scores.

    Pooling runs before trimming (rliable's ``aggregate_iqm``) is what makes IQM less noisy
    than the median of 26 per-game means.

    Args:
        hns: ``(num_runs, num_games)`` human-normalized scores.
    """
    return float(scipy.stats.trim_mean(_check(hns), proportiontocut=0.25, axis=None))


def optimality_gap(hns: np.ndarray, gamma: float = 1.0) -> float:
    """How far runs fall short of ``gamma`` (human level), with scores above it clipped.

    Args:
        hns: ``(num_runs, num_games)`` human-normalized scores.
        gamma: The target score; 1 is human level.

    Returns:
        ``gamma - mean(min(hns, gamma))`` over all runs × games; lower is better.
    """
    return float(gamma - np.minimum(_check(hns), gamma).mean())


def games_above_human(hns: np.ndarray) -> int:
    """Number of games whose mean HNS exceeds 1 (the paper's ">H").

    Args:
        hns: ``(num_runs, num_games)`` human-normalized scores.
    """
    return int((_check(hns).mean(axis=0) > 1.0).sum())


def games_above_zero(hns: np.ndarray) -> int:
    """Number of games whose mean HNS exceeds 0, i.e. better than random (the paper's ">0").

    Args:
        hns: ``(num_runs, num_games)`` human-normalized scores.
    """
    return int((_check(hns).mean(axis=0) > 0.0).sum())


METRICS: dict[str, Metric] = {
    "iqm": iqm,
    "median": median_hns,
    "mean": mean_hns,
    "optimality_gap": optimality_gap,
    "games_above_human": games_above_human,
    "games_above_zero": games_above_zero,
}
"""Every built-in metric by name; the names match the columns of `paper.paper_aggregates`."""

DEFAULT_METRICS: tuple[str, ...] = tuple(METRICS)

METRIC_LABELS: dict[str, str] = {
    "iqm": "IQM",
    "median": "Median",
    "mean": "Mean",
    "optimality_gap": "Optimality Gap",
    "games_above_human": "#Games > Human",
    "games_above_zero": "#Games > 0",
    "games_above_spr": "#Games > SPR",
}
"""How each metric is titled in tables and figures (the paper's wording)."""


def metric_label(metric: str, normalization: str = "HNS") -> str:
    """A metric's title (`METRIC_LABELS`) for scores of ``normalization`` (``"HNS"`` or
    ``"MinAtar score"``): a MinAtar score of 1 is the reference DQN, not a human, so
    ``games_above_human`` reads "#Games > DQN" there."""
    label = METRIC_LABELS.get(metric, metric)
    if normalization == "MinAtar score" and metric == "games_above_human":
        return "#Games > DQN"
    return label


def _resolve_metrics(metrics: Sequence[str] | Mapping[str, Metric]) -> dict[str, Metric]:
    if isinstance(metrics, Mapping):
        return dict(metrics)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise KeyError(f"unknown metrics {unknown}; known: {', '.join(METRICS)}")
    return {m: METRICS[m] for m in metrics}


def _score_dict(scores: np.ndarray | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if isinstance(scores, Mapping):
        return {str(k): _check(v) for k, v in scores.items()}
    return {"scores": _check(scores)}


def aggregate_scores(
    scores: np.ndarray | Mapping[str, np.ndarray],
    metrics: Sequence[str] | Mapping[str, Metric] = DEFAULT_METRICS,
) -> pd.DataFrame:
    """Point estimates of the aggregate metrics, without confidence intervals.

    Args:
        scores: A ``(num_runs, num_games)`` HNS array, or ``{method: array}``.
        metrics: Metric names from `METRICS`, or ``{name: function of the array}``.

    Returns:
        A tidy DataFrame with columns ``method, metric, value`` (method ``"scores"`` for a bare
        array).
    """
    fns = _resolve_metrics(metrics)
    return pd.DataFrame(
        [
            {"method": method, "metric": name, "value": fn(hns)}
            for method, hns in _score_dict(scores).items()
            for name, fn in fns.items()
        ]
    )


@functools.lru_cache(maxsize=1)
def _rliable_library():
    """rliable's ``library`` module, imported on first use.

    Imported lazily: rliable pulls in arch and absl (~2 s), which plain metric calls don't need.

    Raises:
        ImportError: rliable cannot be imported; the message says what to install.
    """
    try:
        from rliable import library
    except Exception as err:  # arch >= 8 breaks at import under pandas 3: rliable needs arch<8
        raise ImportError(
            f"confidence intervals need rliable, which could not be imported "
            f"({type(err).__name__}: {err}); pip install rliable 'arch<8'"
        ) from err
    return library


@contextlib.contextmanager
def _global_numpy_seed(seed: int) -> Iterator[None]:
    # rliable's StratifiedBootstrap draws indices with np.random.choice, i.e. the *global* NumPy
    # generator: its random_state argument does not make results reproducible (checked with
    # rliable 1.2). Seed the global generator for the call and restore the caller's state.
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _interval_estimates(
    score_dict: Mapping[str, np.ndarray | tuple[np.ndarray, ...]],
    fn: Callable[..., np.ndarray],
    reps: int,
    seed: int,
    confidence: float,
    task_bootstrap: bool,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    library = _rliable_library()
    points, intervals = {}, {}
    for key, value in score_dict.items():
        # Each method gets its own freshly seeded bootstrap, so its CI does not depend on which
        # other methods are in the dict or in what order.
        with _global_numpy_seed(seed), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # arch's random_state notice
            p, ci = library.get_interval_estimates(
                {key: list(value) if isinstance(value, tuple) else value},
                fn,
                method="percentile",
                task_bootstrap=task_bootstrap and not isinstance(value, tuple),
                reps=reps,
                confidence_interval_size=confidence,
            )
        points[key], intervals[key] = np.asarray(p[key]), np.asarray(ci[key])
    return points, intervals


def aggregate_with_ci(
    scores: np.ndarray | Mapping[str, np.ndarray],
    metrics: Sequence[str] | Mapping[str, Metric] = DEFAULT_METRICS,
    reps: int = 5000,
    seed: int = 0,
    confidence: float = 0.95,
    task_bootstrap: bool = False,
) -> pd.DataFrame:
    """Aggregate metrics with stratified bootstrap confidence intervals.

    Runs are resampled with replacement within each game (games are strata), ``reps`` times;
    the CI is the percentile interval of the metric over the resamples, as in the paper's
    tab:IQMs (5000 resamples).

    Args:
        scores: A ``(num_runs, num_games)`` HNS array (see `hns.hns_matrix`), or
            ``{method: array}``; methods must share the game columns, not the number of runs.
        metrics: Metric names from `METRICS`, or ``{name: function of the array}``.
        reps: Bootstrap resamples.
        seed: Seed of the bootstrap; the same seed gives the same intervals.
        confidence: Coverage of the intervals.
        task_bootstrap: Also resample games (rliable's option): the CI then reflects the choice
            of games as well as the seeds.

    Returns:
        A tidy DataFrame with columns ``method, metric, value, lower, upper``, one row per
        method and metric (method ``"scores"`` for a bare array).
    """
    fns = _resolve_metrics(metrics)

    def all_metrics(hns: np.ndarray) -> np.ndarray:
        return np.array([fn(hns) for fn in fns.values()])

    points, intervals = _interval_estimates(
        _score_dict(scores), all_metrics, reps, seed, confidence, task_bootstrap
    )
    rows = []
    for method in points:
        for i, name in enumerate(fns):
            rows.append(
                {
                    "method": method,
                    "metric": name,
                    "value": float(points[method][i]),
                    "lower": float(intervals[method][0, i]),
                    "upper": float(intervals[method][1, i]),
                }
            )
    return pd.DataFrame(rows)


def probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """Probability that a run of X beats a run of Y on a random game (ties count half).

    Equals rliable's ``probability_of_improvement`` (Mann-Whitney U / (n_x n_y) per game,
    averaged over games); computed directly so it needs no rliable.

    Args:
        scores_x: ``(num_runs_x, num_games)`` scores of X.
        scores_y: ``(num_runs_y, num_games)`` scores of Y, same games.

    Returns:
        A probability in [0, 1]; 0.5 means neither is better.
    """
    x, y = _check(scores_x), _check(scores_y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"different numbers of games: {x.shape[1]} vs {y.shape[1]}")
    diff = x[:, None, :] - y[None, :, :]  # (runs_x, runs_y, games)
    per_game = (diff > 0).mean(axis=(0, 1)) + 0.5 * (diff == 0).mean(axis=(0, 1))
    return float(per_game.mean())


def probability_of_improvement_with_ci(
    scores: Mapping[str, np.ndarray],
    pairs: Iterable[tuple[str, str]] | None = None,
    reps: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Probability of improvement of method X over Y, with stratified bootstrap CIs.

    rliable's ``probability_of_improvement`` under its ``StratifiedIndependentBootstrap``: the
    runs of X and those of Y are resampled independently, each within every game (games are
    strata), ``reps`` times; the CI is the percentile interval. X always ahead of Y on every
    game gives 1 with the CI [1, 1]; X and Y with the same scores give 0.5.

    Args:
        scores: ``{method: (num_runs, num_games) array}``; the methods of a pair share their
            games (columns, same order), not their number of runs.
        pairs: ``(x, y)`` method pairs; defaults to every ordered pair of distinct methods.
        reps: Bootstrap resamples.
        seed: Seed of the bootstrap.
        confidence: Coverage of the intervals.

    Returns:
        A DataFrame with columns ``x, y, value, lower, upper``.

    Raises:
        KeyError: a pair names a method not in ``scores`` (the message lists them).
        ValueError: a pair's methods have different numbers of games.
    """
    scores = {k: _check(v) for k, v in scores.items()}
    if pairs is None:
        pairs = [(x, y) for x in scores for y in scores if x != y]
    pairs = list(pairs)
    unknown = sorted({m for pair in pairs for m in pair if m not in scores})
    if unknown:
        raise KeyError(f"no scores for {unknown}; methods: {', '.join(scores)}")
    for x, y in pairs:
        if scores[x].shape[1] != scores[y].shape[1]:
            raise ValueError(
                f"{x} has {scores[x].shape[1]} games, {y} {scores[y].shape[1]}: a probability "
                "of improvement compares the same games"
            )
    pair_dict = {f"{x}\0{y}": (scores[x], scores[y]) for x, y in pairs}

    def poi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.array([probability_of_improvement(x, y)])

    points, intervals = _interval_estimates(pair_dict, poi, reps, seed, confidence, False)
    return pd.DataFrame(
        [
            {
                "x": x,
                "y": y,
                "value": float(points[f"{x}\0{y}"][0]),
                "lower": float(intervals[f"{x}\0{y}"][0, 0]),
                "upper": float(intervals[f"{x}\0{y}"][1, 0]),
            }
            for x, y in pairs
        ]
    )


def seed_pairs(x: pd.Series, y: pd.Series) -> dict[str, float]:
    """Runs of two methods paired by what they share (a Series each, indexed alike: by game
    and seed): how many of the ``pairs`` both have end ``above``, ``below`` and ``level``
    (x against y), and the two-sided sign test's p, ``sign_p``, with level pairs left out (NaN
    when every pair is level or there is none). Several runs under one index are averaged first.

    The paired complement of the probability of improvement, which compares every run of x
    with every run of y: a seed that starts both methods alike (the same initialisation and
    environment seed) is compared with itself only.
    """
    x = x.groupby(level=list(range(x.index.nlevels))).mean()
    y = y.groupby(level=list(range(y.index.nlevels))).mean()
    both = pd.concat({"x": x, "y": y}, axis=1, join="inner").dropna()
    diff = both["x"] - both["y"]
    above, below = int((diff > 0).sum()), int((diff < 0).sum())
    p = scipy.stats.binomtest(above, above + below).pvalue if above + below else float("nan")
    level = len(both) - above - below
    return {"pairs": len(both), "above": above, "below": below, "level": level, "sign_p": float(p)}


def mean_ci(values: Iterable[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval ``(mean, lower, upper)`` of the finite values (None
    and NaN left out); NaN bounds for one value, all NaN for none."""
    x = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if len(x) == 0:
        return (float("nan"),) * 3
    mean = float(x.mean())
    if len(x) < 2:
        return mean, float("nan"), float("nan")
    half = float(scipy.stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return mean, mean - half, mean + half
