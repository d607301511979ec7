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

Workers write their rows (observations, rewards, flags) into one shared-memory segment the pool
allocates (`sgi_lab.envs.pool_memory`), so a step sends each a short command and reads back an
acknowledgement; ``shared_memory=False`` pickles the rows through the pipes instead (the same
numbers, slower: evaluation's 2,600 Atari environments are 73 MB a step). Arrays a step returns
are the caller's own either way; `EnvPool.observations` is the pool's own newest observation of
every environment, which evaluation reads in place (no frame copied per step). Without workers
the environments are stepped into the same rows, kept in this process's memory.

`EnvPool.send` starts a step and `EnvPool.receive` ends it (`step` is both): between the two the
workers play while the caller does other work, the finetuning loop its learn step
(``env_overlap``). Without workers the environments are stepped in `receive`. The segment is unlinked by `EnvPool.close`, when a worker dies
(the pool closes itself and raises `EnvWorkerError`, one line) and at interpreter exit, which
also ends the workers of a pool nobody closed.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import signal
import warnings
import weakref
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np

from sgi_lab.base.errors import SgiLabError
from sgi_lab.envs.factory import make_env
from sgi_lab.envs.pool_memory import SharedRows, free_bytes, segment_bytes
from sgi_lab.envs.spec import ATARI_SPEC

FRAME_STACK_SHAPE = ATARI_SPEC.stacked_shape
"""An Atari observation's shape; a pool's own is its environments' ``observation_space``."""

__all__ = ["EnvPool", "EnvWorkerError", "PoolStep", "spread"]


class EnvWorkerError(SgiLabError, RuntimeError):
    """An environment worker died or failed; the pool that raised it is closed."""

    exit_code = 1


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


def _play(env: Any, action: Any) -> tuple[np.ndarray, float, bool, bool, float, bool]:
    """One step of one environment, reset in the same step when its episode ended."""
    o, r, term, trunc, info = env.step(int(action))
    if term or trunc:
        o, _ = env.reset()
    return o, float(r), bool(term), bool(trunc), float(info["raw_reward"]), bool(info["terminal"])


def _step_slice(
    envs: list, actions: np.ndarray, active: np.ndarray | None = None
) -> tuple[np.ndarray, ...]:
    """Step the ``active`` environments of a slice (all by default); rows of those only."""
    chosen = range(len(envs)) if active is None else np.flatnonzero(active)
    played = [_play(envs[k], actions[k]) for k in chosen]
    obs, rewards, terminated, truncated, raw, terminal = zip(*played) if played else [()] * 6
    return (
        np.stack(obs) if obs else np.zeros((0, *_obs_shape(envs)), np.uint8),
        np.asarray(rewards, np.float32),
        np.asarray(terminated, bool),
        np.asarray(truncated, bool),
        np.asarray(raw, np.float64),
        np.asarray(terminal, bool),
    )


def _step_into(envs: list, rows: SharedRows, start: int, masked: bool) -> None:
    """Step a slice's environments (those marked ``rows.active`` when ``masked``) with
    ``rows.actions``, writing each one's results in its own row (``start`` + its index)."""
    actions = rows.actions[start : start + len(envs)]
    chosen = np.flatnonzero(rows.active[start : start + len(envs)]) if masked else range(len(envs))
    for k in chosen:
        i = start + k
        (
            rows.obs[i],
            rows.rewards[i],
            rows.terminated[i],
            rows.truncated[i],
            rows.raw_rewards[i],
            rows.terminals[i],
        ) = _play(envs[k], actions[k])


def _obs_shape(envs: list) -> tuple[int, ...]:
    """The observation shape of a slice's environments (Atari's when it has none)."""
    space = getattr(envs[0], "observation_space", None) if envs else None
    return tuple(space.shape) if space is not None else FRAME_STACK_SHAPE


def _worker(
    conn: Any, games: list[str], seeds: list[int], train: bool, env_kwargs: dict[str, Any]
) -> None:
    """A worker's life: build its environments, say their observation space, then answer
    commands, each with ``(True, payload)``, or ``(False, one line)`` before it ends on an
    error of its own."""
    # SIGTERM and SIGINT go to the whole process group (`timeout`, schedulers, Ctrl-C in a
    # terminal); the parent decides: it stops at its next step and closes the pool, and a
    # worker whose parent is gone reads EOF and ends.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    envs: list = []
    rows: SharedRows | None = None
    start = 0
    try:
        envs = [
            make_env(g, seed=s, train=train, **env_kwargs)
            for g, s in zip(games, seeds, strict=True)
        ]
        space = envs[0].observation_space
        conn.send((True, (tuple(space.shape), np.dtype(space.dtype).str)))
        while True:
            command, payload = conn.recv()
            reply = None
            if command == "attach":
                spec, start = payload
                rows = SharedRows.attach(spec)
            elif command == "reset" and rows is not None:
                for k, env in enumerate(envs):
                    rows.obs[start + k] = env.reset()[0]
            elif command == "reset":
                reply = np.stack([env.reset()[0] for env in envs])
            elif command == "step" and rows is not None:
                _step_into(envs, rows, start, masked=payload)
            elif command == "step":
                reply = _step_slice(envs, *payload)
            else:  # "close"
                break
            conn.send((True, reply))
    except (EOFError, KeyboardInterrupt):
        pass
    except Exception as exc:  # told to the parent in one line, which raises it
        line = (str(exc).strip().splitlines() or [""])[0]
        try:
            conn.send((False, f"{type(exc).__name__}: {line}"))
        except OSError:
            pass
    finally:
        for env in envs:
            env.close()
        if rows is not None:
            rows.close()
        conn.close()


class _Workers:
    """A pool's processes, pipes and segment, apart from the pool, so that a finalizer and
    the interpreter's exit can shut them down without keeping the pool alive."""

    def __init__(self) -> None:
        self.conns: list = []
        self.procs: list = []
        self.rows: SharedRows | None = None

    def shutdown(self) -> None:
        """Ask every worker to end, kill those that do not, unlink the segment. Idempotent."""
        for conn in self.conns:
            try:
                conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
            conn.close()
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        self.conns, self.procs = [], []
        if self.rows is not None:
            self.rows.close()
            self.rows = None

    def release(self) -> None:
        """`shutdown`, and nothing left for the interpreter's exit to do."""
        self.shutdown()
        atexit.unregister(self.shutdown)


class EnvPool:
    """N training (or evaluation) environments, one per agent.

    Args:
        games: per-environment Atari 100k game.
        seeds: per-environment seed of its first reset (`make_env`).
        train: training mode (life loss terminal for learning, clipped rewards).
        workers: processes stepping the environments (0: this process); at most N are used.
        shared_memory: with workers, their rows come back through one shared-memory segment
            (False: pickled through the pipes). Falls back to pipes, with a warning, where
            ``/dev/shm`` lacks the room; `shared_memory` (the attribute) says which is used.
        **env_kwargs: passed to `make_env` (e.g. ``max_episode_frames`` for evaluation).

    Raises:
        EnvWorkerError: a worker failed to build its environments (the pool is closed).
    """

    def __init__(
        self,
        games: Sequence[str],
        seeds: Sequence[int],
        train: bool = True,
        workers: int = 0,
        shared_memory: bool = True,
        **env_kwargs: Any,
    ) -> None:
        if len(games) != len(seeds) or not games:
            raise ValueError("EnvPool needs one seed per game, at least one environment")
        self.num_envs = len(games)
        self.workers = min(max(int(workers), 0), self.num_envs)
        self.shared_memory = False
        self._envs: list = []
        self._pool = _Workers()
        self._waiting = False  # commands sent whose answers are not all read
        self._pending: tuple[np.ndarray | None] | None = None  # a sent step's mask, until received
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
        self._games = list(games)
        context = mp.get_context("spawn")
        # Workers and segment go when the pool is collected, or at exit before
        # multiprocessing joins its children (registered after it: atexit runs last first).
        self._finalizer = weakref.finalize(self, self._pool.release)
        self._finalizer.atexit = False
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
                self._pool.conns.append(parent)
                self._pool.procs.append(proc)
            atexit.register(self._pool.shutdown)
            spaces = self._replies()
            if shared_memory:
                self._share(spaces)
        except BaseException:
            self.close()
            raise

    def _share(self, spaces: list[tuple[tuple[int, ...], str]]) -> None:
        """Allocate the segment for the workers' observation space and attach them to it."""
        if len(set(spaces)) > 1:
            raise ValueError(f"EnvPool: environments with different observations: {set(spaces)}")
        shape, dtype = spaces[0]
        need, room = segment_bytes(self.num_envs, shape, dtype), free_bytes()
        try:
            if room is not None and need > room:
                raise OSError(f"/dev/shm has {room / 2**20:.1f} MiB free")
            self._pool.rows = SharedRows.create(self.num_envs, shape, dtype)
        except OSError as exc:
            warnings.warn(
                f"EnvPool: {exc}, the pool's shared rows need {need / 2**20:.1f} MiB: "
                "observations go through pipes (Docker: --shm-size)",
                stacklevel=3,
            )
            return
        self._send([("attach", (self._pool.rows.spec, part.start)) for part in self._slices])
        self._replies()
        self.shared_memory = True

    def _send(self, messages: Sequence[tuple[str, Any]]) -> None:
        """One message to each worker, whose answers `_replies` reads."""
        if not self._pool.conns:
            raise RuntimeError("EnvPool: used after close()")
        if self._waiting:
            # Answers of a command interrupted (Ctrl-C in a notebook) would be read as those of
            # this one, while the workers may still be writing the shared rows.
            raise RuntimeError("EnvPool: a step was interrupted before its end; close the pool")
        self._waiting = True
        for i, (conn, message) in enumerate(zip(self._pool.conns, messages, strict=True)):
            try:
                conn.send(message)
            except (BrokenPipeError, OSError):
                self._fail(i, None)

    def _replies(self) -> list[Any]:
        """Every worker's answer, in order; a worker that died or failed closes the pool."""
        answers = []
        for i, conn in enumerate(self._pool.conns):
            try:
                ok, payload = conn.recv()
            except (EOFError, OSError):
                self._fail(i, None)
            if not ok:
                self._fail(i, payload)
            answers.append(payload)
        self._waiting = False
        return answers

    def _fail(self, i: int, message: str | None) -> NoReturn:
        """Close the pool and raise the one line that says which worker and why."""
        proc, part = self._pool.procs[i], self._slices[i]
        proc.join(timeout=2)
        games = sorted(set(self._games[part]))
        who = (
            f"environment worker {i} (pid {proc.pid}; environments {part.start}-{part.stop - 1}"
            f": {', '.join(games[:3])}{', ...' if len(games) > 3 else ''})"
        )
        why = f"failed: {message}" if message else f"died (exit code {proc.exitcode})"
        self.close()
        raise EnvWorkerError(f"{who} {why}; the pool is closed") from None

    def reset(self) -> np.ndarray:
        """First observations, (N, *observation shape): (N, 4, 84, 84) uint8 for Atari."""
        rows = self._pool.rows
        if self._pending is not None:
            raise RuntimeError("EnvPool: reset while a step is sent and not received")
        if self.workers == 0:
            first = [env.reset()[0] for env in self._envs]
            if rows is None:  # sized by the first observations, kept for the pool's life
                rows = self._pool.rows = self._local_rows(first)
            rows.obs[:] = first
        elif rows is not None:
            self._send([("reset", None)] * self.workers)
            self._replies()
        else:
            self._send([("reset", None)] * self.workers)
            obs = np.concatenate(self._replies())
            self._last = obs.copy()
            return obs
        self._last = rows.obs  # stepping keeps it the newest of every environment
        return rows.obs.copy()

    def _local_rows(self, first: list[np.ndarray]) -> SharedRows:
        """The rows a pool without workers steps its environments into."""
        kinds = {(np.shape(o), np.asarray(o).dtype.str) for o in first}
        if len(kinds) > 1:
            raise ValueError(f"EnvPool: environments with different observations: {kinds}")
        shape, dtype = kinds.pop()
        return SharedRows.local(self.num_envs, shape, dtype)

    @property
    def observations(self) -> np.ndarray:
        """The newest observation of every environment, (N, *observation shape): the pool's
        own memory (the shared segment itself with workers), not a copy. Read it before the
        next step, which overwrites it, and never write to it."""
        if self._last is None:
            raise RuntimeError("EnvPool: reset the pool before reading its observations")
        return self._last

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

    def step_active(
        self, actions: np.ndarray, active: np.ndarray | None = None, observations: bool = True
    ) -> PoolStep:
        """`step`, returning the rows of the ``active`` environments only, in their order:
        with thousands of evaluation environments of which a few are still playing, nothing
        is copied for the others. ``observations=False``: None in place of the observations
        (read `observations` in place instead)."""
        self.send(actions, active)
        return self.receive(observations)

    def send(self, actions: np.ndarray, active: np.ndarray | None = None) -> None:
        """Start a step of every environment, or of the ``active`` ones, with ``actions``
        (as `step`); `receive` ends it. With workers they play while this process goes on;
        without, `receive` steps them."""
        if self._pending is not None:
            raise RuntimeError("EnvPool: a step was sent and not received; receive it first")
        actions = np.asarray(actions)
        mask = None if active is None else np.asarray(active, bool)
        if mask is not None and self._last is None:
            raise RuntimeError("reset the pool before stepping some of its environments")
        rows = self._pool.rows
        if self.workers == 0 and not self._envs:
            raise RuntimeError("EnvPool: used after close()")
        if self.workers == 0 and rows is None:
            raise RuntimeError("EnvPool: reset the pool before stepping it")
        if rows is not None:
            rows.actions[:] = actions
            if mask is not None:
                rows.active[:] = mask
        if self.workers and rows is not None:
            self._send([("step", mask is not None)] * self.workers)
        elif self.workers:
            parts = [(actions[part], None if mask is None else mask[part]) for part in self._slices]
            self._send([("step", part) for part in parts])
        self._pending = (mask,)

    def receive(self, observations: bool = True) -> PoolStep:
        """The rows of the step `send` started (those of its ``active`` environments only, as
        `step_active`), once every environment has played it."""
        if self._pending is None:
            raise RuntimeError("EnvPool: receive without a step sent")
        (mask,), self._pending = self._pending, None
        rows = self._pool.rows
        if self.workers == 0:
            _step_into(self._envs, rows, 0, masked=mask is not None)
        elif rows is not None:
            self._replies()
        if rows is not None:  # copies: ``_last`` is ``rows.obs``
            return PoolStep(rows.step_rows(mask, observations))
        replies = self._replies()
        parts = tuple(np.concatenate([p[i] for p in replies]) for i in range(6))
        # The pool's own copy of the newest observations (arrays handed out are never changed).
        if mask is None:
            self._last = parts[0].copy()
        else:
            self._last[mask] = parts[0]
        return PoolStep(parts if observations else (None, *parts[1:]))

    def close(self) -> None:
        """End the workers and unlink the shared segment (or close the environments here).
        Twice is fine."""
        for env in self._envs:
            env.close()
        self._envs = []
        self._pending = None
        self._last = None  # may be a view of the segment, which closes next
        self._pool.release()
        if self.workers:
            self._finalizer.detach()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
