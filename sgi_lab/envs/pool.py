"""The environments of a population, each its own game and seed, stepped together, in this
process or spread over worker processes: one per agent in training, an agent's evaluation
environments in `sgi_lab.train.evaluate` (which stops stepping those that played their quota).

gymnasium's vector envs need one observation and action space for all members; a population
mixes games with different action sets, so this pool steps `make_env` environments itself.
``workers=0`` steps them here one after another; ``workers=k`` gives each of k processes a slice
of the environments, so emulators of different agents run in parallel (worth it with cores to
spare, e.g. a GPU machine's 16; on a 2-core machine the learner needs them). Either way an
environment whose episode ended is reset in the same step and the new episode's first
observation is returned in its place, as the finetuning loop used to do by hand.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
from collections.abc import Sequence
from typing import Any

import numpy as np

from sgi_lab.envs.factory import make_env
from sgi_lab.envs.spec import ATARI_SPEC

FRAME_STACK_SHAPE = ATARI_SPEC.stacked_shape
"""An Atari observation's shape; a pool's own is its environments' ``observation_space``."""

__all__ = ["EnvPool", "PoolStep", "spread"]


class PoolStep(tuple):
    """What `EnvPool.step` returns: ``(obs, rewards, terminated, truncated, raw_rewards,
    terminals)``, arrays with one row per environment; ``obs`` of an environment whose episode
    ended is the first observation of its next episode."""

    __slots__ = ()


def spread(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per-environment values of the ``mask`` environments (`EnvPool.step_active`'s rows) as
    one row per environment, zero for the others."""
    full = np.zeros(len(mask), values.dtype)
    full[mask] = values
    return full


def _step_slice(
    envs: list, actions: np.ndarray, active: np.ndarray | None = None
) -> tuple[np.ndarray, ...]:
    """Step the ``active`` environments of a slice (all by default); rows of those only."""
    obs, rewards, terminated, truncated, raw, terminal = [], [], [], [], [], []
    chosen = range(len(envs)) if active is None else np.flatnonzero(active)
    for k in chosen:
        env, action = envs[k], actions[k]
        o, r, term, trunc, info = env.step(int(action))
        if term or trunc:
            o, _ = env.reset()
        obs.append(o)
        rewards.append(float(r))
        terminated.append(bool(term))
        truncated.append(bool(trunc))
        raw.append(float(info["raw_reward"]))
        terminal.append(bool(info["terminal"]))
    return (
        np.stack(obs) if obs else np.zeros((0, *_obs_shape(envs)), np.uint8),
        np.asarray(rewards, np.float32),
        np.asarray(terminated),
        np.asarray(truncated),
        np.asarray(raw, np.float64),
        np.asarray(terminal),
    )


def _obs_shape(envs: list) -> tuple[int, ...]:
    """The observation shape of a slice's environments (Atari's when it has none)."""
    space = getattr(envs[0], "observation_space", None) if envs else None
    return tuple(space.shape) if space is not None else FRAME_STACK_SHAPE


def _worker(
    conn: Any, games: list[str], seeds: list[int], train: bool, env_kwargs: dict[str, Any]
) -> None:
    # SIGTERM and SIGINT go to the whole process group (`timeout`, schedulers, Ctrl-C in a
    # terminal); the parent decides: it stops at its next step and closes the pool, and a
    # worker whose parent is gone reads EOF and ends.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    envs = [
        make_env(g, seed=s, train=train, **env_kwargs) for g, s in zip(games, seeds, strict=True)
    ]
    try:
        while True:
            command, payload = conn.recv()
            if command == "reset":
                conn.send(np.stack([env.reset()[0] for env in envs]))
            elif command == "step":
                conn.send(_step_slice(envs, *payload))
            else:  # "close"
                break
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        for env in envs:
            env.close()
        conn.close()


class EnvPool:
    """N training (or evaluation) environments, one per agent.

    Args:
        games: per-environment Atari 100k game.
        seeds: per-environment seed of its first reset (`make_env`).
        train: training mode (life loss terminal for learning, clipped rewards).
        workers: processes stepping the environments (0: this process); at most N are used.
        **env_kwargs: passed to `make_env` (e.g. ``max_episode_frames`` for evaluation).
    """

    def __init__(
        self,
        games: Sequence[str],
        seeds: Sequence[int],
        train: bool = True,
        workers: int = 0,
        **env_kwargs: Any,
    ) -> None:
        if len(games) != len(seeds) or not games:
            raise ValueError("EnvPool needs one seed per game, at least one environment")
        self.num_envs = len(games)
        self.workers = min(max(int(workers), 0), self.num_envs)
        self._envs: list = []
        self._conns: list = []
        self._procs: list = []
        self._last: np.ndarray | None = None  # the newest observation of every environment
        if self.workers == 0:
            self._envs = [
                make_env(g, seed=s, train=train, **env_kwargs) for g, s in zip(games, seeds)
            ]
            return
        # Contiguous slices, as even as possible; spawn: a forked child of a process holding
        # torch's thread pools (or CUDA) can deadlock.
        bounds = np.linspace(0, self.num_envs, self.workers + 1).round().astype(int)
        self._slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        context = mp.get_context("spawn")
        try:
            for part in self._slices:
                parent, child = context.Pipe()
                proc = context.Process(
                    target=_worker,
                    args=(child, list(games[part]), list(seeds[part]), train, env_kwargs),
                    daemon=True,
                )
                proc.start()
                child.close()
                self._conns.append(parent)
                self._procs.append(proc)
        except BaseException:
            self.close()
            raise

    def reset(self) -> np.ndarray:
        """First observations, (N, 4, 84, 84) uint8."""
        if self.workers == 0:
            obs = np.stack([env.reset()[0] for env in self._envs])
        else:
            for conn in self._conns:
                conn.send(("reset", None))
            obs = np.concatenate([conn.recv() for conn in self._conns])
        self._last = obs.copy()
        return obs

    def step(self, actions: np.ndarray, active: np.ndarray | None = None) -> PoolStep:
        """One step of every environment, or of the ``active`` ones (see `PoolStep`): the
        others are not stepped and report their newest observation again, reward 0 and no
        episode end (evaluation stops stepping environments that played their quota).

        Args:
            actions: (N,) actions (those of inactive environments are ignored).
            active: (N,) bool, the environments to step; None: all.
        """
        mask = None if active is None else np.asarray(active, bool)
        rows = self.step_active(actions, mask)
        if mask is None:
            return rows
        return PoolStep((self._last.copy(), *(spread(part, mask) for part in rows[1:])))

    def step_active(self, actions: np.ndarray, active: np.ndarray | None = None) -> PoolStep:
        """`step`, returning the rows of the ``active`` environments only, in their order:
        with thousands of evaluation environments of which a few are still playing, nothing
        is copied for the others."""
        actions = np.asarray(actions)
        mask = None if active is None else np.asarray(active, bool)
        if mask is not None and self._last is None:
            raise RuntimeError("reset the pool before stepping some of its environments")
        if self.workers == 0:
            rows = _step_slice(self._envs, actions, mask)
        else:
            for conn, part in zip(self._conns, self._slices, strict=True):
                conn.send(("step", (actions[part], None if mask is None else mask[part])))
            parts = [conn.recv() for conn in self._conns]
            rows = tuple(np.concatenate([p[i] for p in parts]) for i in range(6))
        # The pool's own copy of the newest observations (arrays handed out are never changed).
        if mask is None:
            self._last = rows[0].copy()
        else:
            self._last[mask] = rows[0]
        return PoolStep(rows)

    def close(self) -> None:
        for env in self._envs:
            env.close()
        self._envs = []
        for conn in self._conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
            conn.close()
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
        self._conns, self._procs = [], []

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
