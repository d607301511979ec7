"""Unit tests for sgi_lab.objectives, against hand-computed values, plus gradient flow."""

import math

import pytest
import torch
import torch.nn.functional as F

from sgi_lab.nets import SGIModel, make_target
from sgi_lab.objectives import (
    atc_accuracy,
    atc_loss,
    bc_loss,
    c51_kl,
    c51_loss,
    c51_target,
    goal_reward,
    goal_rl_loss,
    goal_similarity,
    inverse_dynamics_accuracy,
    inverse_dynamics_loss,
    n_step_return,
    project_distribution,
    sample_goals,
    select_next_distribution,
    spr_loss,
)

# -- SPR ------------------------------------------------------------------------------------------


def test_spr_loss_is_minus_k_for_perfect_predictions():
    pred = torch.randn(4, 5, 8)
    loss = spr_loss(pred, 3.0 * pred, torch.ones(4, 5))
    assert loss.shape == (4,)
    torch.testing.assert_close(loss, torch.full((4,), -5.0))
    torch.testing.assert_close(spr_loss(pred, -pred), torch.full((4,), 5.0))


def test_spr_loss_mask_and_orthogonal():
    pred = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]])
    targ = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])
    torch.testing.assert_close(spr_loss(pred, targ), torch.tensor([-2.0]))
    torch.testing.assert_close(
        spr_loss(pred, targ, torch.tensor([[1, 1, 0]])), torch.tensor([-1.0])
    )


# -- inverse dynamics ----------------------------------------------------------------------------


def test_inverse_loss_uniform_logits_is_log_a():
    loss = inverse_dynamics_loss(torch.zeros(3, 5, 6), torch.randint(0, 6, (3, 5)))
    assert loss.shape == (3,)
    torch.testing.assert_close(loss, torch.full((3,), math.log(6)))
    masked = inverse_dynamics_loss(
        torch.zeros(1, 4, 6), torch.zeros(1, 4, dtype=torch.long), torch.tensor([[1, 1, 0, 0]])
    )
    torch.testing.assert_close(masked, torch.tensor([math.log(6) / 2]))


def test_inverse_accuracy():
    logits = torch.tensor([[[5.0, 0.0], [0.0, 5.0], [5.0, 0.0]]])
    actions = torch.tensor([[0, 0, 0]])
    torch.testing.assert_close(inverse_dynamics_accuracy(logits, actions), torch.tensor([2 / 3]))
    mask = torch.tensor([[1, 0, 0]])
    torch.testing.assert_close(
        inverse_dynamics_accuracy(logits, actions, mask), torch.tensor([1.0])
    )


# -- goal-conditioned RL -------------------------------------------------------------------------


def test_goal_reward_sign_and_hand_value():
    goal = torch.tensor([[1.0, 0.0]])
    far, near = torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.1]])
    assert goal_reward(far, near, goal).item() > 0  # moving toward the goal
    assert goal_reward(near, far, goal).item() < 0  # moving away
    torch.testing.assert_close(goal_reward(near, near, goal), torch.zeros(1))  # staying put
    # cos = 0 -> s = exp(-2); cos = 1 -> s = 1.
    torch.testing.assert_close(
        goal_reward(far, goal, goal), torch.tensor([10 * (1 - math.exp(-2))])
    )
    torch.testing.assert_close(
        goal_similarity(far, goal, distance_scale=5.0), torch.tensor([math.exp(-10)])
    )


def test_sample_goals_statistics():
    b, d = 4000, 16
    latents = torch.rand(b, d)
    goals, swapped = sample_goals(latents, torch.Generator().manual_seed(0), return_swapped=True)
    assert goals.shape == (b, d)
    torch.testing.assert_close(goals.amin(1), torch.zeros(b))
    torch.testing.assert_close(goals.amax(1), torch.ones(b))
    assert abs(swapped.float().mean().item() - 0.2) < 0.03
    # Unswapped goals stay close to their own latent; swapped ones come from another row.
    own = F.cosine_similarity(goals, latents, dim=-1)
    assert own[~swapped].mean() > own[swapped].mean() + 0.05
    # Reproducible; without noise or swaps the goal is the renormalized latent.
    again = sample_goals(latents, torch.Generator().manual_seed(0))
    torch.testing.assert_close(goals, again)
    plain = sample_goals(latents[:3], alpha_max=0.0, swap_prob=0.0)
    lo, hi = latents[:3].amin(1, keepdim=True), latents[:3].amax(1, keepdim=True)
    torch.testing.assert_close(plain, (latents[:3] - lo) / (hi - lo))


def test_sample_goals_swap_takes_other_rows():
    latents = torch.eye(8) * 10 + torch.rand(8, 8) * 0.01
    goals, swapped = sample_goals(
        latents, torch.Generator().manual_seed(1), alpha_max=0.0, swap_prob=1.0, return_swapped=True
    )
    assert swapped.all()
    assert (goals.argmax(1) != torch.arange(8)).all()


# -- C51 pieces ----------------------------------------------------------------------------------


def test_project_distribution_hand_computed():
    support = torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0])
    p = torch.tensor([[0.1, 0.2, 0.4, 0.2, 0.1]])
    # Atoms move to 0.5 + 0.5 z = [-0.5, 0, 0.5, 1, 1.5] and split between neighbours.
    out = project_distribution(p, torch.tensor([0.5]), torch.tensor([0.5]), support)
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.05, 0.45, 0.45, 0.05]]))
    # Clamped at v_max, and a terminal (discount 0) puts the return's mass on its neighbours.
    rows = project_distribution(
        p.expand(2, 5), torch.tensor([10.0, 0.3]), torch.tensor([1.0, 0.0]), support
    )
    torch.testing.assert_close(rows, torch.tensor([[0, 0, 0, 0, 1.0], [0, 0, 0.7, 0.3, 0]]))


def test_project_distribution_preserves_mass_and_mean():
    support = torch.linspace(-10, 10, 51)
    p = torch.softmax(torch.randn(6, 51), -1)
    r, d = torch.rand(6) * 2 - 1, torch.full((6,), 0.8)  # |r + d z| <= 9: nothing clamped
    out = project_distribution(p, r, d, support)
    torch.testing.assert_close(out.sum(-1), torch.ones(6))
    torch.testing.assert_close(out @ support, r + d * (p @ support))


def test_n_step_return_hand_computed():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]])
    nonterminal = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
    returns, discounts = n_step_return(rewards, nonterminal, 0.5)
    # Row 2 ends at step 1: its reward counts, later ones do not, no bootstrap.
    torch.testing.assert_close(returns, torch.tensor([1.75, 2.0]))
    torch.testing.assert_close(discounts, torch.tensor([0.125, 0.0]))


def test_c51_loss_and_double_q_selection():
    support = torch.tensor([-1.0, 0.0, 1.0])
    logits = torch.randn(2, 3, 3)
    actions = torch.tensor([2, 0])
    target = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    expected = -(target * F.log_softmax(logits, -1)[torch.arange(2), actions]).sum(-1)
    torch.testing.assert_close(c51_loss(logits, actions, target), expected)
    torch.testing.assert_close(c51_loss(F.log_softmax(logits, -1), actions, target), expected)
    assert (c51_kl(logits, actions, target) >= 0).all()
    # Target net prefers action 0, online net prefers action 1: double Q takes 1.
    target_probs = torch.tensor([[[0, 0, 1.0], [1.0, 0, 0]]])
    online_probs = torch.tensor([[[1.0, 0, 0], [0, 0, 1.0]]])
    torch.testing.assert_close(select_next_distribution(target_probs, support), target_probs[:, 0])
    torch.testing.assert_close(
        select_next_distribution(target_probs, support, online_probs), target_probs[:, 1]
    )
    out = c51_target(target_probs, torch.zeros(1), torch.ones(1), support)
    torch.testing.assert_close(out, torch.tensor([[0, 0, 1.0]]))


def test_goal_rl_loss_hand_case():
    support = torch.linspace(-10, 10, 51)
    logits = torch.randn(3, 4, 51)
    actions = torch.tensor([0, 1, 3])
    latents = torch.rand(3, 1, 10).expand(3, 2, 10)  # latent stays put: reward 0
    goals = torch.rand(3, 10)
    next_probs = F.one_hot(torch.full((3, 4), 25), 51).float()  # value 0 for every action
    valid = torch.ones(3, 2, dtype=torch.bool)
    loss = goal_rl_loss(logits, actions, latents, goals, next_probs, valid, support)
    expected = -F.log_softmax(logits, -1)[torch.arange(3), actions, 25]
    torch.testing.assert_close(loss, expected)
    # Reaching the goal from orthogonal: r = 10 (1 - e^-2) ~ 8.647; bootstrap value 0, so the
    # target splits between atoms 8.4 (index 46) and 8.8 (index 47).
    z = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])
    goal = torch.tensor([[1.0, 0.0]])
    r = 10 * (1 - math.exp(-2))
    w47 = (r - 8.4) / 0.4
    logits1 = torch.randn(1, 1, 51)
    loss = goal_rl_loss(logits1, torch.tensor([0]), z, goal, next_probs[:1, :1], valid[:1], support)
    lp = F.log_softmax(logits1[0, 0], -1)
    torch.testing.assert_close(loss, -((1 - w47) * lp[46] + w47 * lp[47]).view(1))
    # After a terminal transition s_{t+1} is missing: no reward, no bootstrap -> atom 0.
    terminal = torch.tensor([[True, False]])
    loss = goal_rl_loss(logits1, torch.tensor([0]), z, goal, next_probs[:1, :1], terminal, support)
    torch.testing.assert_close(loss, -lp[25].view(1))


# -- ATC and BC ----------------------------------------------------------------------------------


def test_atc_aligned_pairs_beat_shuffled():
    g = torch.Generator().manual_seed(0)
    pos = torch.randn(32, 16, generator=g) * 3
    aligned = atc_loss(pos, pos)
    shuffled = atc_loss(pos, pos[torch.randperm(32, generator=g)])
    assert aligned.shape == (32,)
    assert aligned.mean() < shuffled.mean()
    assert atc_accuracy(pos, pos).mean() > 0.9
    valid = torch.ones(32, dtype=torch.bool)
    valid[:5] = False
    assert (atc_loss(pos, pos, valid)[:5] == 0).all()


def test_bc_loss_is_cross_entropy():
    logits = torch.randn(5, 4)
    actions = torch.tensor([0, 1, 2, 3, 0])
    torch.testing.assert_close(
        bc_loss(logits, actions), F.cross_entropy(logits, actions, reduction="none")
    )
    torch.testing.assert_close(
        bc_loss(torch.zeros(2, 4), actions[:2]), torch.full((2,), math.log(4))
    )


# -- every objective reaches the encoder ---------------------------------------------------------

B, K, A = 4, 2, 3


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = SGIModel(
        "nature", A, hidden_size=8, noisy=False, goal_head=True, inverse_model=True, atc_head=True
    )
    target = make_target(model)
    g = torch.Generator().manual_seed(0)
    obs = torch.randint(0, 256, (B, K + 1, 4, 84, 84), generator=g, dtype=torch.uint8)
    actions = torch.randint(0, A, (B, K + 1), generator=g)
    return model, target, obs, actions


def _loss(name, model, target, obs, actions):
    valid = torch.ones(B, K + 1, dtype=torch.bool)
    with torch.no_grad():
        z_t = target.encode(obs)  # (B, K+1, C, 7, 7)
        y_t = target.project(z_t)
    z0 = model.encode(obs[:, 0])
    if name == "spr":
        preds = model.predict(model.project(model.rollout(z0, actions[:, :K])))
        return spr_loss(preds, y_t[:, 1:], valid[:, 1:])
    if name == "inverse":
        z_hat = torch.cat([z0[:, None], model.rollout(z0, actions[:, : K - 1])], 1)
        logits = model.inverse_logits(model.project(z_hat), y_t[:, 1:])
        return inverse_dynamics_loss(logits, actions[:, :K], valid[:, 1:])
    if name == "goal_rl":
        goals = sample_goals(z_t[:, -1], torch.Generator().manual_seed(0))
        with torch.no_grad():
            next_probs = target.goal_q_log_probs(z_t[:, 1], goals).exp()
        return goal_rl_loss(
            model.goal_q_logits(z0, goals),
            actions[:, 0],
            z_t[:, :2],
            goals,
            next_probs,
            valid[:, :2],
            model.support,
        )
    if name == "rainbow":
        with torch.no_grad():
            next_probs = target.q_log_probs(z_t[:, 1]).exp()
        tgt = c51_target(next_probs, torch.ones(B), torch.full((B,), 0.99), model.support)
        return c51_loss(model.q_logits(z0), actions[:, 0], tgt)
    if name == "atc":
        return atc_loss(model.atc_predict(model.project(z0)), y_t[:, 1])
    if name == "bc":
        return bc_loss(model.bc_logits(z0), actions[:, 0])
    raise ValueError(name)


@pytest.mark.parametrize("name", ["spr", "inverse", "goal_rl", "rainbow", "atc", "bc"])
def test_objective_sends_gradient_to_encoder(name, setup):
    model, target, obs, actions = setup
    model.zero_grad(set_to_none=True)
    loss = _loss(name, model, target, obs, actions)
    assert loss.shape == (B,) and torch.isfinite(loss).all()
    loss.mean().backward()
    grads = [p.grad for p in model.encoder.parameters()]
    assert all(gr is not None for gr in grads)
    assert sum(gr.abs().sum().item() for gr in grads) > 0
    assert all(p.grad is None for p in target.parameters())
