"""The IDF curiosity agent of the Exploratory dataset (SGI-E): its state and its PPO update.

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

The networks use PyTorch's default initialisation (a deliberate difference from Burda et al.).
`sgi_lab.exploratory.collector` runs the agent and records what it does.
"""

from __future__ import annotations

import collections
import json
import math
import os
from typing import Any, NamedTuple

import numpy as np
import torch

from sgi_lab.base.files import atomic_torch_save
from sgi_lab.config import ExploreConfig
from sgi_lab.exploratory.networks import IDFModel, PolicyNet
from sgi_lab.exploratory.ppo import gae, ppo_clip_loss, value_loss
from sgi_lab.runs.checkpoints import load_checkpoint

__all__ = [
    "KIND",
    "ExploreAgent",
    "IntrinsicReturnNormalizer",
    "Rollout",
    "RunningMeanStd",
    "ppo_update",
]

KIND = "explore"
"""The agent's run and checkpoint kind."""


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

    obs: np.ndarray  # (T + 1, N, C, H, W) uint8
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
        ob_mean: (C, H, W) per-pixel mean of random-agent observations; its shape is the
            observation's, which sizes the networks ((4, 84, 84) for Atari, (C, 10, 10) for
            MinAtar).
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
            shape = tuple(np.shape(ob_mean))
            self.policy = PolicyNet(num_actions, config, shape).to(self.device)
            self.idf = IDFModel(num_actions, config, shape).to(self.device)
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
        """uint8 observations (B, C, H, W) -> ``(obs - ob_mean) / ob_std`` float32."""
        x = torch.as_tensor(obs, device=self.device).float()
        return (x - self.ob_mean) / self.ob_std

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample actions for (N, C, H, W) observations: actions, their log-probs, values."""
        logits, values = self.policy(self.normalize(obs))
        log_probs = torch.log_softmax(logits.float(), -1).cpu()
        actions = torch.multinomial(log_probs.exp(), 1, generator=self.generator).squeeze(-1)
        chosen = log_probs.gather(-1, actions[:, None]).squeeze(-1)
        return actions.numpy(), chosen.numpy(), values.float().cpu().numpy()

    @torch.no_grad()
    def value(self, obs: np.ndarray) -> np.ndarray:
        """V(s) of (N, C, H, W) observations, (N,)."""
        return self.policy(self.normalize(obs))[1].float().cpu().numpy()

    @torch.no_grad()
    def intrinsic_reward(
        self, obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray, batch: int = 1024
    ) -> np.ndarray:
        """Forward-model error of transitions (B, C, H, W), (B,), (B, C, H, W) -> (B,)."""
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
        """Forward-model error of a rollout: obs (T + 1, N, C, H, W), actions (T, N) -> (T, N)."""
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
            x = agent.normalize(rollout.obs[:, envs])  # (T + 1, n, C, H, W)
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
