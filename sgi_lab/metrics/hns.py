"""Human-normalized score (HNS) of Atari 100k returns, and our returns beside the paper's.

``hns = (score - random) / (human - random)``: 0 is a uniformly random policy, 1 a human tester.
The random and human scores are the paper's, from the one game table (`sgi_lab.envs.games`), so
our numbers and the paper's are normalized with the same constants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from sgi_lab.envs.games import ATARI_100K_GAMES, canonical_game
from sgi_lab.metrics.paper import paper_column_for, paper_configs, paper_per_game
from sgi_lab.metrics.protocol import EvalProtocol, comparability_note, protocol_of

__all__ = [
    "canonical_game",
    "compare_to_paper",
    "hns_matrix",
    "human_normalized_score",
    "human_score",
    "per_game_hns",
    "random_score",
]

_REFERENCE = {name: (g.random_score, g.human_score) for name, g in ATARI_100K_GAMES.items()}


def random_score(game: str) -> float:
    """Returns the mean return of a uniformly random policy on ``game``."""
    return _REFERENCE[canonical_game(game)][0]


def human_score(game: str) -> float:
    """Returns the mean return of the human tester on ``game``."""
    return _REFERENCE[canonical_game(game)][1]


def human_normalized_score(game: str | Sequence[str], score):
    """Normalizes returns so that random play scores 0 and the human tester 1.

    Args:
        game: One game name, or a sequence of names that broadcasts against ``score`` (e.g. one
            name per column of a ``(num_runs, num_games)`` array).
        score: A return or an array of returns (any shape that broadcasts with ``game``).

    Returns:
        ``(score - random) / (human - random)``: a float for scalar inputs, else an ndarray of
        the broadcast shape.

    Example:
        >>> human_normalized_score("Pong", [-20.7, -3.05, 14.6])
        array([0. , 0.5, 1. ])
    """
    if isinstance(game, str):
        low, high = _REFERENCE[canonical_game(game)]
    else:
        low, high = np.array([_REFERENCE[canonical_game(g)] for g in game], dtype=float).T
    hns = (np.asarray(score, dtype=float) - low) / (np.asarray(high) - low)
    return float(hns) if np.ndim(hns) == 0 else hns


def per_game_hns(scores: Mapping[str, float | Sequence[float]]) -> pd.Series:
    """HNS of the mean return of each game.

    Args:
        scores: ``{game: mean return}`` or ``{game: [return of each run]}`` (averaged first, as
            the paper's tables average 10 seeds before normalizing).

    Returns:
        A Series indexed by canonical game name, in the paper's game order.
    """
    means = {canonical_game(g): float(np.mean(v)) for g, v in scores.items()}
    games = [g for g in ATARI_100K_GAMES if g in means]
    return pd.Series(
        [human_normalized_score(g, means[g]) for g in games],
        index=pd.Index(games, name="game"),
        name="hns",
    )


_SCORE_COLUMNS = ("score", "return", "mean_return", "episode_return", "eval_return")
_RUN_COLUMNS = ("seed", "run")


def _runs_by_game(scores, value: str | None) -> dict[str, np.ndarray]:
    """Per-game arrays of per-run raw returns from any of the accepted layouts."""
    if isinstance(scores, pd.Series):  # one run: index = games
        return {canonical_game(g): np.array([v], float) for g, v in scores.items()}
    if isinstance(scores, pd.DataFrame):
        if "game" not in scores.columns:  # wide: rows are runs, columns are games
            return {canonical_game(g): scores[g].to_numpy(float) for g in scores.columns}
        value = value or next((c for c in _SCORE_COLUMNS if c in scores.columns), None)
        if value is None:
            raise ValueError(
                f"long-format scores need a score column: pass value= or name one of "
                f"{_SCORE_COLUMNS}; got columns {list(scores.columns)}"
            )
        run = next((c for c in _RUN_COLUMNS if c in scores.columns), None)
        # Sorting by seed keeps run i of every game the same seed; bootstrap over runs does not
        # need it, but it keeps the matrix reproducible whatever the row order of the file.
        df = scores.sort_values(run) if run else scores
        return {
            canonical_game(g): group[value].to_numpy(float)
            for g, group in df.groupby("game", sort=False)
        }
    return {canonical_game(g): np.atleast_1d(np.asarray(v, float)) for g, v in scores.items()}


def hns_matrix(
    scores: Mapping[str, float | Sequence[float]] | pd.DataFrame | pd.Series,
    games: Sequence[str] | None = None,
    value: str | None = None,
) -> np.ndarray:
    """Builds the ``(num_runs, num_games)`` HNS matrix that the aggregate metrics take.

    Args:
        scores: Raw returns in one of these layouts:
            ``{game: [return of each run]}`` (a scalar counts as one run);
            a wide DataFrame, one row per run and one column per game;
            a long DataFrame with a ``game`` column, a score column (``score``, ``return``,
            ``mean_return``, ``episode_return`` or ``eval_return``, or ``value``) and optionally
            ``seed``/``run``;
            a Series indexed by game (one run).
        games: Games (columns) to keep, in this order. Defaults to the games present, in the
            paper's order.
        value: Name of the score column of a long DataFrame, when not one of the defaults.

    Returns:
        A float array of shape ``(num_runs, num_games)``, column ``j`` being ``games[j]``.

    Raises:
        ValueError: Games have different numbers of runs (the stratified bootstrap needs a
            full matrix), a requested game is missing, or a game name is unknown.
    """
    runs = _runs_by_game(scores, value)
    if games is None:
        games = [g for g in ATARI_100K_GAMES if g in runs]
    else:
        games = [canonical_game(g) for g in games]
        missing = [g for g in games if g not in runs]
        if missing:
            raise ValueError(f"no scores for games {missing}")
    counts = {g: len(runs[g]) for g in games}
    if len(set(counts.values())) > 1:
        raise ValueError(f"every game needs the same number of runs; got {counts}")
    if not games:
        raise ValueError("no games in scores")
    raw = np.stack([runs[g] for g in games], axis=1)
    return human_normalized_score(games, raw)


def compare_to_paper(
    our_scores: Mapping[str, float | Sequence[float]],
    config: str,
    all_games: bool = False,
    protocol: EvalProtocol | Mapping | Sequence[Mapping] | None = None,
) -> pd.DataFrame:
    """Places our per-game returns beside the paper's for the same configuration.

    Args:
        our_scores: ``{game: mean return}`` or ``{game: [return of each run]}`` (averaged); game
            names in any usual spelling (``"Pong"``, ``"ALE/Pong-v5"``, ``"ms_pacman"``).
        config: A paper config key with per-game scores, or a parameter-set name (see
            `paper_column_for`).
        all_games: If True, one row for each of the 26 games (``ours`` NaN where missing);
            otherwise only the games in ``our_scores``.
        protocol: How our scores were measured: an `EvalProtocol`, or the ``eval.json``
            mapping(s) it is read from (`protocol_of`). None: unknown, hence not comparable.

    Returns:
        A DataFrame with columns ``game, ours, paper, ours_hns, paper_hns, protocol,
        comparable``, games in the paper's order; ``comparable`` is True only when our protocol
        is the paper's (100 episodes, 108,000 frames). ``df.attrs`` holds ``config`` (the paper
        key compared against), ``protocol`` (our protocol's label or None), ``comparable`` and
        ``note`` (`comparability_note`, for titles).
    """
    if protocol is not None and not isinstance(protocol, EvalProtocol):
        protocol = protocol_of(protocol)
    if config not in paper_configs():
        config = paper_column_for(config)
    paper = paper_per_game(config)
    ours = {canonical_game(g): float(np.mean(v)) for g, v in our_scores.items()}
    games = [g for g in ATARI_100K_GAMES if all_games or g in ours]
    ours_arr = np.array([ours.get(g, np.nan) for g in games])
    paper_arr = paper.loc[games].to_numpy()
    df = pd.DataFrame(
        {
            "game": games,
            "ours": ours_arr,
            "paper": paper_arr,
            "ours_hns": [human_normalized_score(g, s) for g, s in zip(games, ours_arr)],
            "paper_hns": [human_normalized_score(g, s) for g, s in zip(games, paper_arr)],
            "protocol": protocol.label if protocol is not None else None,
            "comparable": protocol is not None and protocol.comparable,
        }
    )
    df.attrs["config"] = config
    df.attrs["protocol"] = protocol.label if protocol is not None else None
    df.attrs["comparable"] = protocol is not None and protocol.comparable
    df.attrs["note"] = comparability_note(protocol)
    return df
