"""Atari 100k environments (gymnasium + ale-py) and the table of the 26 games."""

from sgi_lab.envs.atari import action_names, make_env, num_actions
from sgi_lab.envs.games import (
    ATARI_100K_GAMES,
    GameInfo,
    UnknownGameError,
    canonical_game,
    game_info,
)
from sgi_lab.envs.vector import make_vector_env

__all__ = [
    "ATARI_100K_GAMES",
    "GameInfo",
    "UnknownGameError",
    "action_names",
    "canonical_game",
    "game_info",
    "make_env",
    "make_vector_env",
    "num_actions",
]
