"""The batched population learner: N agents in one update equal N updates of a population of one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sgi_lab.config import FinetuneConfig, build_config
from sgi_lab.data.sampler import SequenceBatch
from sgi_lab.nets import SGIModel
from sgi_lab.train.agent import Population, pad_to, unpad_to
from sgi_lab.train.transfer import model_args_for

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {
    "batch_size": 4,
    "spr_steps": 2,
    "n_step": 3,
    "cpu_amp": False,
    "channels_last": False,
}


def make_config(seed=0, game="Pong", **overrides) -> FinetuneConfig:
    return build_config(FinetuneConfig, {**TINY, "seed": seed, "game": game, **overrides})


def fresh_model(config: FinetuneConfig, num_actions: int) -> SGIModel:
    torch.manual_seed(config.seed)
    return SGIModel(**model_args_for(config, num_actions))


def population(configs, actions, device="cpu") -> Population:
    models = [fresh_model(c, a) for c, a in zip(configs, actions, strict=True)]
    return Population.build(configs, models, loaded=(), device=device)


def fake_batch(config: FinetuneConfig, num_actions: int, seed: int) -> SequenceBatch:
    rng = np.random.default_rng(seed)
    B, T = config.batch_size, config.spr_steps + 1
    valid = np.ones((B, T), bool)
    valid[0, -1] = False  # an episode end inside the sequence
    return SequenceBatch(
        obs=rng.integers(0, 255, (B, T, 4, 84, 84), dtype=np.uint8),
        actions=rng.integers(0, num_actions, (B, T)).astype(np.int64),
        rewards=rng.random((B, T)).astype(np.float32),
        valid=valid,
        terminals=np.zeros((B, T), bool),
        returns=rng.normal(size=B).astype(np.float32),
        bootstrap_obs=rng.integers(0, 255, (B, 4, 84, 84), dtype=np.uint8),
        bootstrap_discount=np.full(B, 0.97, np.float32),
        goal_obs=rng.integers(0, 255, (B, 4, 84, 84), dtype=np.uint8),
        goal_offset=np.ones(B, np.int64),
        indices=np.arange(B),
    )


def clone_state(pop: Population, i: int) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in pop.agent_state(i).items()}


@pytest.mark.parametrize(
    ("encoder", "ssl", "actions"),
    [
        ("nature", "spr", (6, 6, 6)),
        ("resnet", "spr", (6, 6)),
        ("nature", "all", (6, 6)),
        ("nature", "spr", (6, 4, 9)),  # padded action sets
        ("nature", "none", (3, 6)),
    ],
)
def test_batched_update_equals_separate_updates(encoder, ssl, actions):
    configs = [make_config(seed=s, encoder=encoder, ssl=ssl) for s in range(len(actions))]
    batches = [fake_batch(c, a, 10 + i) for i, (c, a) in enumerate(zip(configs, actions))]
    weights = [np.linspace(0.5, 1.0, c.batch_size).astype(np.float32) for c in configs]

    together = population(configs, actions)
    for _ in range(2):  # the second update sees Adam moments, moved targets and BN statistics
        stats, prio = together.update(batches, weights)

    for i, (c, a) in enumerate(zip(configs, actions)):
        alone = population([c], [a])
        for _ in range(2):
            stats_1, prio_1 = alone.update([batches[i]], [weights[i]])
        for which in ("online", "spr_target"):
            mine, theirs = together.agent_state(i, which), alone.agent_state(0, which)
            for k in theirs:
                torch.testing.assert_close(
                    mine[k], theirs[k], rtol=1e-4, atol=1e-5, msg=f"agent {i} {which} {k}"
                )
        np.testing.assert_allclose(prio[i], prio_1[0], rtol=1e-4, atol=1e-5)
        for k, v in stats_1.items():
            torch.testing.assert_close(stats[k][i], v[0], rtol=1e-4, atol=1e-5, msg=k)
        opt, opt_1 = together.agent_optimizer_state(i), alone.agent_optimizer_state(0)
        for idx, st in opt_1["state"].items():
            for k, v in st.items():
                torch.testing.assert_close(opt["state"][idx][k], v, rtol=1e-4, atol=1e-6)


def test_gradient_clipping_is_per_agent():
    configs = [make_config(seed=s, grad_clip=1.0, ssl="none") for s in range(2)]
    pop = population(configs, (6, 6))
    for p in pop.trainable():
        p.grad = torch.ones_like(p)
    with torch.no_grad():
        for p in pop.trainable():
            p.grad[1] *= 1e6  # agent 1's gradient is huge, agent 0's is not
    sizes = sum(p[0].numel() for p in pop.trainable())
    norms = pop.clip_gradients(1.0)
    torch.testing.assert_close(
        norms, torch.tensor([sizes**0.5, 1e6 * sizes**0.5]), rtol=2e-3, atol=0
    )
    after = torch.stack(
        [
            torch.linalg.vector_norm(torch.cat([p.grad[i].flatten() for p in pop.trainable()]))
            for i in range(2)
        ]
    )
    # agent 0: norm sqrt(n) > 1 is scaled to 1; agent 1 as well, independently of agent 0.
    torch.testing.assert_close(after, torch.ones(2), rtol=1e-2, atol=0)  # fp32 sums of ~2M squares
    one = population(configs[:1], (6,))
    for p in one.trainable():
        p.grad = torch.ones_like(p)
    one.clip_gradients(1.0)
    for p, q in zip(pop.trainable(), one.trainable()):
        torch.testing.assert_close(p.grad[0], q.grad[0])


def test_huge_loss_of_one_agent_leaves_the_other_unchanged():
    """Per-agent clipping end to end: agent 1's rewards are enormous, agent 0's update is the
    same as when it trains alone."""
    configs = [make_config(seed=s, grad_clip=10.0) for s in range(2)]
    batches = [fake_batch(c, 6, 3) for c in configs]
    batches[1] = batches[1]._replace(returns=np.full(4, 1e6, np.float32))
    weights = [np.ones(4, np.float32)] * 2
    together = population(configs, (6, 6))
    stats, _ = together.update(batches, weights)
    alone = population(configs[:1], (6,))
    alone.update(batches[:1], weights[:1])
    assert stats["charts/grad_norm"][1] > stats["charts/grad_norm"][0]
    for k, v in alone.agent_state(0).items():
        torch.testing.assert_close(together.agent_state(0)[k], v, rtol=1e-4, atol=1e-5)


def test_padding_round_trip_and_agent_models_keep_their_own_shapes():
    t = torch.arange(6.0).view(2, 3)
    padded = pad_to(t, (4, 3))
    assert padded.shape == (4, 3) and padded[2:].abs().sum() == 0
    torch.testing.assert_close(unpad_to(padded, (2, 3)), t)
    configs = [make_config(seed=0), make_config(seed=1, game="Breakout")]
    models = [fresh_model(configs[0], 6), fresh_model(configs[1], 4)]
    pop = Population.build(configs, models, loaded=(), device="cpu")
    assert pop.action_mask.tolist() == [[True] * 6, [True] * 4 + [False] * 2]
    for i, m in enumerate(models):
        own = m.state_dict()
        mine = pop.agent_state(i)
        assert own.keys() == mine.keys()
        for k in own:
            torch.testing.assert_close(mine[k], own[k], msg=k)
        assert pop.agent_model(i).num_actions == m.num_actions


def test_acting_never_picks_an_action_the_game_lacks():
    configs = [make_config(seed=0), make_config(seed=1, game="Breakout")]
    pop = population(configs, (6, 4))
    rngs = [np.random.default_rng(0), np.random.default_rng(1)]
    obs = np.random.default_rng(0).integers(0, 255, (2, 4, 84, 84), dtype=np.uint8)
    for _ in range(20):
        a = pop.act(obs, [0.0, 0.0], rngs)
        assert 0 <= a[1] < 4 and 0 <= a[0] < 6
    # Greedy actions equal those of the agent's own standalone network.
    model = pop.agent_model(1).eval()
    with torch.no_grad():
        for name, layer in model.named_modules():
            if hasattr(layer, "eps_in"):
                layer.eps_in.copy_(pop.online[f"{name}.eps_in"][1])
                layer.eps_out.copy_(pop.online[f"{name}.eps_out"][1][: layer.out_features])
        q = model.q_values(model.encode(torch.as_tensor(obs[1:])))
    assert pop.act(obs, [0.0, 0.0], rngs)[1] == int(q.argmax())


def test_optimizer_state_round_trip():
    configs = [make_config(seed=s, ssl="none") for s in range(2)]
    pop = population(configs, (6, 4))
    batches = [fake_batch(c, a, i) for i, (c, a) in enumerate(zip(configs, (6, 4)))]
    pop.update(batches, [np.ones(4, np.float32)] * 2)
    saved = [pop.agent_optimizer_state(i) for i in range(2)]
    other = population(configs, (6, 4))
    for i in range(2):
        other.load_agent_optimizer_state(i, saved[i])
    for p, q in zip(pop.trainable(), other.trainable()):
        if p not in pop.optimizer.state:  # no gradient yet (ssl none: transition, predictor)
            assert q not in other.optimizer.state
            continue
        for k in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(pop.optimizer.state[p][k], other.optimizer.state[q][k])
