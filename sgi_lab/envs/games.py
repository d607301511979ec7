"""The 26 Atari 100k games, their reference scores, and name normalization.

Random and human scores are the "Random" and "Human" columns of the paper's full results table
(``tab:all_scores``, appendix "Full Results on Atari100k"); the human-normalized score of a return
``x`` is ``(x - random_score) / (human_score - random_score)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


def _game(name: str, display_name: str, random_score: float, human_score: float) -> GameInfo:
    return GameInfo(name, f"ALE/{name}-v5", display_name, random_score, human_score)


ATARI_100K_GAMES: dict[str, GameInfo] = {
    info.name: info
    for info in (
        _game("Alien", "Alien", 227.8, 7127.7),
        _game("Amidar", "Amidar", 5.8, 1719.5),
        _game("Assault", "Assault", 222.4, 742.0),
        _game("Asterix", "Asterix", 210.0, 8503.3),
        _game("BankHeist", "Bank Heist", 14.2, 753.1),
        _game("BattleZone", "Battle Zone", 2360.0, 37187.5),
        _game("Boxing", "Boxing", 0.1, 12.1),
        _game("Breakout", "Breakout", 1.7, 30.5),
        _game("ChopperCommand", "Chopper Command", 811.0, 7387.8),
        _game("CrazyClimber", "Crazy Climber", 10780.5, 35829.4),
        _game("DemonAttack", "Demon Attack", 152.1, 1971.0),
        _game("Freeway", "Freeway", 0.0, 29.6),
        _game("Frostbite", "Frostbite", 65.2, 4334.7),
        _game("Gopher", "Gopher", 257.6, 2412.5),
        _game("Hero", "Hero", 1027.0, 30826.4),
        _game("Jamesbond", "Jamesbond", 29.0, 302.8),
        _game("Kangaroo", "Kangaroo", 52.0, 3035.0),
        _game("Krull", "Krull", 1598.0, 2665.5),
        _game("KungFuMaster", "Kung Fu Master", 258.5, 22736.3),
        _game("MsPacman", "Ms Pacman", 307.3, 6951.6),
        _game("Pong", "Pong", -20.7, 14.6),
        _game("PrivateEye", "Private Eye", 24.9, 69571.3),
        _game("Qbert", "Qbert", 163.9, 13455.0),
        _game("RoadRunner", "Road Runner", 11.5, 7845.0),
        _game("Seaquest", "Seaquest", 68.4, 42054.7),
        _game("UpNDown", "Up N Down", 533.4, 11693.2),
    )
}


class UnknownGameError(ValueError):
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
    raise UnknownGameError(
        f"unknown Atari 100k game {name!r}; valid games: {', '.join(ATARI_100K_GAMES)}"
    )


def game_info(name: str) -> GameInfo:
    """Returns the table entry of a game given in any accepted spelling (see `canonical_game`)."""
    return ATARI_100K_GAMES[canonical_game(name)]
