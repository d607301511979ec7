"""PPO pieces: generalized advantage estimation and the clipped surrogate objective.

Pure functions of arrays/tensors, as in Burda et al. 2018's ``cppo_agent.py`` (the IDF curiosity
agent that makes the Exploratory dataset uses them; see `sgi_lab.exploratory.idf_agent`).
"""

from __future__ import annotations

import numpy as np
import torch


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    last_value: np.ndarray,
    gamma: float,
    lam: float,
    dones: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimates and the value targets over a rollout.

    ``delta_t = r_t + gamma * (1 - d_t) * V_{t+1} - V_t`` and
    ``A_t = delta_t + gamma * lam * (1 - d_t) * A_{t+1}``, with ``V_T = last_value``.

    Args:
        rewards: (T, N) rewards r_t of N parallel streams.
        values: (T, N) value estimates V(s_t).
        last_value: (N,) V(s_T), the state after the rollout's last step.
        gamma: discount.
        lam: GAE lambda.
        dones: (T, N) 1 where the transition t ended an episode (no bootstrap past it); None for
            non-episodic returns (Burda et al.'s ``use_news=0``: the stream never ends).

    Returns:
        ``(advantages, returns)``, both (T, N) float32; ``returns = advantages + values``.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    steps = rewards.shape[0]
    notdone = np.ones_like(rewards) if dones is None else 1.0 - np.asarray(dones, np.float64)
    advantages = np.zeros_like(rewards)
    next_value = np.asarray(last_value, dtype=np.float64)
    running = np.zeros_like(next_value)
    for t in range(steps - 1, -1, -1):
        delta = rewards[t] + gamma * notdone[t] * next_value - values[t]
        running = delta + gamma * lam * notdone[t] * running
        advantages[t] = running
        next_value = values[t]
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)


def ppo_clip_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip: float
) -> torch.Tensor:
    """Clipped surrogate policy loss of PPO, per sample.

    Args:
        logp: (B,) log pi(a|s) under the policy being updated.
        old_logp: (B,) log pi_old(a|s) under the policy that acted.
        advantages: (B,) advantage estimates (normalised by the caller if wanted).
        clip: epsilon; the ratio is clipped to [1 - clip, 1 + clip].

    Returns:
        (B,) ``max(-A * rho, -A * clip(rho, 1 - eps, 1 + eps))`` with ``rho = exp(logp - old_logp)``,
        the negated pessimistic surrogate (minimise it).
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    return torch.maximum(unclipped, clipped)


def value_loss(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """(B,) ``0.5 * (V(s) - R)^2``, unclipped as in Burda et al.'s PPO."""
    return 0.5 * (values - returns) ** 2
