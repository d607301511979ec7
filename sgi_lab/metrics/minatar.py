"""The MinAtar score: a return normalised per game so that 0 is a uniformly random policy and 1 a
published reference agent, beside HNS for Atari; `normalized_score` picks by the game's name.

``score = (return - random) / (reference - random)``. Both constants live in
``metrics/data/minatar_scores.json``:

* ``random``: measured here (`benchmarks/minatar_speed.py random`): the mean return of the
  uniform policy over the game's minimal action set, whole episodes of `sgi_lab.envs.minatar`'s
  default protocol (sticky actions 0.1, difficulty ramping, evaluation mode), with the episode
  count and standard error beside each mean.
* ``reference``: Young & Tian's (2019) DQN at the end of training (5M frames), read off the
  learning curves the authors publish (the paper has no table;
  `benchmarks/minatar_reference_curves.py`): Asterix 16.8, Breakout 10.0, Freeway 50.2,
  Seaquest 20.0, Space Invaders 43.5. Training returns under exploration, DQN on all 6 actions;
  the Seaquest curve predates MinAtar 1.0.11's oxygen-bar fix (the file's ``caveat``). A game
  whose reference were missing (``null``) could not be normalised; the error names the file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from sgi_lab.envs.factory import canonical_env_game
from sgi_lab.envs.minatar import MINATAR_GAMES, is_minatar
from sgi_lab.metrics.hns import human_normalized_score, human_score, random_score

__all__ = [
    "MINATAR_SCORES_FILE",
    "SCORE_TITLES",
    "SCORE_TOP",
    "minatar_normalized_score",
    "minatar_random_score",
    "minatar_reference_score",
    "normalization_name",
    "normalized_score",
    "score_meaning",
    "score_references",
]

MINATAR_SCORES_FILE = Path(__file__).resolve().parent / "data" / "minatar_scores.json"


@cache
def _table() -> dict[str, Any]:
    return json.loads(MINATAR_SCORES_FILE.read_text())


def _game(game: str) -> str:
    name = canonical_env_game(game)
    if name not in MINATAR_GAMES:
        raise ValueError(f"{game!r} is not a MinAtar game (minatar/<game>): score it with HNS")
    return name


def minatar_random_score(game: str) -> float:
    """The uniform-random policy's mean return on a MinAtar game (measured, see module doc)."""
    return float(_table()["random"][_game(game)]["mean"])


def minatar_reference_score(game: str) -> float:
    """The published reference agent's return on a MinAtar game (the score's 1).

    Raises:
        ValueError: no reference is recorded for the game; the message names the file.
    """
    name = _game(game)
    value = _table()["reference"]["values"].get(name)
    if value is None:
        raise ValueError(
            f"{name}: no published reference return is recorded in {MINATAR_SCORES_FILE} "
            f"(reference.values); source to use: {_table()['reference']['source']}"
        )
    return float(value)


def minatar_normalized_score(game: str | Sequence[str], score):
    """Normalises MinAtar returns: 0 at the uniform-random policy, 1 at the reference agent.

    Args:
        game: one MinAtar game, or a sequence of them broadcasting against ``score`` (one per
            column of a ``(num_runs, num_games)`` array).
        score: a return or an array of returns.

    Returns:
        ``(score - random) / (reference - random)``: a float for scalar inputs, else an ndarray.
    """
    games = [game] if isinstance(game, str) else list(game)
    low = np.array([minatar_random_score(g) for g in games])
    high = np.array([minatar_reference_score(g) for g in games])
    if isinstance(game, str):
        low, high = low[0], high[0]
    normalized = (np.asarray(score, dtype=float) - low) / (high - low)
    return float(normalized) if np.ndim(normalized) == 0 else normalized


SCORE_TITLES: dict[str, str] = {
    "HNS": "human-normalized score",
    "MinAtar score": "MinAtar score (0 random, 1 DQN)",
}
"""How a figure's score axis is titled for each normalisation (`normalization_name`)."""

SCORE_TOP: dict[str, str] = {"HNS": "human", "MinAtar score": "DQN reference"}
"""What each normalisation's 1 is: the line drawn at 1, and "#Games > ..." in metric titles."""

SCORE_MEANINGS: dict[str, str] = {
    "HNS": "0 = a uniform random policy, 1 = the human player's score",
    "MinAtar score": (
        "0 = a uniform random policy, 1 = the MinAtar paper's DQN at the end of its training "
        "(above 1 beats it)"
    ),
}
"""What a normalised score's 0 and 1 are, in words, for lines that print one."""


def score_meaning(normalization: str) -> str:
    """``"0 = a uniform random policy, 1 = ..."`` for a `normalization_name` (``"HNS"`` or
    ``"MinAtar score"``); empty for an unknown name."""
    return SCORE_MEANINGS.get(normalization, "")


def normalization_name(game: str) -> str:
    """What `normalized_score` uses for a game: ``"MinAtar score"`` or ``"HNS"``."""
    return "MinAtar score" if is_minatar(game) else "HNS"


def score_references(game: str) -> dict[str, float]:
    """The raw returns a game's normalised score is 0 and 1 at, named for a figure's lines:
    ``{"random": ..., "human": ...}`` (Atari) or ``{"random": ..., "DQN reference": ...}``
    (MinAtar: `SCORE_TOP`)."""
    if is_minatar(game):
        top = SCORE_TOP["MinAtar score"]
        return {"random": minatar_random_score(game), top: minatar_reference_score(game)}
    return {"random": random_score(game), SCORE_TOP["HNS"]: human_score(game)}


def normalized_score(game: str | Sequence[str], score):
    """A game's normalised score by its family: the MinAtar score for ``minatar/<game>``,
    human-normalised (HNS) for an Atari game; a sequence of games may mix the two.

    Returns:
        a float for a scalar ``score`` and one game, else an ndarray (as HNS).
    """
    if isinstance(game, str):
        if is_minatar(game):
            return minatar_normalized_score(game, score)
        return human_normalized_score(game, score)
    games = list(game)
    score = np.asarray(score, dtype=float)
    columns = np.broadcast_to(score, np.broadcast_shapes(score.shape, (len(games),)))
    out = np.empty(columns.shape)
    for i, g in enumerate(games):
        out[..., i] = normalized_score(g, columns[..., i])
    return out
