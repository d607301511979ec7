"""Losses, one module each; pure functions of tensors returning per-sample losses (B,).

The trainer weights and reduces them (SGI pretraining: 2 x SPR + 1 x inverse + 1 x goal RL).

- `spr`: SPR's prediction of future latent projections (`spr_loss`);
- `inverse`: inverse dynamics, the action between two latents (`inverse_dynamics_loss`);
- `goal_rl`: hindsight goals in latent space, potential-based rewards and the C51 loss through
  the FiLM goal-conditioned Q head (`goal_rl_loss`);
- `rainbow`: the C51 n-step pieces shared with finetuning (`project_distribution`, `c51_loss`);
- `atc`: augmented temporal contrast, the contrastive baseline (`atc_loss`);
- `bc`: behavioural cloning, the baseline (`bc_loss`).
"""

from sgi_lab.objectives.atc import atc_accuracy, atc_logits, atc_loss
from sgi_lab.objectives.bc import bc_accuracy, bc_loss
from sgi_lab.objectives.goal_rl import (
    goal_draws,
    goal_n_step_returns,
    goal_reward,
    goal_rl_loss,
    goal_similarity,
    goals_from_draws,
    sample_goals,
)
from sgi_lab.objectives.inverse import inverse_dynamics_accuracy, inverse_dynamics_loss
from sgi_lab.objectives.rainbow import (
    c51_kl,
    c51_loss,
    c51_target,
    n_step_return,
    project_distribution,
    select_next_distribution,
)
from sgi_lab.objectives.spr import spr_loss

__all__ = [
    "atc_accuracy",
    "atc_logits",
    "atc_loss",
    "bc_accuracy",
    "bc_loss",
    "c51_kl",
    "c51_loss",
    "c51_target",
    "goal_n_step_returns",
    "goal_reward",
    "goal_rl_loss",
    "goal_similarity",
    "inverse_dynamics_accuracy",
    "inverse_dynamics_loss",
    "n_step_return",
    "project_distribution",
    "goal_draws",
    "goals_from_draws",
    "sample_goals",
    "select_next_distribution",
    "spr_loss",
]
