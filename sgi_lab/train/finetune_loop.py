"""The finetuning loop of a population: every step each agent acts in its own environment (one
batched forward for all), stores the transition in its own prioritized replay, and after
``learning_starts`` takes ``updates_per_step`` updates of the batched learner (on every
``update_every``-th step: DQN's update period); metrics rows, checkpoints, the progress bar and
a stop request at the end of the step.

**Overlapping the environments with the learner** (``env_overlap``, off by default). Serially a
step is act -> step the environments -> store the transition -> learn, as the authors' rlpyt
loop runs it (sample a batch of one step, then optimize). With ``env_overlap`` it is act ->
send the actions to the environments (`EnvPool.send`) -> learn while they play -> receive
(`EnvPool.receive`) -> store: with ``env_workers`` the emulators' time hides behind the update's.
The learner then works one transition behind: the updates of step t sample the replay of
transitions 0..t-1, not yet the one being played (the serial loop's hold 0..t). Nothing else
moves: the actions of step t still come from the network after every update of step t-1, the
update count per step, the beta schedule and the step learning starts at are the same, and every
transition reaches the replay one step later than it would serially. So the overlapped loop is
the serial loop with the store moved after the learn step, bit for bit (same seeds, same
transitions, replay and weights; tests/train/test_finetune_loop.py), which is what a one-step
lag in a replay of 100k transitions changes: the newest transition's first chance to be sampled
comes one step later. It changes a run's numbers (the updates sample other batches), hence off
by default and recorded in the run's config; without workers it changes nothing but the order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from sgi_lab.config import FinetuneConfig
from sgi_lab.data.population_replay import PopulationReplay
from sgi_lab.envs.pool import EnvPool
from sgi_lab.runs.stopping import Deadline, RunStopped
from sgi_lab.train.acting import act
from sgi_lab.train.finetune_agents import AgentRun, save_checkpoint
from sgi_lab.train.population import Population
from sgi_lab.train.update import learn

__all__ = ["Callback", "beta_at", "epsilon_at", "train_agents"]

Callback = Callable[[int, Population], None]


def epsilon_at(step: int, config: FinetuneConfig) -> float:
    """Linear from eps_start to eps_end at eps_steps, then constant; the annealing starts at
    step 0, or with ``eps_from: learning_starts`` at learning_starts (rlpyt's schedule, which
    the reference uses: with its 2,000 and 2,001, epsilon is 1 until learning starts, then 0)."""
    start = config.learning_starts if config.eps_from == "learning_starts" else 0
    frac = min(1.0, max(0, step - start) / max(1, config.eps_steps - start))
    return config.eps_start + frac * (config.eps_end - config.eps_start)


def beta_at(step: int, config: FinetuneConfig) -> float:
    """Importance-sampling exponent: linear from priority_beta_start when learning starts to 1
    at the last step (rlpyt's schedule, which SPR uses)."""
    span = max(1, config.steps - config.learning_starts)
    frac = min(1.0, max(0.0, (step - config.learning_starts) / span))
    return config.priority_beta_start + frac * (1.0 - config.priority_beta_start)


class _Window:
    """Running sums of per-agent update stats between metrics rows (device tensors, synced at
    log time)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.updates = 0
        self.steps = 0
        self.start = time.perf_counter()

    def add(self, stats: dict[str, torch.Tensor]) -> None:
        for k, v in stats.items():
            self.sums[k] = self.sums[k] + v if k in self.sums else v.clone()
        self.updates += 1

    def rows(self, n: int) -> list[dict[str, float]]:
        seconds = max(time.perf_counter() - self.start, 1e-9)
        means = {k: (v / self.updates).tolist() for k, v in self.sums.items()}
        for k, v in means.items():
            bad = [i for i, x in enumerate(v) if not np.isfinite(x)]
            if bad and k == "losses/total":
                raise FloatingPointError(f"non-finite loss for agent(s) {bad}")
        rows = []
        for i in range(n):
            row = {k: v[i] for k, v in means.items()}
            row["charts/sps"] = self.steps / seconds
            row["charts/ups"] = self.updates / seconds
            rows.append(row)
        return rows


def train_agents(
    agents: list[AgentRun],
    population: Population,
    replay: PopulationReplay,
    step: int,
    progress: bool,
    callback: Callback | None,
    stop: Deadline,
) -> int:
    """Every agent from ``step`` to ``steps``: act, play, store, learn, log, checkpoint; returns
    the last step. Raises `RunStopped`, checkpointed, once ``stop`` passes."""
    cfg = population.config
    for a in agents:
        resume = step if a.checkpoint is not None else None
        a.metrics = a.run.metrics_logger(resume_step=resume, buffered=True)
    # A resumed run cannot restore the emulator: new seed, fresh episode.
    pool = EnvPool(
        [a.game for a in agents],
        [a.config.seed + step for a in agents],
        train=True,
        workers=cfg.env_workers,
        preprocessing=cfg.env_protocol,
        **cfg.env_options,  # a MinAtar game's sticky actions, ramping, frames and channels
    )
    obs = pool.reset()
    window = _Window()
    bar = _Progress(agents, cfg.steps, step, progress)
    try:
        while step < cfg.steps:
            eps = epsilon_at(step, cfg)
            actions = act(population, obs, [eps] * len(agents), [a.rng for a in agents])
            step += 1
            # Environments whose episode ended come back already reset (EnvPool).
            obs, rewards, ended, raw = _play_and_learn(
                pool, agents, population, replay, window, obs, actions, step
            )
            rows = [a.record(float(raw[i]), float(rewards[i]), ended[i]) for i, a in enumerate(agents)]  # fmt: skip
            window.steps += 1
            if step % cfg.log_every == 0 or step == cfg.steps:
                window = _add_window_stats(rows, window, population, step, eps)
            for a, row in zip(agents, rows, strict=True):
                if row:
                    a.metrics.log(step, **row)
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                _checkpoint_all(agents, population, replay, step)
            bar.show(rows)
            if callback is not None:
                callback(step, population)
            why = stop.reason() if step < cfg.steps else None
            if why:
                if step % cfg.checkpoint_every:
                    _checkpoint_all(agents, population, replay, step)
                raise RunStopped(step, why)
    finally:
        bar.close()
        pool.close()
    return step


def _play_and_learn(
    pool: EnvPool,
    agents: list[AgentRun],
    population: Population,
    replay: PopulationReplay,
    window: _Window,
    obs: np.ndarray,
    actions: np.ndarray,
    step: int,
) -> tuple[np.ndarray, ...]:
    """Step ``step`` (counted after it) of every agent: the environments play ``actions``,
    the transition from ``obs`` is stored, and from ``learning_starts`` the learner updates:
    after the store, or with ``env_overlap`` while the environments play, before it (module
    docstring). Returns the next observations, the rewards (clipped, raw) and episode ends."""
    cfg = population.config
    spec = cfg.observation_spec  # one for all agents (Population.build checks)
    newest = obs.reshape(len(obs), spec.frames, *spec.frame_shape)[:, -1]  # (N, *frame_shape)
    if cfg.env_overlap:
        pool.send(actions)
        _learn(population, replay, window, step)
        played = pool.receive()
    else:
        played = pool.step(actions)
    next_obs, rewards, terminated, truncated, raw, terminal = played
    replay.append(newest, actions, raw, terminal, [a.first for a in agents])
    if not cfg.env_overlap:
        _learn(population, replay, window, step)
    return next_obs, rewards, terminated | truncated, raw


def _learn(population: Population, replay: PopulationReplay, window: _Window, step: int) -> None:
    """The ``updates_per_step`` updates of ``step``, once it reaches ``learning_starts``, on
    every ``update_every``-th step (``step`` a multiple of it), when every agent's replay holds a
    sampleable transition."""
    cfg = population.config
    if step >= cfg.learning_starts and step % cfg.update_every == 0 and replay.ready():
        beta = beta_at(step, cfg)
        for _ in range(cfg.updates_per_step):
            window.add(learn(population, replay, beta))


def _add_window_stats(
    rows: list[dict[str, Any]], window: _Window, population: Population, step: int, eps: float
) -> _Window:
    """At a logging step: the window's per-agent update means into the agents' rows, and a new
    window."""
    cfg = population.config
    for row, stats in zip(rows, window.rows(len(rows)), strict=True):
        row.update(stats)
        row["charts/epsilon"] = eps
        row["charts/beta"] = beta_at(step, cfg)
        row["charts/updates"] = population.updates
    return _Window()


def _checkpoint_all(
    agents: list[AgentRun], population: Population, replay: PopulationReplay, step: int
) -> None:
    for i, a in enumerate(agents):
        a.metrics.flush()  # every row up to the checkpoint's step on disk before it
        save_checkpoint(a, i, population, replay, step)
    for a in agents:
        a.run.set_status("running", step=step)


class _Progress:
    """The loop's tqdm bar: agent-steps per second and the mean return of finished episodes."""

    def __init__(self, agents: list[AgentRun], steps: int, step: int, progress: bool) -> None:
        n = len(agents)
        label = agents[0].game if n == 1 else f"{n} agents"
        self.n, self.postfix = n, {}
        self.bar = tqdm(
            total=steps, initial=step, desc=f"finetune {label}", disable=not progress, unit="step"
        )

    def show(self, rows: list[dict[str, Any]]) -> None:
        self.bar.update(1)
        returns = [r["episode/return"] for r in rows if "episode/return" in r]
        # tqdm's smoothed rate of the last steps: a logged row's window held the fast
        # acting-only steps before learning for minutes (85 agent-steps/s shown at 2.1)
        rate = None if self.bar.disable else self.bar.format_dict.get("rate")
        self.postfix.update({"agent-steps/s": f"{rate * self.n:.1f}"} if rate else {})
        self.postfix.update({"return": f"{np.mean(returns):.0f}"} if returns else {})
        if self.postfix:
            self.bar.set_postfix(self.postfix, refresh=False)

    def close(self) -> None:
        self.bar.close()
