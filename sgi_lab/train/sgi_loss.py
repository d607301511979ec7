"""The SGI loss composition, shared by offline pretraining and finetuning with ``ssl: all``.

One function, `sgi_loss_terms`, turns an online network's latent of s_t, the actions and masks of
the K steps after it and the targets (computed under ``no_grad`` by the caller, which knows how it
batches its networks) into each objective's per-sample loss: SPR, goal-conditioned RL, inverse
dynamics and behavioural cloning. `weighted_sum` applies the weights. What differs between the
stages is a parameter of `SGILossSettings`, visible where each stage builds it
(`pretraining_settings`, `finetuning_settings`).

Shapes: B batch, K SPR steps, n goal-RL steps, P projection size, A actions, Z atoms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from sgi_lab.config import FinetuneConfig, PretrainConfig
from sgi_lab.nets import SGIModel
from sgi_lab.objectives import (
    bc_accuracy,
    bc_loss,
    goal_rl_loss,
    inverse_dynamics_accuracy,
    inverse_dynamics_loss,
    spr_loss,
)

__all__ = [
    "SGILossSettings",
    "SGITargets",
    "TERMS",
    "finetuning_settings",
    "loss_weights_note",
    "pretraining_settings",
    "sgi_loss_terms",
    "weighted_sum",
]


TERMS = ("spr", "goal_rl", "inverse", "bc")
"""The SGI loss terms, by the key `sgi_loss_terms` returns."""


@dataclass(frozen=True)
class SGILossSettings:
    """One stage's SGI losses: which terms it learns, their weights, and goal RL's settings.

    Whether a term is on is decided once, where a stage builds its settings (``terms``); the
    weights are read only where the terms are summed (`weighted_sum`).

    Attributes:
        terms: the terms learned (a subset of `TERMS`).
        spr_coefficient: weight of `spr_loss` (-sum_k cos), the config's ``spr_coefficient``
            as written (the authors' weight w on mean_k(2 - 2 cos) is 2 w / K of it; the
            constant 2 w their loss adds changes no gradient and is left out, so
            ``losses/total`` is lower by it).
        goal_weight: weight of goal-conditioned RL.
        inverse_weight: weight of inverse dynamics.
        bc_weight: weight of behavioural cloning.
        gamma: discount.
        goal_reward_scale: scale of the goal reward.
        goal_distance_scale: c in the goal reward's exp(2c(cos - 1)).
        goal_returns: ``"text"`` or ``"reference"`` (`sgi_lab.objectives.goal_n_step_returns`).
        n_step: n of goal RL's return (1 in both stages of the reference).
    """

    terms: frozenset[str] = frozenset()
    spr_coefficient: float = 0.0
    goal_weight: float = 0.0
    inverse_weight: float = 0.0
    bc_weight: float = 0.0
    gamma: float = 0.99
    goal_reward_scale: float = 10.0
    goal_distance_scale: float = 1.0
    goal_returns: str = "text"
    n_step: int = 1

    @property
    def uses_transition_model(self) -> bool:
        """SPR and inverse dynamics both read the K-step rollout and the target projections."""
        return bool({"spr", "inverse"} & self.terms)

    def weight(self, term: str) -> float:
        """The weight `weighted_sum` multiplies ``term``'s per-sample loss by."""
        return {
            "spr": self.spr_coefficient,
            "goal_rl": self.goal_weight,
            "inverse": self.inverse_weight,
            "bc": self.bc_weight,
        }[term]


def pretraining_settings(config: PretrainConfig) -> SGILossSettings:
    """Offline pretraining: a term is learned when its weight is positive (the S/G/I
    ablations set a weight to 0: the model then has no head for it)."""
    weights = {
        "spr": config.spr_coefficient,
        "inverse": config.inverse_weight,
        "bc": config.bc_weight,
    }
    terms = {term for term, weight in weights.items() if weight > 0}
    return SGILossSettings(
        terms=frozenset(terms | ({"goal_rl"} if config.uses_goal_rl else set())),
        spr_coefficient=config.spr_coefficient,
        goal_weight=config.goal_weight,
        inverse_weight=config.inverse_weight,
        bc_weight=config.bc_weight,
        gamma=config.gamma,
        goal_reward_scale=config.goal_reward_scale,
        goal_distance_scale=config.goal_distance_scale,
        goal_returns=config.goal_returns,
        n_step=config.n_step,
    )


def finetuning_settings(config: FinetuneConfig) -> SGILossSettings:
    """Finetuning: SPR (``spr_coefficient``: 2, SPR's 5 on mean_k(2 - 2 cos)) unless
    ``ssl: none``; goal RL and inverse dynamics with ``ssl: all`` (`FinetuneConfig.uses_goal_rl`),
    whose goal reward and return are the config's (``goal_distance_scale``, ``goal_returns``:
    the text's by default, the reference's in ``params/finetune/all_ssl.yaml``); goal RL's n
    is 1, as in the reference (the config's ``n_step`` is the RL loss's)."""
    terms = {"spr"} if config.rollout_steps else set()
    if config.uses_goal_rl:
        terms |= {"goal_rl", "inverse"}
    return SGILossSettings(
        terms=frozenset(terms),
        spr_coefficient=config.spr_coefficient,
        goal_weight=config.goal_weight,
        inverse_weight=config.inverse_weight,
        gamma=config.gamma,
        goal_reward_scale=config.goal_reward_scale,
        goal_distance_scale=config.goal_distance_scale,
        goal_returns=config.goal_returns,
    )


class SGITargets(NamedTuple):
    """What the losses compare against, from the target networks (no gradient).

    Attributes:
        y: (B, K, P) target projections p_m(z_tilde_{t+1..t+K}) (SPR, inverse dynamics).
        z: (B, n+1, D) flattened target latents of s_t..s_{t+n} (goal rewards).
        goals: (B, D) goals (`sgi_lab.objectives.goals_from_draws`).
        goal_next: (B, A, Z) target goal-conditioned probabilities at s_{t+n}.
        goal_selection: (B, A, Z) online goal-conditioned probabilities at s_{t+n} when the
            online network picks the bootstrap action (double Q), else None.
        goal_film: the online FiLM parameters of ``goals`` (``m.film(goals)``, with gradient)
            when the caller computed them for the selection: the loss reuses them instead of
            running the FiLM generator on the same goals twice. None: the loss computes them.
    """

    y: torch.Tensor | None = None
    z: torch.Tensor | None = None
    goals: torch.Tensor | None = None
    goal_next: torch.Tensor | None = None
    goal_selection: torch.Tensor | None = None
    goal_film: tuple[torch.Tensor, ...] | None = None


def sgi_loss_terms(
    m: SGIModel,
    z0: torch.Tensor,
    actions: torch.Tensor,
    valid: torch.Tensor,
    targets: SGITargets,
    settings: SGILossSettings,
    action_mask: torch.Tensor | None = None,
    y0: torch.Tensor | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Per-sample losses of every objective with a nonzero weight, and values to log.

    Args:
        m: the online network (a module, or the template of a functional call).
        z0: (B, C, H, W) online latent of s_t (with gradient).
        actions: (B, >= K) int64 a_t, a_{t+1}, ...
        valid: (B, K+1) whether s_t..s_{t+K} are valid (same episode, no terminal before).
        targets: `SGITargets`.
        settings: `SGILossSettings`.
        action_mask: (A,) bool, the game's actions when the network is wider (populations).
        y0: (B, P) ``m.project(z0)`` when the caller has it (inverse dynamics uses it).

    Returns:
        ``{"spr", "goal_rl", "inverse", "bc"}`` -> (B,) losses (those with a weight), and
        ``{"charts/inverse_accuracy", "charts/bc_accuracy", ...}`` -> (B,) detached values.
    """
    terms = settings.terms
    losses: dict[str, torch.Tensor] = {}
    charts: dict[str, torch.Tensor] = {}
    if settings.uses_transition_model:
        K = targets.y.shape[1]
        y_pred = m.project(m.rollout(z0, actions[:, :K]))  # p(z_hat_{t+1..t+K}), (B, K, P)
        step_mask = valid[:, 1:]
        if "spr" in terms:
            losses["spr"] = spr_loss(m.predict(y_pred), targets.y, step_mask)
        if "inverse" in terms:
            y0 = m.project(z0) if y0 is None else y0
            y_hat = torch.cat([y0[:, None], y_pred[:, :-1]], 1)  # p(z_hat_{t..t+K-1})
            logits = m.inverse_logits(y_hat, targets.y, action_mask)
            losses["inverse"] = inverse_dynamics_loss(logits, actions[:, :K], step_mask)
            charts["charts/inverse_accuracy"] = inverse_dynamics_accuracy(
                logits, actions[:, :K], step_mask
            )
    if "goal_rl" in terms:
        losses["goal_rl"] = goal_rl_loss(
            m.goal_q_logits(z0, targets.goals, action_mask, targets.goal_film),
            actions[:, 0],
            targets.z,
            targets.goals,
            targets.goal_next,
            valid[:, : settings.n_step + 1],
            m.support,
            settings.gamma,
            settings.goal_reward_scale,
            settings.goal_distance_scale,
            selection_probs=targets.goal_selection,
            discount_rewards_once_more=settings.goal_returns == "reference",
        )
    if "bc" in terms:
        logits = m.bc_logits(z0)
        losses["bc"] = bc_loss(logits, actions[:, 0])
        charts["charts/bc_accuracy"] = bc_accuracy(logits, actions[:, 0])
    return losses, charts


def loss_weights_note(settings: SGILossSettings) -> str:
    """The weights `weighted_sum` applies, in one line for a run's log: ``"SGI loss weights: 2
    x spr (-sum_k cos, the config's spr_coefficient), 1 x goal_rl, 1 x inverse"``."""
    shown = [f"{settings.weight(t):g} x {t}" for t in TERMS if t in settings.terms]
    if "spr" in settings.terms:
        shown[0] += " (-sum_k cos, the config's spr_coefficient)"
    return "SGI loss weights: " + (", ".join(shown) or "none (no SGI loss is learned)")


def weighted_sum(losses: dict[str, torch.Tensor], settings: SGILossSettings) -> torch.Tensor:
    """(B,) sum over the objectives of weight x per-sample loss: where the weights are read."""
    return sum(settings.weight(k) * v for k, v in losses.items())
