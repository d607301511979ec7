"""N Atari 100k environments stepped together, for evaluation and data collection.

Built on gymnasium's ``AsyncVectorEnv`` (one subprocess per env) or ``SyncVectorEnv`` with
same-step autoreset: when an env's episode ends, the observation returned for it is already the
first observation of its next episode, and the last observation of the finished episode is in
``info["final_obs"]``.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorWrapper

from sgi_lab.envs.atari import resolve_ale_id
from sgi_lab.envs.factory import canonical_env_game, make_env
from sgi_lab.envs.minatar import is_minatar

__all__ = ["AtariVectorInfo", "make_vector_env"]

# Per-step keys written by LearningSignalWrapper, with the dtype of their batched arrays.
_STEP_KEYS: dict[str, type] = {
    "raw_reward": np.float64,
    "life_loss": np.bool_,
    "terminal": np.bool_,
}


class AtariVectorInfo(VectorWrapper):
    """Gives every step's ``info`` full-length ``raw_reward``, ``life_loss``, ``terminal`` arrays.

    With same-step autoreset, gymnasium files the last step's info of a finished env under
    ``info["final_info"]`` and puts the new episode's reset info at the top level, where the
    per-step keys are then missing (zero, with a ``False`` mask). This wrapper copies the
    finished envs' values back, so ``info["terminal"][i]`` always describes the transition just
    taken by env ``i``.
    """

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, infos = self.env.reset(seed=seed, options=options)
        for key, dtype in _STEP_KEYS.items():
            infos[key] = np.zeros(self.num_envs, dtype=dtype)
            infos[f"_{key}"] = np.ones(self.num_envs, dtype=bool)
        return obs, infos

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rewards, terminated, truncated, infos = self.env.step(actions)
        final_info = infos.get("final_info", {})
        for key, dtype in _STEP_KEYS.items():
            value = np.asarray(infos.get(key, np.zeros(self.num_envs)), dtype=dtype)
            if key in final_info:
                value = np.where(final_info[f"_{key}"], final_info[key], value).astype(dtype)
            infos[key] = value
            infos[f"_{key}"] = np.ones(self.num_envs, dtype=bool)
        return obs, rewards, terminated, truncated, infos


def make_vector_env(
    game: str,
    num_envs: int,
    seed: int | None = None,
    train: bool = False,
    *,
    asynchronous: bool = True,
    context: str | None = None,
    **env_kwargs: Any,
) -> gym.vector.VectorEnv:
    """Builds ``num_envs`` copies of `make_env` stepped together, with same-step autoreset.

    Args:
        game: Game name in any spelling accepted by `canonical_game`.
        num_envs: Number of environments.
        seed: Env ``i`` is built with seed ``seed + i`` (its first reset and its action space);
            ``None`` draws fresh entropy.
        train: Training mode for every env (see `make_env`); the default is evaluation mode.
        asynchronous: One subprocess per env (``AsyncVectorEnv``, observations through shared
            memory) when True, else all in this process (``SyncVectorEnv``, easier to debug).
        context: ``multiprocessing`` start method for the asynchronous version (``None``: the
            platform default; ``"spawn"`` is safer once CUDA is initialised).
        **env_kwargs: Passed to `make_env` (``full_action_space``, ``max_episode_frames``,
            ``noop_max``, ``allow_any_ale_game``, ``preprocessing``).

    Returns:
        A vector env; ``step`` returns observations ``(N, 4, 84, 84)`` uint8, rewards ``(N,)``
        (sign-clipped in training mode), ``terminated`` and ``truncated`` ``(N,)`` bool, and
        ``info`` with ``(N,)`` arrays ``raw_reward``, ``life_loss``, ``terminal`` for the step
        just taken. For an env whose episode ended, the returned observation is the first of its
        next episode, ``info["final_obs"][i]`` the last of the finished one, and the other
        top-level info keys (``lives``, ``noop_frames``...) belong to the new episode.

    Raises:
        UnknownGameError: Unknown game (checked here, before any subprocess starts).
        ValueError: ``num_envs`` < 1.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    # Fail in this process with a readable error rather than inside a worker.
    if is_minatar(game):
        canonical_env_game(game)
    else:
        resolve_ale_id(game, env_kwargs.get("allow_any_ale_game", False))
    env_fns = [
        functools.partial(make_env, game, None if seed is None else seed + i, train, **env_kwargs)
        for i in range(num_envs)
    ]
    if asynchronous:
        envs = AsyncVectorEnv(
            env_fns,
            shared_memory=True,
            copy=True,
            context=context,
            autoreset_mode=AutoresetMode.SAME_STEP,
        )
    else:
        envs = SyncVectorEnv(env_fns, copy=True, autoreset_mode=AutoresetMode.SAME_STEP)
    return AtariVectorInfo(envs)
