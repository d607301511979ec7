"""Categorical (C51) n-step Q-learning pieces shared by goal-conditioned RL and finetuning.

Shapes: B batch, A actions, Z atoms, n steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def n_step_return(
    rewards: torch.Tensor, nonterminals: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Discounted n-step return and the bootstrap discount.

    R = sum_{j<n} gamma^j r_j prod_{i<=j-1} m_i   and   discount = gamma^n prod_{j<n} m_j,
    where m_j = 0 if the transition at step j ended the episode (its reward still counts).

    Args:
        rewards: (B, n) rewards r_0..r_{n-1}.
        nonterminals: (B, n) 1 where transition j did not end the episode, else 0.
        gamma: discount.

    Returns:
        returns (B,), discounts (B,).
    """
    n = rewards.shape[1]
    m = nonterminals.to(rewards.dtype)
    alive = torch.cumprod(torch.cat([torch.ones_like(m[:, :1]), m[:, :-1]], 1), 1)
    powers = gamma ** torch.arange(n, device=rewards.device, dtype=rewards.dtype)
    returns = (rewards * alive * powers).sum(1)
    discounts = gamma**n * m.prod(1)
    return returns, discounts


def project_distribution(
    next_probs: torch.Tensor,
    returns: torch.Tensor,
    discounts: torch.Tensor,
    support: torch.Tensor,
) -> torch.Tensor:
    """C51 projection of the Bellman-updated distribution onto the fixed support.

    Each atom z_j of the next-state distribution moves to clamp(R + discount * z_j, v_min,
    v_max) and its mass is split linearly between the two nearest support atoms (Bellemare
    et al., 2017; Dopamine's ``project_distribution``).

    Args:
        next_probs: (B, Z) probabilities of the bootstrap distribution (the selected action).
        returns: (B,) n-step returns.
        discounts: (B,) gamma^n, or 0 where the episode ended.
        support: (Z,) evenly spaced atoms.

    Returns:
        (B, Z) target probabilities (rows sum to the rows of next_probs).
    """
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (support.numel() - 1)
    target_atoms = (returns[:, None] + discounts[:, None] * support[None, :]).clamp(v_min, v_max)
    # weight[b, i, j]: share of next atom j that lands on support atom i.
    weight = (1 - (target_atoms[:, None, :] - support[None, :, None]).abs() / delta).clamp(0, 1)
    # Elementwise multiply-and-sum rather than einsum: autocast would run a matmul in bf16.
    return (weight * next_probs[:, None, :].float()).sum(-1)


def select_next_distribution(
    target_probs: torch.Tensor,
    support: torch.Tensor,
    selection_probs: torch.Tensor | None = None,
) -> torch.Tensor:
    """Bootstrap distribution of the greedy action (double-Q when selection_probs is given).

    Args:
        target_probs: (B, A, Z) target-network probabilities at the bootstrap state.
        support: (Z,) atoms.
        selection_probs: (B, A, Z) online-network probabilities used to pick the argmax action
            (double DQN); None picks with the target network itself.

    Returns:
        (B, Z) probabilities of the selected action under the target network.
    """
    chooser = target_probs if selection_probs is None else selection_probs
    actions = (chooser.float() * support).sum(-1).argmax(dim=-1)
    return target_probs[torch.arange(target_probs.shape[0], device=actions.device), actions]


def c51_loss(
    logits: torch.Tensor, actions: torch.Tensor, target_probs: torch.Tensor
) -> torch.Tensor:
    """Cross-entropy between projected targets and the predicted distribution of a.

    Args:
        logits: (B, A, Z) atom logits or log-probabilities (log_softmax is idempotent).
        actions: (B,) int64 actions taken.
        target_probs: (B, Z) projected target distribution (no gradient flows into it).

    Returns:
        (B,) per-sample losses.
    """
    log_probs = F.log_softmax(logits.float(), dim=-1)
    chosen = log_probs[torch.arange(log_probs.shape[0], device=actions.device), actions]
    return -(target_probs.detach() * chosen).sum(-1)


def c51_kl(
    logits: torch.Tensor, actions: torch.Tensor, target_probs: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """KL(target || predicted) per sample, (B,), no gradient: the priority for replay."""
    with torch.no_grad():
        target = target_probs.clamp(eps, 1.0)
        log_probs = F.log_softmax(logits.float(), dim=-1)
        chosen = log_probs[torch.arange(log_probs.shape[0], device=actions.device), actions]
        return (target * (target.log() - chosen)).sum(-1).clamp_min(0.0)


def c51_target(
    target_probs: torch.Tensor,
    returns: torch.Tensor,
    discounts: torch.Tensor,
    support: torch.Tensor,
    selection_probs: torch.Tensor | None = None,
) -> torch.Tensor:
    """Greedy (optionally double-Q) bootstrap, Bellman update and projection in one call.

    Args:
        target_probs: (B, A, Z) target network at the bootstrap state.
        returns: (B,) n-step returns.
        discounts: (B,) bootstrap discounts.
        support: (Z,) atoms.
        selection_probs: (B, A, Z) online network at the bootstrap state for double Q.

    Returns:
        (B, Z) projected target distribution.
    """
    next_probs = select_next_distribution(target_probs, support, selection_probs)
    return project_distribution(next_probs, returns, discounts, support)
