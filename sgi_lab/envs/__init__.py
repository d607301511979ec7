"""Environments behind one factory: Atari 100k (gymnasium + ale-py, the table of the 26 games)
and MinAtar (``minatar/<game>``, the optional ``minatar`` package), each with its observation
spec.

- `games`: the 26 Atari 100k games, their random and human scores, name normalization;
- `factory`: `make_env`, one factory for both families, picked by the game's name;
- `spec`: what one observation is (`ObservationSpec`), read without importing an emulator;
- `atari`: Atari 100k on gymnasium + ale-py with the SimPLe/DER/SPR protocol;
- `rlpyt_frames`: the authors' frame protocol, rlpyt's ``AtariEnv`` as SPR and SGI modified it;
- `minatar`: the five MinAtar games behind the same interface;
- `minatar_games`: MinAtar's game modules and its sticky-action wrapper without the package's
  display imports;
- `vector`: N Atari environments stepped together on gymnasium's vector envs;
- `pool`: a population's environments, each its own game and seed, stepped here or in workers
  (`EnvPool`);
- `pool_memory`: the shared-memory rows the pool's workers write instead of pickling them.
"""

from sgi_lab.envs.factory import (
    ENV_PROTOCOLS,
    action_names,
    canonical_env_game,
    env_protocol,
    grid_observations,
    make_env,
    num_actions,
    observation_spec,
)
from sgi_lab.envs.games import (
    ATARI_100K_GAMES,
    GameInfo,
    UnknownGameError,
    canonical_game,
    game_info,
)
from sgi_lab.envs.minatar import MINATAR_GAMES, MinAtarMissingError, is_minatar
from sgi_lab.envs.spec import ATARI_SPEC, ObservationSpec
from sgi_lab.envs.vector import make_vector_env

__all__ = [
    "ATARI_100K_GAMES",
    "ATARI_SPEC",
    "ENV_PROTOCOLS",
    "MINATAR_GAMES",
    "GameInfo",
    "MinAtarMissingError",
    "ObservationSpec",
    "UnknownGameError",
    "action_names",
    "canonical_env_game",
    "canonical_game",
    "env_protocol",
    "game_info",
    "grid_observations",
    "is_minatar",
    "make_env",
    "make_vector_env",
    "num_actions",
    "observation_spec",
]
