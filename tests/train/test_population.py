"""The batched population learner: N agents in one update equal N updates of a population of one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from population_helpers import (
    LOOP,
    TINY,
    fake_batch,
    fresh_model,
    make_config,
    population,
)

from sgi_lab.config import FinetuneConfig, build_config
from sgi_lab.runtime.graphs import count_ops
from sgi_lab.train import stacking
from sgi_lab.train.acting import act
from sgi_lab.train.acting import greedy as greedy_actions
from sgi_lab.train.population import Population
from sgi_lab.train.population_steps import clip_gradients, draw
from sgi_lab.train.stacking import pad_to, unpad_to
from sgi_lab.train.update import stage, update

pytestmark = pytest.mark.usefixtures("one_thread")


# A ReLU whose pre-activation lies within rounding of 0 passes its unit's gradient or not by an
# ulp, so an update's gradient is discontinuous in its inputs. Measured on vmap-nature-all
# (2026-11-29): in update 2, agent 0's sample 3 meets hidden unit 466 of the Q head's advantage
# stream at -1.67e-7; 1e-8 of weight noise, or the batched population's rounding against a
# separate agent's from the same state, turns it on, and that update's gradient norm moves by
# 1.7e-3 of itself (21.8898 -> 21.9276), a tensor's step by up to 5.0e-2 of the step
# (encoder.layers.4.bias) and Adam's first moment by 3.4e-2, while every forward result (losses,
# priorities, Q charts) agrees within 1e-6. Carried into the next update the flip moves its
# losses too (by 1e-3 in update 3), so the second update starts from a common state, and its
# gradient-dependent results are compared within STEP_RTOL. The first update has no unit within
# reach (the same noise moves its grad norm by 4e-7) and is compared tightly.
STEP_RTOL = 0.2
"""Largest difference of a gradient-dependent result of a later update (its grad norm, a
tensor's step, an Adam moment) relative to the separate agent's: 4x the ReLU flip measured above,
where one agent's state or step mixed with another's moves them by O(1)."""


def _snapshot(pop, i):
    """Agent ``i``'s state: its networks (own shapes, on the CPU) and Adam state."""
    nets = {w: pop.agent_state(i, w) for w in ("online", "spr_target")}
    if pop.q_target is not None:
        nets["q_target"] = pop.agent_state(i, "q_target")
    return nets, pop.agent_optimizer_state(i)


def _assert_same_update(mine, theirs, outputs, outputs_1, i, before=None):
    """Agent ``i`` of the batched population (``mine``, `_snapshot`; ``outputs``: stats and
    priorities) after the same update as a separate agent (``theirs``, ``outputs_1``), all within
    (rtol, atol) = (1e-4, 1e-5); given the common state ``before`` the update started from, what
    depends on its gradient (grad norm, steps, Adam moments) within STEP_RTOL instead."""
    close = {"rtol": 1e-4, "atol": 1e-5}
    (stats, prio), (stats_1, prio_1) = outputs, outputs_1
    np.testing.assert_allclose(prio[i], prio_1[0], **close)
    for k, v in stats_1.items():
        tol = {"rtol": STEP_RTOL, "atol": 0} if before and k == "charts/grad_norm" else close
        torch.testing.assert_close(stats[k][i], v[0], **tol, msg=k)
    for which, state in theirs[0].items():
        for k, v in state.items():
            msg = f"agent {i} {which} {k}"
            if before is None or not v.is_floating_point():
                torch.testing.assert_close(mine[0][which][k], v, **close, msg=msg)
                continue
            step, gap = (v - before[0][which][k]).norm(), (mine[0][which][k] - v).norm()
            assert gap <= STEP_RTOL * step + 1e-6, f"{msg}: {gap:.3g} apart, step {step:.3g}"
    for idx, st in theirs[1]["state"].items():
        for k, v in st.items():
            msg = f"agent {i} Adam {k} of tensor {idx}"
            if before is None or v.dim() == 0:
                torch.testing.assert_close(
                    mine[1]["state"][idx][k], v, rtol=1e-4, atol=1e-6, msg=msg
                )
            else:
                gap = (mine[1]["state"][idx][k] - v).norm()
                assert gap <= STEP_RTOL * v.norm(), f"{msg}: {gap:.3g} apart, norm {v.norm():.3g}"


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
@pytest.mark.parametrize("batching", ["vmap", "loop"])
def test_batched_update_equals_separate_updates(encoder, ssl, actions, batching):
    """Each update of the agents together equals each agent's own update from the same state:
    the first from the agents' initial weights, compared tightly; the second (Adam moments,
    moved targets and batch-norm statistics in play) from the batched population's state after
    the first, loaded into each separate agent, so that no rounding is carried across updates
    (the ReLU flip above)."""
    configs = [
        make_config(seed=s, encoder=encoder, ssl=ssl, population_batching=batching)
        for s in range(len(actions))
    ]
    batches = [fake_batch(c, a, 10 + i) for i, (c, a) in enumerate(zip(configs, actions))]
    weights = [np.linspace(0.5, 1.0, c.batch_size).astype(np.float32) for c in configs]

    together = population(configs, actions)
    first = update(together, stage(together, batches, weights))
    after_first = [_snapshot(together, i) for i in range(len(configs))]
    second = update(together, stage(together, batches, weights))
    after_second = [_snapshot(together, i) for i in range(len(configs))]

    for i, (c, a) in enumerate(zip(configs, actions)):
        alone = population([c], [a])  # its generator makes the same draws as agent i's
        alone_first = update(alone, stage(alone, [batches[i]], [weights[i]]))
        _assert_same_update(after_first[i], _snapshot(alone, 0), first, alone_first, i)
        nets, adam = after_first[i]
        for which, state in nets.items():
            alone.load_agent_state(0, which, state)
        alone.load_agent_optimizer_state(0, adam)
        alone_second = update(alone, stage(alone, [batches[i]], [weights[i]]))
        _assert_same_update(
            after_second[i], _snapshot(alone, 0), second, alone_second, i, after_first[i]
        )


def test_an_agents_draws_do_not_depend_on_its_companions():
    """Agent (Pong, seed 0) draws the same crop corners, jitter, noise and goal draws alone and
    beside a narrower and a wider game (its noise at its own width, the rest padding)."""

    def config(seed, game):
        return make_config(seed=seed, game=game, ssl="all", population_batching="vmap")

    alone = population([config(0, "Pong")], [6])
    crowd = population(
        [config(7, "Breakout"), config(0, "Pong"), config(3, "Seaquest")], [4, 6, 18]
    )
    B, T = 4, 3
    for _ in range(2):  # and again: the streams move on in step
        mine, ours = draw(alone, B, T), draw(crowd, B, T)
        for view in ("obs", "boot", "goal"):
            for kind in ("corners", "jitter"):
                assert torch.equal(mine[f"{kind}_{view}"][0], ours[f"{kind}_{view}"][1])
        for key in ("noise_target", "noise_online", "noise_goal"):
            assert mine[key].keys() == ours[key].keys()
            for name, v in mine[key].items():
                assert torch.equal(v[0], ours[key][name][1, : v.shape[1]])
        for name, v in mine["goal_draws"].items():
            assert torch.equal(v[0], ours["goal_draws"][name][1])
    assert mine["corners_obs"].shape == (1, B, T, 2) and mine["jitter_boot"].shape == (1, B)
    assert 0 <= ours["corners_obs"].min() and ours["corners_obs"].max() <= 8
    assert ((ours["jitter_obs"] - 1).abs() <= 0.1 + 1e-6).all()
    offsets = ours["goal_draws"]["offset"]
    assert 1 <= offsets.min() and offsets.max() <= B - 1
    # Noise at each layer's width in this population (18 actions x 51 atoms for the advantage).
    assert ours["noise_online"]["head.advantage_out.eps_out"].shape == (3, 18 * 51)
    assert mine["noise_online"]["head.advantage_out.eps_out"].shape == (1, 6 * 51)


@pytest.mark.parametrize("ssl", ["spr", "all"])
def test_a_batched_update_launches_one_more_kernel_per_agent(ssl):
    """Under vmap (the GPU's batching) the only per-agent operation of an update is the agent's
    one draw from its own generator: five agents cost three kernels more than two."""
    counts = {}
    for n in (2, 5):
        configs = [
            make_config(seed=s, ssl=ssl, population_batching="vmap", hidden_size=64)
            for s in range(n)
        ]  # small heads: the same operators on narrower layers
        pop = population(configs, [6] * n)
        staged = stage(
            pop,
            [fake_batch(c, 6, seed=i) for i, c in enumerate(configs)],
            [np.ones(c.batch_size, np.float32) for c in configs],
        )
        update(pop, staged)  # first call: layouts built
        counts[n] = count_ops(lambda pop=pop, staged=staged: update(pop, staged))
    assert counts[2]["uniform_"] == 2 and counts[5]["uniform_"] == 5
    assert sum(counts[5].values()) - sum(counts[2].values()) == 3


def test_gradient_clipping_is_per_agent():
    configs = [make_config(seed=s, grad_clip=1.0, ssl="none") for s in range(2)]
    pop = population(configs, (6, 6))
    for p in pop.trainable():
        p.grad = torch.ones_like(p)
    with torch.no_grad():
        for p in pop.trainable():
            p.grad[1] *= 1e6  # agent 1's gradient is huge, agent 0's is not
    sizes = sum(p[0].numel() for p in pop.trainable())
    norms = clip_gradients(pop, 1.0)
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
    clip_gradients(one, 1.0)
    for p, q in zip(pop.trainable(), one.trainable()):
        torch.testing.assert_close(p.grad[0], q.grad[0])


def test_without_clipping_the_update_takes_no_gradient_norm():
    """``grad_clip: 0`` (the paper's finetuning): no norm over the gradients is dispatched and
    no ``charts/grad_norm`` is reported, and the update is, bit for bit, the update under a
    clip that never binds (which takes the norm and leaves the gradients as they are)."""
    runs = {}
    for clip in (0.0, 1e30):
        configs = [make_config(seed=s, grad_clip=clip, population_batching="vmap") for s in (0, 1)]
        pop = population(configs, (6, 6))
        staged = stage(
            pop,
            [fake_batch(c, 6, seed=i) for i, c in enumerate(configs)],
            [np.ones(c.batch_size, np.float32) for c in configs],
        )
        stats, _ = update(pop, staged)
        ops = count_ops(lambda pop=pop, staged=staged: update(pop, staged))
        runs[clip] = (stats, ops, [pop.agent_state(i) for i in (0, 1)])
    (stats, ops, states), (clipped_stats, clipped_ops, clipped_states) = runs[0.0], runs[1e30]
    assert "charts/grad_norm" not in stats and clipped_stats["charts/grad_norm"].shape == (2,)
    assert ops["_foreach_norm"] == 0 and clipped_ops["_foreach_norm"] == 1
    assert ops["linalg_vector_norm"] == clipped_ops["linalg_vector_norm"] - 1
    for k in stats:
        assert torch.equal(stats[k], clipped_stats[k]), k
    for mine, theirs in zip(states, clipped_states):
        for k in theirs:
            assert torch.equal(mine[k], theirs[k]), k


def test_huge_loss_of_one_agent_leaves_the_other_unchanged():
    """Per-agent clipping end to end: agent 1's rewards are enormous, agent 0's update is the
    same as when it trains alone."""
    configs = [make_config(seed=s, grad_clip=10.0) for s in range(2)]
    batches = [fake_batch(c, 6, 3) for c in configs]
    batches[1] = batches[1]._replace(returns=np.full(4, 1e6, np.float32))
    weights = [np.ones(4, np.float32)] * 2
    together = population(configs, (6, 6))
    stats, _ = update(together, stage(together, batches, weights))
    alone = population(configs[:1], (6,))
    update(alone, stage(alone, batches[:1], weights[:1]))
    assert stats["charts/grad_norm"][1] > stats["charts/grad_norm"][0]
    mine = together.agent_state(0)  # once: each call builds the agent's model for its shapes
    for k, v in alone.agent_state(0).items():
        torch.testing.assert_close(mine[k], v, rtol=1e-4, atol=1e-5)


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


def test_an_agents_shapes_are_built_once_per_distinct_arguments(monkeypatch):
    built = []
    real = stacking.SGIModel
    monkeypatch.setattr(stacking, "SGIModel", lambda **kw: built.append(kw) or real(**kw))
    monkeypatch.setattr(stacking, "_SHAPES", {})
    args = {"encoder": "minatar", "in_channels": 4, "num_actions": 6, "hidden_size": 32}
    first = stacking.own_shapes(args)
    first.clear()  # a caller's copy: the cache keeps its own
    again = stacking.own_shapes(dict(reversed(list(args.items()))))
    other = stacking.own_shapes({**args, "num_actions": 3})
    assert len(built) == 2 and again == stacking.own_shapes(args)
    assert again.keys() == other.keys() and again != other
    out = "head.advantage_out.weight_mu"
    assert again[out] == (6 * 51, 32) and other[out] == (3 * 51, 32)  # actions x atoms


def test_acting_never_picks_an_action_the_game_lacks():
    configs = [make_config(seed=0), make_config(seed=1, game="Breakout")]
    pop = population(configs, (6, 4))
    rngs = [np.random.default_rng(0), np.random.default_rng(1)]
    obs = np.random.default_rng(0).integers(0, 255, (2, 4, 84, 84), dtype=np.uint8)
    for _ in range(20):
        a = act(pop, obs, [0.0, 0.0], rngs)
        assert 0 <= a[1] < 4 and 0 <= a[0] < 6
    # Greedy actions equal those of the agent's own standalone network.
    model = pop.agent_model(1).eval()
    with torch.no_grad():
        for name, layer in model.named_modules():
            if hasattr(layer, "eps_in"):
                layer.eps_in.copy_(pop.online[f"{name}.eps_in"][1])
                layer.eps_out.copy_(pop.online[f"{name}.eps_out"][1][: layer.out_features])
        q = model.q_values(model.encode(torch.as_tensor(obs[1:])))
    assert act(pop, obs, [0.0, 0.0], rngs)[1] == int(q.argmax())


def test_optimizer_state_round_trip():
    configs = [make_config(seed=s, ssl="none") for s in range(2)]
    pop = population(configs, (6, 4))
    batches = [fake_batch(c, a, i) for i, (c, a) in enumerate(zip(configs, (6, 4)))]
    update(pop, stage(pop, batches, [np.ones(4, np.float32)] * 2))
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


# -- the loop: populations end to end -----------------------------------------------------------


@pytest.mark.smoke
def test_population_of_two_games_and_two_seeds_runs_resumes_and_reports(tmp_path, capsys):
    import pandas as pd

    from sgi_lab.base.files import read_jsonl
    from sgi_lab.launch.cli import main
    from sgi_lab.runs.folder import FinetuneRun
    from sgi_lab.train.finetune import finetune_population

    out = tmp_path / "pop"
    argv = ["finetune", "--params", "params/finetune/smoke.yaml", "--game", "pong,breakout"]
    small = ["--set", "hidden_size=64"]  # small heads: a 6x smaller model to checkpoint
    argv += ["--seed", "0,1", "--out", str(out), "--no-progress", *LOOP, *small]
    folders = [out / f"{g}__s{s}" for g in ("Pong", "Breakout") for s in (0, 1)]

    # Interrupt the population after its first checkpoint (step 20), as a kill would.
    from sgi_lab.config import FinetuneConfig, load_config, parse_overrides

    sets = parse_overrides([*LOOP, *small][1::2])
    base = load_config(FinetuneConfig, "params/finetune/smoke.yaml", sets)
    import dataclasses

    configs = [
        dataclasses.replace(base, game=g, seed=s) for g in ("Pong", "Breakout") for s in (0, 1)
    ]

    def interrupt(step, population):
        assert population.size == 4
        if step == 25:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune_population(configs, folders, progress=False, params="smoke", callback=interrupt)
    for f in folders:
        status = FinetuneRun(f).status()
        assert status["state"] == "failed" and "interrupted" in status["message"]
        assert [p.name for p in FinetuneRun(f).checkpoints()] == ["ckpt_00000020.pt"]

    assert main(argv) == 0  # resumes all four at step 20
    summary = json.loads(capsys.readouterr().out)
    assert [s["run"] for s in summary] == [str(f) for f in folders]
    for f in folders:
        run = FinetuneRun(f)
        assert run.status()["state"] == "finished" and run.evaluation["step"] == 40
        steps = [r["step"] for r in read_jsonl(run.metrics_path)]
        assert steps == sorted(set(steps)) and {10, 20, 30, 40} <= set(steps)
        assert "resuming at step 20" in (f / "log.txt").read_text()
        model = torch.load(f / "model.pt", weights_only=True)
        assert model["model_args"]["num_actions"] == (6 if "Pong" in f.name else 4)

    csv = tmp_path / "report.csv"
    # 200 resamples, not the paper's 5000: the per-game table is what is checked, not the CIs
    assert main(["report", *map(str, folders), "--csv", str(csv), "--reps", "200"]) == 0
    per_game = pd.read_csv(csv)
    assert sorted(per_game["game"]) == ["Breakout", "Pong"]
    assert set(per_game["runs"]) == {2}


def test_an_agent_trajectory_does_not_depend_on_its_population(tmp_path):
    """Agent (Pong, seed 0) takes the same actions alone and beside two other agents.

    Greedy from the first step (epsilon 0), so the actions come from the network. Until
    learning starts (step 10) nothing but its own random streams and its network decide them:
    bit for bit the same. After, vmap's batched arithmetic may round differently from a single
    agent's (the update equivalence tests above hold to 1e-4), which can flip a near-tied greedy
    action (seen on a Zen 4 EPYC at step 14, on the code of 2026-11-27 as well), so those steps
    are not compared."""
    from sgi_lab.runs.checkpoints import load_checkpoint
    from sgi_lab.train.finetune import finetune_population

    base = make_config(
        encoder="nature", steps=30, learning_starts=10, eps_start=0.0, eps_end=0.0,
        eval_episodes=1, eval_envs=1, eval_max_frames=40, checkpoint_every=30, log_every=10,
        population_batching="vmap",  # the batched arithmetic is what could change a trajectory
        hidden_size=64,  # small heads: a 6x smaller model to update and checkpoint
    )  # fmt: skip
    import dataclasses

    alone = [base]
    crowd = [
        base,
        dataclasses.replace(base, game="Breakout", seed=1),
        dataclasses.replace(base, seed=2),
    ]
    finetune_population(alone, [tmp_path / "alone"], progress=False)
    finetune_population(crowd, [tmp_path / f"crowd{i}" for i in range(3)], progress=False)
    a = load_checkpoint(tmp_path / "alone/checkpoints/ckpt_00000030.pt")["replay"]
    b = load_checkpoint(tmp_path / "crowd0/checkpoints/ckpt_00000030.pt")["replay"]
    before = base.learning_starts
    torch.testing.assert_close(a["actions"][:before], b["actions"][:before], rtol=0, atol=0)
    torch.testing.assert_close(a["frames"][:before], b["frames"][:before], rtol=0, atol=0)


def test_population_evaluation_equals_each_agents_own_evaluation():
    """One batched forward for all agents' environments gives each agent the episodes
    `evaluate` gives its standalone network (same env seeds, epsilon draws and scores)."""
    from sgi_lab.train.evaluate import evaluate, play_episodes

    configs = [make_config(seed=0, encoder="nature"), make_config(seed=1, game="Breakout")]
    configs[1] = build_config(
        FinetuneConfig, {**TINY, "seed": 1, "game": "Breakout", "encoder": "nature"}
    )
    pop = population(configs, (6, 4))
    with torch.no_grad():  # a sharper head, so that different frames pick different actions
        pop.online["head.advantage_out.weight_mu"].mul_(300.0)
    obs = np.random.default_rng(0).integers(0, 255, (2, 5, 4, 84, 84), dtype=np.uint8)
    greedy = greedy_actions(pop, obs)
    for i in range(2):
        model = pop.agent_model(i).eval()
        model.set_noise(False)
        with torch.no_grad():
            q = model.q_values(model.encode(torch.as_tensor(obs[i])))
        np.testing.assert_array_equal(greedy[i], q.argmax(-1).numpy())
    assert len(set(greedy[0].tolist())) > 1  # the observations do not all give one action
    kw = {"episodes": 3, "eps": 0.2, "num_envs": 2, "max_frames": 160, "progress": False}
    together = play_episodes(
        lambda obs: greedy_actions(pop, obs), ["Pong", "Breakout"], [6, 4], seeds=[5, 6], **kw
    )
    for i, (game, seed) in enumerate([("Pong", 5), ("Breakout", 6)]):
        alone = evaluate(pop.agent_model(i), game, seed=seed, asynchronous=False, **kw)
        assert together[i]["scores"] == alone["scores"]
        assert together[i]["lengths"] == alone["lengths"] and together[i]["episodes"] == 3


def test_auto_batching_is_a_loop_on_a_cpu_and_keeps_bf16():
    fp32 = population([make_config(seed=s, cpu_amp=False) for s in range(2)], (6, 6))
    assert fp32.batching == "loop" and not fp32.update_amp
    bf16 = population([make_config(seed=s, cpu_amp=True) for s in range(2)], (6, 6))
    # amp needs a CPU with native bf16 (nets.runtime.use_bf16); the loop keeps autocast working
    assert bf16.batching == "loop" and bf16.update_amp == bf16.amp
    forced = population(
        [make_config(seed=s, cpu_amp=True, population_batching="vmap") for s in range(2)], (6, 6)
    )
    assert forced.batching == "vmap" and not forced.update_amp  # CPU autocast stops at vmap


@pytest.mark.parametrize("encoder", ["minatar", "minatar_l"])
def test_auto_batching_is_vmap_for_minatars_small_networks_on_a_cpu_too(encoder):
    """MinAtar's update is overhead-bound on a CPU: vmap pays each operator once for all agents
    (14.1 against 23.6 ms an agent at 6 agents, benchmarks/README.md); one agent stays a loop,
    and an explicit choice wins."""
    game = {"game": "minatar/breakout", "encoder": encoder}
    pop = population([make_config(seed=s, **game) for s in range(2)], (3, 3))
    assert pop.batching == "vmap" and pop.vmapped
    assert population([make_config(**game)], (3,)).batching == "loop"
    forced = population(
        [make_config(seed=s, population_batching="loop", **game) for s in range(2)], (3, 3)
    )
    assert forced.batching == "loop"


def test_bf16_under_vmap_only_where_autocast_reaches_it(monkeypatch):
    """CUDA's autocast did not reach inside vmap either (torch 2.11, H100): the rule asks
    `autocast_reaches_vmap`, whatever the device, and a loop or a single agent keeps bf16."""
    import sgi_lab.train.precision as population_module
    from sgi_lab.runtime.device import autocast_reaches_vmap

    with torch.autocast("cpu", dtype=torch.bfloat16):
        vmapped = torch.func.vmap(torch.nn.functional.conv2d)(
            torch.ones(2, 1, 1, 2, 2), torch.ones(2, 1, 1, 1, 1), torch.zeros(2, 1)
        )
    assert autocast_reaches_vmap("cpu") == (vmapped.dtype == torch.bfloat16)
    vmap_pop = population(
        [make_config(seed=s, population_batching="vmap") for s in range(2)], (6, 6)
    )
    loop_pop = population([make_config(seed=s) for s in range(2)], (6, 6))
    for pop in (vmap_pop, loop_pop):
        pop.amp = True  # as on CUDA
    for reaches in (False, True):
        monkeypatch.setattr(population_module, "autocast_reaches_vmap", lambda _t, r=reaches: r)
        assert vmap_pop.update_amp is reaches
        assert loop_pop.update_amp is True


def test_channels_last_conv_weights_per_agent_slice():
    pop = population([make_config(seed=s, channels_last=True) for s in range(2)], (6, 6))
    weight = pop.online["encoder.layers.0.0.expand.weight"]
    assert weight.shape[0] == 2 and weight[1].is_contiguous(memory_format=torch.channels_last)
    assert pop.template.channels_last
    flat = population([make_config(seed=0, channels_last=False)], (6,))
    assert flat.online["encoder.layers.0.0.expand.weight"][0].is_contiguous()
