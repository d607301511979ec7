"""The 26 Atari 100k games, their reference scores, and name normalization.

Random and human scores are the "Random" and "Human" columns of the paper's full results table
(``tab:all_scores``, appendix "Full Results on Atari100k"); the human-normalized score of a return
``x`` is ``(x - random_score) / (human_score - random_score)``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from sgi_lab.base.errors import SgiLabError
from sgi_lab.base.paths import close_names

__all__ = [
    "ATARI_100K_GAMES",
    "GameInfo",
    "UnknownGameError",
    "canonical_game",
    "game_info",
    "normalize_game_name",
]


@dataclass(frozen=True)
class GameInfo:
    """One Atari 100k game.

    Attributes:
        name: Canonical CamelCase name, as in gymnasium ids and DQN Replay folders (``"MsPacman"``).
        ale_id: The gymnasium environment id registered by ale-py (``"ALE/MsPacman-v5"``).
        display_name: Name as printed in the paper's tables (``"Ms Pacman"``).
        random_score: Mean return of a uniformly random policy (paper, table ``tab:all_scores``).
        human_score: Mean return of a human tester (paper, table ``tab:all_scores``).
    """

    name: str
    ale_id: str
    display_name: str
    random_score: float
    human_score: float


def _load_table() -> dict[str, GameInfo]:
    # One source of truth: the random/human scores ship with the paper's tables as package data
    # (read directly, so importing the env factory does not import the metrics stack).
    path = Path(__file__).resolve().parent.parent / "metrics" / "data" / "paper_results.json"
    data = json.loads(path.read_text())
    return {
        name: GameInfo(
            name,
            f"ALE/{name}-v5",
            data["game_display_names"][name],
            float(data["reference_scores"][name]["random"]),
            float(data["reference_scores"][name]["human"]),
        )
        for name in data["games"]
    }


ATARI_100K_GAMES: dict[str, GameInfo] = _load_table()


class UnknownGameError(SgiLabError, ValueError):
    """Raised for a game name that is not one of the accepted games."""


# Prefixes and suffixes of gymnasium/gym ids: "ALE/Pong-v5", "PongNoFrameskip-v4",
# "PongDeterministic-v4", "Pong-v0".
_ID_AFFIXES = re.compile(r"^ale/|(noframeskip|deterministic)?-v\d+$")
_SEPARATORS = re.compile(r"[\s_\-.]+")


def normalize_game_name(name: str) -> str:
    """Reduces any usual spelling of a game to a lowercase key without separators.

    Args:
        name: A game name, e.g. ``"ALE/MsPacman-v5"``, ``"ms_pacman"``, ``"Ms Pacman"``.

    Returns:
        The key, e.g. ``"mspacman"``.
    """
    return _SEPARATORS.sub("", _ID_AFFIXES.sub("", name.strip().lower()))


_BY_KEY: dict[str, str] = {normalize_game_name(name): name for name in ATARI_100K_GAMES}


def canonical_game(name: str) -> str:
    """Returns the canonical CamelCase name of one of the 26 Atari 100k games.

    Accepts the usual spellings: ``Pong``, ``pong``, ``ALE/Pong-v5``, ``PongNoFrameskip-v4``,
    ``ms_pacman``, ``ms-pacman``, ``Ms Pacman``, ``up_n_down``, ``james_bond``...

    Args:
        name: A game name in any of those spellings.

    Returns:
        The key of the game in ``ATARI_100K_GAMES``, e.g. ``"MsPacman"``.

    Raises:
        UnknownGameError: ``name`` is not one of the 26 games; the message lists them.
    """
    if not isinstance(name, str):
        raise UnknownGameError(f"game name must be a string, got {name!r}")
    key = normalize_game_name(name)
    if key in _BY_KEY:
        return _BY_KEY[key]

    close = close_names(key, list(_BY_KEY))
    hint = (
        f"did you mean {' or '.join(dict.fromkeys(_BY_KEY[c] for c in close))}? " if close else ""
    )
    raise UnknownGameError(
        f"unknown Atari 100k game {name!r}; {hint}valid games: {', '.join(ATARI_100K_GAMES)}"
    )


def game_info(name: str) -> GameInfo:
    """Returns the table entry of a game given in any accepted spelling (see `canonical_game`)."""
    return ATARI_100K_GAMES[canonical_game(name)]
