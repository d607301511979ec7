"""The IDF curiosity agent that makes the Exploratory dataset (SGI-E): a training run.

The paper logs "the first 6M steps" of the IDF variant of Burda et al. 2018 ("Large-Scale Study
of Curiosity-Driven Learning") in each game. This module is that agent, settings from Burda et
al.'s code (``openai/large-scale-curiosity``) where the paper is silent (``ExploreConfig``):

- **Features** ``phi(s)``: a small conv net (32/64/64 channels, leaky ReLU, 512-d linear output)
  trained only by **inverse dynamics** (predict ``a_t`` from ``phi(s_t), phi(s_{t+1})``).
- **Forward model** ``f(phi(s_t), a_t)``: a residual MLP (4 blocks, the one-hot action
  concatenated at every layer) in that feature space, trained on ``stopgrad`` features; its
  squared error ``mean((f(phi(s_t), a_t) - phi(s_{t+1}))^2)`` **is the intrinsic reward**.
- The reward is divided by a **running std of the intrinsic return** (a discounted forward sum
  of rewards per env, never reset), and returns are **non-episodic**: GAE runs straight through
  game overs (Burda's ``use_news=0``), and ``s_{t+1}`` of a game over is the next game's first
  state, as in their rollout buffer.
- **PPO** over N parallel envs, one Adam over policy, feature, inverse and forward networks, no
  extrinsic reward anywhere in the objective (the game's raw rewards are still recorded in the
  store). Observations are normalised by a per-pixel mean and a scalar std measured from a
  random agent before learning starts.

Every transition is written, as it happens, into a ``TransitionStore``
(`sgi_lab.data.explore.EpisodeBuffers`: whole episodes, so frame stacks never cross envs or
episodes). The store is built in ``OUT.partial``; the agent is an ordinary run folder inside it,
``OUT.partial/agent/`` (`sgi_lab.runs.RunDir`, kind ``explore``: ``config.yaml``,
``status.json``, ``metrics.jsonl`` with one row per PPO update, and ``checkpoints/`` every
``checkpoint_every`` updates; a step is one env step of one env, as the ``steps`` collected). An interrupted collection resumes after the
store's last finished chunk with the agent's last checkpoint and freshly reset envs; the finished
store keeps ``agent/``.

Differences from Burda et al., all deliberate: the environment is the house Atari 100k
protocol (no sticky actions either way; 108k-frame cap instead of 18k), and the networks use
PyTorch's default initialisation.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm

from sgi_lab.config import ExploreConfig
from sgi_lab.data.explore import EpisodeBuffers
from sgi_lab.data.store import TransitionStore, TransitionStoreWriter
from sgi_lab.files import atomic_torch_save
from sgi_lab.nets.curiosity import IDFModel, PolicyNet
from sgi_lab.objectives.ppo import gae, ppo_clip_loss, value_loss
from sgi_lab.runs import MetricsLogger, RunDir, load_checkpoint

__all__ = [
    "AGENT_DIR",
    "ExploreAgent",
    "IntrinsicReturnNormalizer",
    "Rollout",
    "collect_exploratory",
    "data_params",
    "observation_moments",
    "ppo_update",
]

KIND = "explore"
AGENT_DIR = "agent"
"""The agent's run folder inside the store (``OUT.partial/agent/``, then ``OUT/agent/``)."""
# Settings that do not change what is collected: a resume may change them.
RUNTIME_KEYS = frozenset({"asynchronous", "device", "threads", "checkpoint_every"})


# -- intrinsic-return normaliser ---------------------------------------------------------------


class RunningMeanStd:
    """Running mean and (population) variance from batches: baselines' ``RunningMeanStd``.

    Starts at mean 0, variance 1 with a pseudo-count of ``epsilon``, so the first batch
    dominates but the variance is never 0.
    """

    def __init__(self, epsilon: float = 1e-4) -> None:
        self.mean = 0.0
        self.var = 1.0
        self.count = epsilon

    def update(self, x: np.ndarray) -> None:
        """Merge a batch of values (any shape) into the running moments (parallel formula)."""
        x = np.asarray(x, dtype=np.float64)
        batch_mean, batch_var, batch_count = float(x.mean()), float(x.var()), x.size
        delta = batch_mean - self.mean
        total = self.count + batch_count
        m2 = self.var * self.count + batch_var * batch_count
        m2 += delta**2 * self.count * batch_count / total
        self.mean += delta * batch_count / total
        self.var = m2 / total
        self.count = total


class IntrinsicReturnNormalizer:
    """Divides intrinsic rewards by a running std of the discounted intrinsic return.

    Per env, ``R_t = gamma * R_{t-1} + r_t`` (started at ``R_0 = r_0`` and never reset: the
    return is non-episodic); every ``R_t`` of a rollout updates a `RunningMeanStd`, and the
    rollout's rewards are divided by its ``sqrt(var)`` (Burda et al.'s ``RewardForwardFilter``).

    Args:
        gamma: discount of the intrinsic return.
    """

    def __init__(self, gamma: float) -> None:
        self.gamma = gamma
        self.returns: np.ndarray | None = None  # (N,) R_t of each env so far
        self.moments = RunningMeanStd()

    def __call__(self, rewards: np.ndarray) -> np.ndarray:
        """Normalise a rollout's rewards ``(T, N)``; returns ``(T, N)`` float32."""
        rewards = np.asarray(rewards, dtype=np.float64)
        filtered = np.empty_like(rewards)
        for t, reward in enumerate(rewards):
            self.returns = (
                reward.copy() if self.returns is None else self.returns * self.gamma + reward
            )
            filtered[t] = self.returns
        self.moments.update(filtered)
        return (rewards / math.sqrt(self.moments.var)).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {
            "returns": None if self.returns is None else self.returns.tolist(),
            "mean": self.moments.mean,
            "var": self.moments.var,
            "count": self.moments.count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returns = None if state["returns"] is None else np.asarray(state["returns"])
        self.moments.mean = state["mean"]
        self.moments.var = state["var"]
        self.moments.count = state["count"]


class Rollout(NamedTuple):
    """One rollout of N envs for T steps (numpy arrays).

    ``obs[t]`` is the observation acted on at step t, ``obs[T]`` the one after the last step
    (after a game over, the next game's first: returns are non-episodic).
    """

    obs: np.ndarray  # (T + 1, N, 4, 84, 84) uint8
    actions: np.ndarray  # (T, N) int64
    log_probs: np.ndarray  # (T, N) float32, of the acting policy
    values: np.ndarray  # (T, N) float32
    last_value: np.ndarray  # (N,) float32, V(obs[T])
    game_rewards: np.ndarray  # (T, N) float32 raw game rewards: recorded, never learned from


# -- the agent ---------------------------------------------------------------------------------


class ExploreAgent:
    """State of the curiosity agent: networks, optimiser, normalisers and random streams.

    Args:
        num_actions: size of the action set.
        config: the agent's settings.
        ob_mean: (4, 84, 84) per-pixel mean of random-agent observations.
        ob_std: scalar std of those observations (the mean of per-pixel stds, as Burda et al.).
        seed: seeds network initialisation, action sampling and minibatch shuffling.
    """

    def __init__(
        self,
        num_actions: int,
        config: ExploreConfig,
        ob_mean: np.ndarray,
        ob_std: float,
        seed: int = 0,
    ) -> None:
        device = config.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.config = config
        self.num_actions = num_actions
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.policy = PolicyNet(num_actions, config).to(self.device)
            self.idf = IDFModel(num_actions, config).to(self.device)
        params = list(self.policy.parameters()) + list(self.idf.parameters())
        self.optimizer = torch.optim.Adam(params, lr=config.lr)
        self.ob_mean = torch.as_tensor(ob_mean, dtype=torch.float32, device=self.device)
        self.ob_std = float(ob_std)
        self.normalizer = IntrinsicReturnNormalizer(config.gamma)
        self.generator = torch.Generator().manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.updates = 0
        self.agent_steps = 0

    def normalize(self, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        """uint8 observations (B, 4, 84, 84) -> ``(obs - ob_mean) / ob_std`` float32."""
        x = torch.as_tensor(obs, device=self.device).float()
        return (x - self.ob_mean) / self.ob_std

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample actions for (N, 4, 84, 84) observations: actions, their log-probs, values."""
        logits, values = self.policy(self.normalize(obs))
        log_probs = torch.log_softmax(logits.float(), -1).cpu()
        actions = torch.multinomial(log_probs.exp(), 1, generator=self.generator).squeeze(-1)
        chosen = log_probs.gather(-1, actions[:, None]).squeeze(-1)
        return actions.numpy(), chosen.numpy(), values.float().cpu().numpy()

    @torch.no_grad()
    def value(self, obs: np.ndarray) -> np.ndarray:
        """V(s) of (N, 4, 84, 84) observations, (N,)."""
        return self.policy(self.normalize(obs))[1].float().cpu().numpy()

    @torch.no_grad()
    def intrinsic_reward(
        self, obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray, batch: int = 1024
    ) -> np.ndarray:
        """Forward-model error of transitions (B, 4, 84, 84), (B,), (B, 4, 84, 84) -> (B,)."""
        out = []
        for start in range(0, len(actions), batch):
            sl = slice(start, start + batch)
            a = torch.as_tensor(actions[sl], device=self.device, dtype=torch.int64)
            _, forward = self.idf.losses(self.normalize(obs[sl]), self.normalize(next_obs[sl]), a)
            out.append(forward.float().cpu().numpy())
        return np.concatenate(out)

    @torch.no_grad()
    def rollout_intrinsic_reward(
        self, obs: np.ndarray, actions: np.ndarray, batch: int = 2048
    ) -> np.ndarray:
        """Forward-model error of a rollout: obs (T + 1, N, 4, 84, 84), actions (T, N) -> (T, N)."""
        steps, num_envs = actions.shape
        group = max(1, batch // (steps + 1))  # envs per pass
        out = np.empty((steps, num_envs), np.float32)
        for start in range(0, num_envs, group):
            sl = slice(start, start + group)
            a = torch.as_tensor(actions[:, sl], device=self.device, dtype=torch.int64)
            _, forward = self.idf.sequence_losses(self.normalize(obs[:, sl]), a)
            out[:, sl] = forward.float().cpu().numpy().reshape(steps, -1)
        return out

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed collection needs, loadable with ``weights_only=True``."""
        return {
            "format": "sgi-lab",
            "kind": "explore",
            "policy": self.policy.state_dict(),
            "idf": self.idf.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "ob_mean": self.ob_mean.cpu(),
            "ob_std": self.ob_std,
            "generator": self.generator.get_state(),
            # JSON: the numpy generator state holds integers wider than 64 bits.
            "meta": json.dumps(
                {
                    "rng": self.rng.bit_generator.state,
                    "normalizer": self.normalizer.state_dict(),
                    "updates": self.updates,
                    "agent_steps": self.agent_steps,
                    "num_actions": self.num_actions,
                }
            ),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.idf.load_state_dict(state["idf"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.ob_mean = state["ob_mean"].to(self.device)
        self.ob_std = float(state["ob_std"])
        self.generator.set_state(state["generator"])
        meta = json.loads(state["meta"])
        self.rng.bit_generator.state = meta["rng"]
        self.normalizer.load_state_dict(meta["normalizer"])
        self.updates = meta["updates"]
        self.agent_steps = meta["agent_steps"]

    def save(self, path: str | os.PathLike) -> None:
        """Write the checkpoint atomically (temp file, fsync, rename)."""
        atomic_torch_save(self.state_dict(), path)

    @classmethod
    def from_state(
        cls, state: dict[str, Any], config: ExploreConfig, seed: int = 0
    ) -> ExploreAgent:
        """An agent from a `state_dict` (a checkpoint's payload)."""
        num_actions = json.loads(state["meta"])["num_actions"]
        agent = cls(num_actions, config, state["ob_mean"].numpy(), state["ob_std"], seed)
        agent.load_state_dict(state)
        return agent

    @classmethod
    def load(cls, path: str | os.PathLike, config: ExploreConfig, seed: int = 0) -> ExploreAgent:
        """An agent from a checkpoint file (`save`, or the run's ``checkpoints/``), loaded with
        ``torch.load(weights_only=True)``.

        Raises:
            CheckpointError: a missing, truncated or foreign file.
        """
        return cls.from_state(load_checkpoint(path, kind=KIND), config, seed)


def ppo_update(agent: ExploreAgent, rollout: Rollout) -> dict[str, float]:
    """One PPO update of policy, features, inverse and forward model on a rollout.

    Order: intrinsic rewards (forward-model error, under no_grad) -> normalised by the running
    std of the intrinsic return -> non-episodic GAE -> advantages normalised -> ``epochs``
    passes over ``minibatches`` groups of whole env segments, one Adam step each on
    ``clip + value - entropy + inverse + forward`` losses.
    ``rollout.game_rewards`` is not read: no extrinsic reward reaches the objective.

    Returns:
        Means of the rollout's intrinsic rewards and of the last epoch's losses.
    """
    cfg = agent.config
    steps, num_envs = rollout.actions.shape
    intrinsic = agent.rollout_intrinsic_reward(rollout.obs, rollout.actions)
    rewards = agent.normalizer(intrinsic) if cfg.normalize_intrinsic else intrinsic
    advantages, returns = gae(
        rewards, rollout.values, rollout.last_value, cfg.gamma, cfg.gae_lambda, dones=None
    )
    if cfg.normalize_advantages:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-7)

    def tensor(x: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(x, dtype=dtype, device=agent.device)

    # (T, N) each, time-major like the observations.
    actions, old_log_probs = tensor(rollout.actions, torch.int64), tensor(rollout.log_probs)
    advantages, returns = tensor(advantages), tensor(returns)
    stats: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(cfg.epochs):
        stats.clear()
        # Minibatches are groups of whole env segments, as Burda et al.'s: each observation's
        # features then serve both as s_t and as s_{t+1}.
        order = agent.rng.permutation(num_envs)
        for envs in np.array_split(order, min(cfg.minibatches, num_envs)):
            index = torch.as_tensor(envs, device=agent.device)
            x = agent.normalize(rollout.obs[:, envs])  # (T + 1, n, 4, 84, 84)
            a = actions[:, index]
            logits, values = agent.policy(x[:-1].flatten(0, 1))
            log_probs = torch.log_softmax(logits.float(), -1)
            logp = log_probs.gather(-1, a.reshape(-1, 1)).squeeze(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            policy_loss = ppo_clip_loss(
                logp, old_log_probs[:, index].flatten(), advantages[:, index].flatten(), cfg.clip
            )
            critic_loss = value_loss(values.float(), returns[:, index].flatten())
            inverse_loss, forward_loss = agent.idf.sequence_losses(x, a)
            loss = (
                policy_loss.mean()
                + critic_loss.mean()
                - cfg.entropy_coef * entropy.mean()
                + inverse_loss.mean()
                + forward_loss.mean()
            )
            agent.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            agent.optimizer.step()
            for name, value in (
                ("losses/policy", policy_loss),
                ("losses/value", critic_loss),
                ("losses/entropy", entropy),
                ("losses/inverse", inverse_loss),
                ("losses/forward", forward_loss),
            ):
                stats[name].append(float(value.detach().mean()))
    agent.updates += 1
    return {
        "intrinsic/reward_raw": float(intrinsic.mean()),
        "intrinsic/reward": float(rewards.mean()),
        "intrinsic/return_std": math.sqrt(agent.normalizer.moments.var),
        **{name: float(np.mean(values)) for name, values in stats.items()},
    }


# -- collection --------------------------------------------------------------------------------


def observation_moments(
    game: str, steps: int, seed: int, **env_kwargs: Any
) -> tuple[np.ndarray, float]:
    """Per-pixel mean (4, 84, 84) and scalar std of a uniformly random agent's observations.

    As Burda et al.'s ``random_agent_ob_mean_std`` (the std is the mean of per-pixel stds),
    accumulated in float64 sums instead of a list of every observation.
    """
    from sgi_lab.envs import make_env

    env = make_env(game, seed=seed, train=False, **env_kwargs)
    try:
        obs, _ = env.reset(seed=seed)
        total = np.zeros(obs.shape, np.float64)
        squares = np.zeros(obs.shape, np.float64)
        for i in range(steps + 1):
            x = obs.astype(np.float64)
            total += x
            squares += x * x
            if i == steps:
                break
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                obs, _ = env.reset()
    finally:
        env.close()
    count = steps + 1
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean**2, 0.0))
    return mean.astype(np.float32), float(std.mean())


def data_params(config: ExploreConfig) -> dict[str, Any]:
    """The config's settings that shape the data (recorded in the manifest; a resume must match)."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in RUNTIME_KEYS}


def collect_exploratory(
    game: str,
    steps: int,
    out: str | os.PathLike,
    *,
    seed: int = 0,
    config: ExploreConfig | None = None,
    resume: bool = True,
    overwrite: bool = False,
    progress: bool = True,
    on_update: Callable[[dict[str, Any]], None] | None = None,
    on_step: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> TransitionStore:
    """The Exploratory dataset: ``steps`` transitions of an IDF curiosity agent, as a store.

    Args:
        game: any accepted spelling of an Atari 100k game.
        steps: transitions to write (the agent's first ``steps`` env steps, over all envs).
        out: store folder; built under ``out.partial`` and renamed into place when complete.
        seed: seeds the envs (env i: ``seed + i``; a resumed run offsets them), the networks and
            the agent's random streams.
        config: agent settings (default: Burda et al.'s, ``ExploreConfig()``).
        resume: continue an interrupted collection found at ``out.partial`` (its agent's last
            checkpoint included); it must have been started with the same game and settings.
        overwrite: replace an existing finished store at ``out``.
        progress: show a tqdm bar (steps/s, intrinsic reward, extrinsic episode return).
        on_update: called with each PPO update's metrics row (``step``: the agent's env steps
            so far, ``update``: the update's number; tests raise KeyboardInterrupt here).
        on_step: called before each env step with the observations (N, 4, 84, 84) and the
            actions (N,) about to be taken (a read-only hook, e.g. for tests).

    Returns:
        The finished store, opened for reading. Its ``agent/`` folder is the agent's finished
        run: final checkpoint and ``metrics.jsonl`` (one row per PPO update).
    """
    from sgi_lab.envs import canonical_game, make_vector_env

    config = config or ExploreConfig()
    if steps < 1:
        raise ValueError(f"steps must be positive, got {steps}")
    game = canonical_game(game)
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists (use overwrite to replace it)")
    record = {"steps": steps, "seed": seed, **data_params(config)}
    writer = TransitionStoreWriter.resume_matching(out, game, record) if resume else None
    env_kwargs = {
        "full_action_space": config.full_action_space,
        "max_episode_frames": config.max_episode_frames,
    }
    n = config.num_envs
    run_config = {"game": game, "steps": steps, "seed": seed, **dataclasses.asdict(config)}
    agent_dir = out.with_name(out.name + ".partial") / AGENT_DIR
    run = agent = None
    if writer is not None:
        run = RunDir.open(agent_dir, KIND, run_config, runtime_keys=RUNTIME_KEYS)
        state = run.load_latest(KIND)
        agent = None if state is None else ExploreAgent.from_state(state, config, seed)
    env_seed = seed + (len(writer.manifest.chunks) * n if writer else 0)
    envs = make_vector_env(
        game,
        n,
        seed=env_seed,
        train=False,
        asynchronous=config.asynchronous,
        record_ram=True,  # the store's ram field (labels of sgi_lab.probes)
        **env_kwargs,
    )
    threads = torch.get_num_threads()
    try:
        if config.threads > 0:
            torch.set_num_threads(config.threads)
        num_actions = int(envs.single_action_space.n)
        if agent is None:
            mean, std = observation_moments(
                game, config.ob_norm_steps, seed + 100_000, **env_kwargs
            )
            agent = ExploreAgent(num_actions, config, mean, std, seed)
        if writer is None:
            writer = TransitionStoreWriter.create(
                out,
                game=game,
                source="exploratory",
                params=record,
                num_actions=num_actions,
                chunk_size=config.chunk_size,
                overwrite=overwrite,
                sticky_action_prob=0.0,  # make_env: Atari 100k, no sticky actions
                ram=True,
            )
            run = RunDir.open(agent_dir, KIND, run_config, overwrite=True)
        # The run's step is the agent's env steps (over all envs), as the config's ``steps``.
        step = agent.agent_steps
        run.start(step, update=agent.updates)
        with run, run.metrics_logger(resume_step=step if agent.updates else None) as log:
            _run(agent, envs, writer, steps, run, log, progress, on_update, on_step, game)
            run.save_checkpoint(agent.agent_steps, agent.state_dict(), KIND)
            run.finish(agent.agent_steps, update=agent.updates, rows=steps)
        path = writer.close()  # renames OUT.partial, the agent's finished run inside, to OUT
    finally:
        envs.close()
        torch.set_num_threads(threads)
        if run is not None:
            run.unlock()  # a failure before the run started leaves no lock held
    return TransitionStore(path)


def _run(
    agent: ExploreAgent,
    envs: Any,
    writer: TransitionStoreWriter,
    steps: int,
    run: RunDir,
    log: MetricsLogger,
    progress: bool,
    on_update: Callable[[dict[str, Any]], None] | None,
    on_step: Callable[[np.ndarray, np.ndarray], None] | None,
    game: str,
) -> None:
    cfg = agent.config
    n, horizon = cfg.num_envs, cfg.rollout_steps
    buffers = EpisodeBuffers(n, writer, cfg.max_buffered_steps)
    obs_buf = np.zeros((horizon + 1, n, *envs.single_observation_space.shape), np.uint8)
    actions = np.zeros((horizon, n), np.int64)
    log_probs = np.zeros((horizon, n), np.float32)
    values = np.zeros((horizon, n), np.float32)
    game_rewards = np.zeros((horizon, n), np.float32)
    episode_return = np.zeros(n)
    finished_returns: collections.deque[float] = collections.deque(maxlen=100)
    bar = tqdm(
        total=steps,
        initial=writer.num_rows,
        disable=not progress,
        desc=f"explore {game}",
        unit="step",
        smoothing=0.05,
    )
    obs, info = envs.reset()
    done = False
    last_time, last_steps = time.perf_counter(), agent.agent_steps
    try:
        while not done:
            for t in range(horizon):
                obs_buf[t] = obs
                action, logp, value = agent.act(obs)
                if on_step is not None:
                    on_step(obs, action)
                # The RAM behind obs (a finished env's reset info is the top level).
                ram = np.asarray(info["ram"], np.uint8)
                next_obs, _, terminated, truncated, info = envs.step(action)
                raw = np.asarray(info["raw_reward"], np.float32)
                ended = np.logical_or(terminated, truncated)
                terminal = np.asarray(terminated, bool)
                if cfg.terminal_on_life_loss:
                    terminal = terminal | np.asarray(info["life_loss"], bool)
                for i in range(n):
                    buffers.add(
                        i,
                        obs[i, -1].copy(),
                        int(action[i]),
                        float(raw[i]),
                        bool(terminal[i]),
                        ram[i].copy(),
                    )
                    if ended[i]:
                        buffers.write(i)
                episode_return += raw
                finished_returns.extend(episode_return[ended].tolist())
                episode_return[ended] = 0.0
                actions[t], log_probs[t], values[t], game_rewards[t] = action, logp, value, raw
                obs = next_obs
                agent.agent_steps += n
                bar.update(min(n, steps - bar.n))
                if writer.num_rows + buffers.pending >= steps:
                    done = True
                    break
            if done:
                break
            obs_buf[horizon] = obs
            rollout = Rollout(obs_buf, actions, log_probs, values, agent.value(obs), game_rewards)
            metrics = ppo_update(agent, rollout)
            now = time.perf_counter()
            metrics.update(
                {
                    "rows": writer.num_rows,
                    "charts/sps": (agent.agent_steps - last_steps) / max(now - last_time, 1e-9),
                    "extrinsic/episode_return": (
                        float(np.mean(finished_returns)) if finished_returns else None
                    ),
                    "intrinsic/rollout_return": float(metrics["intrinsic/reward"] * horizon),
                }
            )
            last_time, last_steps = now, agent.agent_steps
            row = log.log(agent.agent_steps, update=agent.updates, **metrics)
            if agent.updates % cfg.checkpoint_every == 0:
                run.save_checkpoint(agent.agent_steps, agent.state_dict(), KIND)
                run.set_status("running", step=agent.agent_steps, update=agent.updates)
            ext = metrics["extrinsic/episode_return"]
            bar.set_postfix(
                int=f"{metrics['intrinsic/rollout_return']:.3g}",
                ext="-" if ext is None else f"{ext:.1f}",
                refresh=False,
            )
            if on_update is not None:
                on_update(row)
        # Unfinished episodes are written truncated, up to exactly ``steps`` rows.
        for i in range(n):
            buffers.write(i, limit=max(steps - writer.num_rows, 0))
    finally:
        bar.close()
