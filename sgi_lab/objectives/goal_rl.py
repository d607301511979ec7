"""Self-supervised goal-conditioned RL: hindsight goals in latent space, potential-based
synthetic rewards, and a C51 loss through the FiLM goal-conditioned Q head.

Goals and rewards follow the reference (``mila-iqia/SGI``, ``src/scrl.py`` and ``src/algos.py``):

* A goal starts as the target-encoder latent of a future state of the same episode (the
  sampler's ``goal_obs``, 1..50 steps ahead), is mixed with a unit-norm Gaussian vector,
  ``g <- alpha n + (1 - alpha) g``, alpha ~ U(0, 0.5), renormalized to [0, 1] like every latent,
  and with probability 0.2 replaced by another batch element's goal. ``noise_scale`` picks how
  large n is next to g: ``"unit"`` (the reference: n has norm 1 while the [0, 1] latent has a
  norm of tens, so goals barely move) or ``"latent_norm"`` (n scaled to ||g||, the same as
  mixing unit noise into the L2-normalized goal the text describes: goals "somewhat off" the
  manifold). The final min-max renormalization is scale-free, so that is the only difference.
* With s(z, g) = exp(2 c (cos(z, g) - 1)), the reward of t -> t+1 is
  scale * (s(z_tilde_{t+1}, g) - s(z_tilde_t, g)): positive when the latent moves toward the goal,
  zero when it stays put. The reference writes a distance d = 1 - s and r = d_t - d_{t+1},
  which is the same thing. c = 1 gives the paper's exp(2 cos - 2); the reference code uses
  ``distance_scale=5`` (exp(10 cos - 10)), a sharper bump around the goal.
* n-step: the reference uses ``goal_n_step = 1``: one synthetic reward from the target latents
  of s_t and s_{t+1}, bootstrapping from the EMA target network's goal-conditioned head at
  s_{t+1} with the same goal. :func:`goal_rl_loss` takes any n <= K from the sampler's K+1
  observations (rewards from consecutive target latents, summed with discounts), n = 1 being
  the default the trainer should use to match the paper.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from sgi_lab.nets.encoders import renormalize
from sgi_lab.objectives.rainbow import c51_loss, c51_target, n_step_return


def goal_draws(
    batch: int,
    size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    swap_prob: float = 0.2,
) -> dict[str, torch.Tensor]:
    """The random numbers :func:`sample_goals` uses, drawn in its order: a (B, D) Gaussian, a
    (B, 1) uniform for alpha and, when rows can swap, a (B,) uniform and (B,) offsets in 1..B-1.

    Drawing them ahead lets a population's batched update (under ``torch.func.vmap``) give each
    agent the draws of its own generator (:func:`goals_from_draws`).
    """
    kw = {"generator": generator, "device": device}
    draws = {"noise": torch.randn(batch, size, **kw), "alpha": torch.rand(batch, 1, **kw)}
    if batch > 1 and swap_prob > 0:
        draws["swap"] = torch.rand(batch, **kw)
        draws["offset"] = torch.randint(1, batch, (batch,), **kw)
    return draws


NoiseScale = Literal["unit", "latent_norm"]


def goals_from_draws(
    future_latents: torch.Tensor,
    draws: dict[str, torch.Tensor],
    alpha_max: float = 0.5,
    swap_prob: float = 0.2,
    noise_scale: NoiseScale = "unit",
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sample_goals` with its random numbers given (:func:`goal_draws`).

    Returns:
        (B, D) goals and the (B,) bool mask of swapped rows.
    """
    g = future_latents.detach().flatten(1).float()
    b = g.shape[0]
    noise = F.normalize(draws["noise"], dim=-1, eps=1e-3)
    if noise_scale == "latent_norm":
        noise = noise * g.norm(dim=-1, keepdim=True)
    elif noise_scale != "unit":
        raise ValueError(f"noise_scale must be 'unit' or 'latent_norm', got {noise_scale!r}")
    alpha = draws["alpha"] * alpha_max
    g = alpha * noise + (1.0 - alpha) * g
    rows = torch.arange(b, device=g.device)
    if "swap" in draws:
        swapped = draws["swap"] < swap_prob
        other = (rows + draws["offset"]) % b
        g = g[torch.where(swapped, other, rows)]
    else:
        swapped = torch.zeros(b, dtype=torch.bool, device=g.device)
    return renormalize(g, start_dim=-1), swapped


def sample_goals(
    future_latents: torch.Tensor,
    generator: torch.Generator | None = None,
    alpha_max: float = 0.5,
    swap_prob: float = 0.2,
    return_swapped: bool = False,
    noise_scale: NoiseScale = "unit",
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Noisy hindsight goals with in-batch swaps.

    Args:
        future_latents: (B, D) or (B, C, H, W) target-encoder latents of future states
            (renormalized, as :meth:`SGIModel.encode` returns them).
        generator: random source on the latents' device.
        alpha_max: noise weight alpha ~ U(0, alpha_max).
        swap_prob: probability that a row takes another row's goal (never its own).
        return_swapped: also return the (B,) bool mask of swapped rows.
        noise_scale: ``"unit"`` (the reference) or ``"latent_norm"`` (the text's reading).

    Returns:
        (B, D) goals, each min-max renormalized to [0, 1] (min 0, max 1); optionally the mask.

    Note:
        With ``"unit"``, as in the reference, the unit-norm noise is mixed into the latent as it
        is (not L2-normalized first); a 3,136-d latent in [0, 1] has a norm of tens, so the
        noise moves goals only slightly off the latent manifold. ``"latent_norm"`` scales the
        noise to the latent's norm, which is mixing unit noise into the L2-normalized goal as the
        text writes it. At alpha = 0.5, the cosine to the noise-free goal of a 3,136-d latent
        with uniform [0, 1] entries (norm ~32) is >= 0.998 with ``"unit"``, ~0.89 with
        ``"latent_norm"`` (sparse ReLU-like latents: ~0.97 vs ~0.70).
    """
    b, d = future_latents.shape[0], future_latents[0].numel()
    draws = goal_draws(b, d, generator, future_latents.device, swap_prob)
    goals, swapped = goals_from_draws(future_latents, draws, alpha_max, swap_prob, noise_scale)
    return (goals, swapped) if return_swapped else goals


def goal_similarity(
    z: torch.Tensor, goal: torch.Tensor, distance_scale: float = 1.0
) -> torch.Tensor:
    """s(z, g) = exp(2 c (cos(z, g) - 1)) in (0, 1], over the last dimension.

    Args:
        z: (..., D) latents (flatten (C, H, W) first).
        goal: (..., D) goals, broadcastable against z.
        distance_scale: c; 1 for the paper's formula, 5 for the reference code.
    """
    cos = (
        F.normalize(z.float(), dim=-1, eps=1e-3) * F.normalize(goal.float(), dim=-1, eps=1e-3)
    ).sum(-1)
    return torch.exp(2.0 * distance_scale * (cos - 1.0))


def goal_reward(
    z_t: torch.Tensor,
    z_next: torch.Tensor,
    goal: torch.Tensor,
    scale: float = 10.0,
    distance_scale: float = 1.0,
) -> torch.Tensor:
    """Potential-based synthetic reward scale * (s(z_next, g) - s(z_t, g)).

    Args:
        z_t: (..., D) target latents of s_t.
        z_next: (..., D) target latents of s_{t+1}.
        goal: (..., D) goals.
        scale: reward scale (10).
        distance_scale: see :func:`goal_similarity`.

    Returns:
        (...) rewards: > 0 moving toward the goal, 0 when the latent stays put.
    """
    return scale * (
        goal_similarity(z_next, goal, distance_scale) - goal_similarity(z_t, goal, distance_scale)
    )


def goal_n_step_returns(
    target_latents: torch.Tensor,
    goals: torch.Tensor,
    valid: torch.Tensor,
    gamma: float = 0.99,
    reward_scale: float = 10.0,
    distance_scale: float = 1.0,
    discount_rewards_once_more: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Synthetic n-step returns from consecutive target latents.

    Reward j uses z_tilde_j and z_tilde_{j+1}; it counts only where state j+1 is valid (after a
    terminal transition the sampler holds no next state, so that transition earns nothing and
    ends the return with discount 0).

    Args:
        target_latents: (B, n+1, D) EMA-target latents of s_t..s_{t+n} (flattened).
        goals: (B, D) goals.
        valid: (B, n+1) sampler validity of s_t..s_{t+n}.
        gamma: discount.
        reward_scale: see :func:`goal_reward`.
        distance_scale: see :func:`goal_similarity`.
        discount_rewards_once_more: the reference's ``calculate_returns``: reward j is
            discounted by gamma^(j+1), not gamma^j (the return is gamma times the textbook one;
            the bootstrap discount is unchanged). docs/paper_vs_code.md.

    Returns:
        returns (B,), bootstrap discounts (B,), per-step rewards (B, n) (for logging).
    """
    with torch.no_grad():
        z = target_latents.flatten(2)
        rewards = goal_reward(z[:, :-1], z[:, 1:], goals[:, None], reward_scale, distance_scale)
        next_valid = valid[:, 1:].to(rewards.dtype)
        rewards = rewards * next_valid
        returns, discounts = n_step_return(rewards, next_valid, gamma)
        if discount_rewards_once_more:
            returns = gamma * returns
    return returns, discounts, rewards


def goal_rl_loss(
    logits: torch.Tensor,
    actions: torch.Tensor,
    target_latents: torch.Tensor,
    goals: torch.Tensor,
    target_next_probs: torch.Tensor,
    valid: torch.Tensor,
    support: torch.Tensor,
    gamma: float = 0.99,
    reward_scale: float = 10.0,
    distance_scale: float = 1.0,
    selection_probs: torch.Tensor | None = None,
    discount_rewards_once_more: bool = False,
) -> torch.Tensor:
    """C51 n-step loss of the goal-conditioned Q head on synthetic rewards.

    n is read from ``target_latents`` (n+1 states); the reference uses n = 1.

    Args:
        logits: (B, A, Z) online ``model.goal_q_logits(z_t, goals)`` (with gradient).
        actions: (B,) int64 a_t.
        target_latents: (B, n+1, D) EMA-target latents of s_t..s_{t+n}.
        goals: (B, D) goals from :func:`sample_goals`.
        target_next_probs: (B, A, Z) EMA-target goal-conditioned probabilities at s_{t+n},
            same goals.
        valid: (B, n+1) sampler validity of s_t..s_{t+n}.
        support: (Z,) atoms.
        gamma: discount.
        reward_scale: see :func:`goal_reward`.
        distance_scale: see :func:`goal_similarity`.
        selection_probs: (B, A, Z) online probabilities at s_{t+n} for double Q (the
            reference's setting: rlpyt's ``double_dqn``); None selects with the target.
        discount_rewards_once_more: see :func:`goal_n_step_returns`.

    Returns:
        (B,) per-sample cross-entropy losses.
    """
    returns, discounts, _ = goal_n_step_returns(
        target_latents,
        goals,
        valid,
        gamma,
        reward_scale,
        distance_scale,
        discount_rewards_once_more,
    )
    with torch.no_grad():
        target = c51_target(target_next_probs.float(), returns, discounts, support, selection_probs)
    return c51_loss(logits, actions, target)
