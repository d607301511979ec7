"""One environment factory for both families: Atari 100k and MinAtar, picked by the game's name.

``minatar/<game>`` (any case, `sgi_lab.envs.minatar`) makes a MinAtar game; any other name is
an Atari 100k game (`sgi_lab.envs.atari`). Each family owns its observation spec
(`observation_spec`) and its env protocol name (`env_protocol`): ``"dopamine"`` or ``"rlpyt"``
for Atari (`make_env`'s ``preprocessing``), ``"minatar"`` for MinAtar.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from sgi_lab.envs import atari, minatar
from sgi_lab.envs.games import UnknownGameError, canonical_game
from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec, minatar_spec

__all__ = [
    "ATARI_ENCODER_MIN_SIDE",
    "ENV_PROTOCOLS",
    "action_names",
    "canonical_env_game",
    "env_protocol",
    "grid_observations",
    "make_env",
    "num_actions",
    "observation_spec",
]

ENV_PROTOCOLS = (*atari.PREPROCESSING, minatar.ENV_PROTOCOL)
"""Every env protocol: Atari's frame protocols and MinAtar's."""

# Atari-only options of `atari.make_env` with their defaults: generic callers (a population's
# pool, a collector) pass them for any game; for a MinAtar game only the defaults are accepted.
_ATARI_ONLY = {
    "max_episode_frames": atari.MAX_EPISODE_FRAMES,
    "noop_max": atari.NOOP_MAX,
    "allow_any_ale_game": False,
    "record_ram": False,
}


def canonical_env_game(name: str) -> str:
    """The canonical name of any game: ``"minatar/breakout"`` or an Atari name (``"Pong"``).

    Raises:
        UnknownGameError: neither; the message says the closest names.
    """
    if minatar.is_minatar(name):
        return minatar.canonical_minatar_game(name)
    try:
        return canonical_game(name)
    except UnknownGameError as exc:
        raise UnknownGameError(
            f"{exc}; MinAtar games: {', '.join(minatar.MINATAR_GAMES)}"
        ) from None


def env_protocol(game: str, preprocessing: str = "dopamine") -> str:
    """The env protocol a run or store of ``game`` records: ``"minatar"`` for a MinAtar game,
    else the Atari ``preprocessing`` (``"dopamine"`` or ``"rlpyt"``)."""
    return minatar.ENV_PROTOCOL if minatar.is_minatar(game) else preprocessing


def observation_spec(
    game: str, frames: int | None = None, channels: int | None = None
) -> ObservationSpec:
    """The observation spec of a game's environment: `ATARI_SPEC` for Atari, (C, 10, 10) for a
    MinAtar game (``frames`` stacked, default 1; ``channels``: padded to that many, as
    `sgi_lab.envs.minatar.MinAtarEnv`'s option)."""
    if minatar.is_minatar(game):
        module = canonical_env_game(game).removeprefix("minatar/")
        return minatar_spec(module, frames or 1, channels)
    canonical_game(game)  # an unknown name fails here, naming the closest
    return ATARI_SPEC


def make_env(game: str, seed: int | None = None, train: bool = True, **kwargs: Any) -> gym.Env:
    """One environment of either family (module docstring).

    Args:
        game: an Atari 100k game in any spelling, or ``minatar/<game>``.
        seed, train: as `sgi_lab.envs.atari.make_env`.
        **kwargs: the family's options: `sgi_lab.envs.atari.make_env`'s for Atari;
            `sgi_lab.envs.minatar.MinAtarEnv`'s for MinAtar (``sticky_action_prob``,
            ``difficulty_ramping``, ``frames``, ``channels``, ``max_episode_steps``,
            ``record_labels``, ``full_action_space``), where ``preprocessing`` may only be
            ``"minatar"`` or the Atari default, and the other Atari options only their defaults.

    Raises:
        UnknownGameError: unknown game, with "did you mean".
        MinAtarMissingError: a MinAtar game without the optional package.
        ValueError: an Atari-only option set for a MinAtar game.
    """
    if not minatar.is_minatar(game):
        return atari.make_env(game, seed, train, **kwargs)
    kwargs = dict(kwargs)
    preprocessing = kwargs.pop("preprocessing", minatar.ENV_PROTOCOL)
    if preprocessing not in (minatar.ENV_PROTOCOL, "dopamine"):
        raise ValueError(
            f"preprocessing: {preprocessing!r} is an Atari frame protocol; MinAtar game {game!r} "
            f"plays {minatar.ENV_PROTOCOL!r}"
        )
    for key, default in _ATARI_ONLY.items():
        if key in kwargs and kwargs.pop(key) != default:
            raise ValueError(f"{key}: an Atari option, not one of MinAtar game {game!r}")
    return minatar.make_minatar_env(game, seed, train, **kwargs)


def num_actions(
    game: str, full_action_space: bool = False, allow_any_ale_game: bool = False
) -> int:
    """Actions of a game: its minimal set, or the family's full set (Atari 18, MinAtar 6)."""
    if minatar.is_minatar(game):
        return minatar.minatar_num_actions(game, full_action_space)
    return atari.num_actions(game, full_action_space, allow_any_ale_game)


def action_names(
    game: str, full_action_space: bool = False, allow_any_ale_game: bool = False
) -> tuple[str, ...]:
    """A game's action names in action-index order."""
    if minatar.is_minatar(game):
        return minatar.minatar_action_names(game, full_action_space)
    return atari.action_names(game, full_action_space, allow_any_ale_game)


ATARI_ENCODER_MIN_SIDE = 36
"""The smallest frame side Atari's encoders read: the Nature CNN's 8/4, 4/2 and 3/1 convolutions
leave one cell of a 36x36 frame. Smaller frames are grids (MinAtar's 10x10, a grid dataset
imported from Minari), for MinAtar's encoders (`grid_observations`)."""


def grid_observations(game: str, frame_shape: Sequence[int]) -> bool:
    """Whether a store's observations are grids for MinAtar's encoders: a MinAtar game's, or
    frames too small for Atari's encoders (a foreign dataset's, whose game is its id)."""
    return minatar.is_minatar(game) or min(frame_shape[-2:]) < ATARI_ENCODER_MIN_SIDE
