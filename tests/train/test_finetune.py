"""Finetuning: pretrained transfer and lr groups, the update, frozen encoder, resume, end to end."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import sgi_lab.augment.frames as augmentation
import sgi_lab.train.finetune as ft
import sgi_lab.train.transfer as tr
import sgi_lab.train.update as update_module
from sgi_lab.base.files import read_jsonl
from sgi_lab.config import ConfigError, FinetuneConfig
from sgi_lab.data.replay import PrioritizedReplay
from sgi_lab.envs import UnknownGameError
from sgi_lab.launch.cli import main
from sgi_lab.nets import SGIModel
from sgi_lab.runs.checkpoints import CheckpointError
from sgi_lab.runs.folder import RUNTIME_KEYS, RunDir
from sgi_lab.runs.stopping import Deadline, RunStopped, parse_duration, stop_on_signals
from sgi_lab.train.population import Population
from sgi_lab.train.sgi_loss import finetuning_settings, pretraining_settings, weighted_sum

TINY = {
    "encoder": "nature",
    "batch_size": 4,
    "updates_per_step": 1,
    "spr_steps": 2,
    "n_step": 3,
    "learning_starts": 20,
    "eps_steps": 21,
    "eval_episodes": 1,
    "eval_envs": 1,
    "eval_max_frames": 200,
    "log_every": 10,
    "checkpoint_every": 30,
}


pytestmark = pytest.mark.usefixtures("one_thread")


def save_pretrained_run(path, encoder="nature", num_actions=6, **kwargs) -> SGIModel:
    """A pretraining run folder as pretrain.py writes it: RUN/model.pt + status.json."""
    args = {
        "encoder": encoder,
        "num_actions": num_actions,
        "noisy": False,
        "rl_head": False,
        "goal_head": True,
        "inverse_model": True,
        **kwargs,
    }
    torch.manual_seed(123)
    model = SGIModel(**args)
    path.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": "sgi-lab",
        "kind": "pretrained_model",
        "step": 7,
        "model": model.state_dict(),
        "model_args": args,
        "config": {},
        "game": "Pong",
    }
    torch.save(payload, path / "model.pt")
    (path / "status.json").write_text(
        json.dumps({"state": "finished", "kind": "pretrain", "params": "sgi_m"})
    )
    return model


def filled_replay(config, rows=60, seed=0) -> PrioritizedReplay:
    replay = PrioritizedReplay(
        100,
        K=config.spr_steps if config.ssl != "none" else 0,
        n_step=config.n_step,
        seed=seed,
        goal_window=config.goal_window if config.ssl == "all" else 0,
    )
    rng = np.random.default_rng(seed)
    for t in range(rows):
        frame = rng.integers(0, 255, (84, 84), dtype=np.uint8)
        terminal = t % 25 == 24
        replay.append(frame, int(rng.integers(6)), float(rng.random() < 0.2), terminal, t % 25 == 0)
    return replay


def population_of_one(config, pretrained=None) -> Population:
    torch.manual_seed(config.seed)
    model = SGIModel(**tr.model_args_for(config, 6, pretrained))
    loaded = tr.transfer_pretrained(model, pretrained).loaded if pretrained else ()
    return Population.build([config], [model], loaded=loaded, device="cpu")


def update(pop, replay):
    batch, weights = replay.sample(pop.config.batch_size, beta=0.4)
    stats, priorities = update_module.update(pop, update_module.stage(pop, [batch], [weights]))
    replay.update_priorities(batch.indices, priorities[0].float().numpy())
    return {k: v[0] for k, v in stats.items()}


# -- pretrained weights and learning rates ------------------------------------------------------


def lr_groups(pop: Population) -> dict[str, set[str]]:
    by_id = {id(v): k for k, v in pop.online.items()}
    return {g["name"]: {by_id[id(p)] for p in g["params"]} for g in pop.optimizer.param_groups}


def test_transfer_loads_shared_tensors_and_builds_lr_groups(tmp_path):
    pre = save_pretrained_run(tmp_path / "pre")
    config = FinetuneConfig(encoder="nature")
    pretrained = tr.load_pretrained(tmp_path / "pre")
    assert pretrained.params == "sgi_m" and pretrained.step == 7
    model = SGIModel(**tr.model_args_for(config, 6, pretrained))
    transfer = tr.transfer_pretrained(model, pretrained)

    names = set(model.state_dict())
    outputs = {n for n in names if n.startswith(("head.advantage_out.", "head.value_out."))}
    assert set(transfer.fresh) == outputs and outputs
    assert set(transfer.loaded) == names - outputs
    assert {n.split(".")[0] for n in transfer.ignored} == {"film", "goal_head", "inverse"}
    pre_state = pre.state_dict()
    for name in ("encoder.layers.0.weight", "transition.first.weight", "predictor.weight"):
        assert torch.equal(model.state_dict()[name], pre_state[name])
    # Pretraining ran noise-free: sigmas go back to their initial value.
    sigma = model.head.advantage_hidden.weight_sigma
    assert torch.allclose(sigma, torch.full_like(sigma, 0.5 / 3136**0.5))

    pop = population_of_one(config, pretrained)
    lrs = {g["name"]: g["lr"] for g in pop.optimizer.param_groups}
    assert lrs == pytest.approx({"encoder_transition": 1e-6, "pretrained": 1e-4 / 3, "fresh": 1e-4})
    groups = lr_groups(pop)
    params = {n for n, _ in model.named_parameters()}
    assert groups["encoder_transition"] == {
        n for n in params if n.startswith(("encoder.", "transition."))
    }
    assert groups["fresh"] == params & outputs
    assert all(n.startswith(("head.", "predictor.")) for n in groups["pretrained"])
    assert set().union(*groups.values()) == params


def test_naive_and_frozen_schemes(tmp_path):
    save_pretrained_run(tmp_path / "pre")
    pretrained = tr.load_pretrained(tmp_path / "pre")
    for scheme in ("naive", "frozen"):
        config = FinetuneConfig(encoder="nature", scheme=scheme)
        pop = population_of_one(config, pretrained)
        trained = set().union(*lr_groups(pop).values())
        encoder = [k for k in pop.online if k.startswith("encoder.") and "running" not in k]
        if scheme == "naive":
            assert {g["lr"] for g in pop.optimizer.param_groups} == {1e-4}
            assert all(k in trained for k in encoder)
        else:
            assert not any(k in trained for k in encoder)
            assert not any(pop.online[k].requires_grad for k in encoder)
            lrs = {g["name"]: g["lr"] for g in pop.optimizer.param_groups}
            assert lrs["encoder_transition"] == pytest.approx(1e-6)  # the transition model


@pytest.mark.parametrize("scheme", ["reduced_lr", "naive", "frozen"])
def test_a_pretrained_and_a_fresh_agent_in_one_population_each_learn_as_alone(tmp_path, scheme):
    """The MinAtar demo's population of two: an SGI-pretrained agent (its loaded layers at reduced
    learning rates) beside one from scratch (every layer at the full rate) takes, update for
    update, each agent's own steps: the same weights, targets and Adam moments as each agent
    trained alone."""
    from population_helpers import TINY as POP
    from population_helpers import fake_batch

    from sgi_lab.config import build_config
    from sgi_lab.train.update import stage, update

    save_pretrained_run(tmp_path / "pre", hidden_size=64)  # small heads: cheaper updates
    pretrained = tr.load_pretrained(tmp_path / "pre")
    configs = [
        build_config(
            FinetuneConfig,
            {**POP, "encoder": "nature", "scheme": scheme, "seed": s, "hidden_size": 64},
        )
        for s in (0, 1)
    ]
    sources = [pretrained, None]

    def agent(i):
        torch.manual_seed(configs[i].seed)
        model = SGIModel(**tr.model_args_for(configs[i], 6, sources[i]))
        loaded = tr.transfer_pretrained(model, sources[i]).loaded if sources[i] else ()
        return model, loaded

    (m0, l0), (m1, l1) = agent(0), agent(1)
    assert l0 and not l1
    together = Population.build(configs, [m0, m1], loaded=[l0, l1], device="cpu")
    factors = {k: v.flatten().tolist() for k, v in together.lr_factors.items()}
    if scheme == "naive":
        assert not factors  # every rate 1e-4
    else:  # the transition model at 1e-6 for one agent, 1e-4 for the other; the encoder too
        assert factors["transition.first.weight"] == pytest.approx([0.01, 1.0])
        encoder = factors.get("encoder.layers.0.weight")  # unless frozen: no step at all
        assert encoder is None if scheme == "frozen" else encoder == pytest.approx([0.01, 1.0])
    assert together.agent_lr_groups(1) == pytest.approx({"fresh": 1e-4})
    batches = [fake_batch(c, 6, 10 + i) for i, c in enumerate(configs)]
    weights = [np.linspace(0.5, 1.0, c.batch_size).astype(np.float32) for c in configs]
    for _ in range(3):  # later updates see Adam moments and moved targets
        update(together, stage(together, batches, weights))
    for i in (0, 1):
        model, loaded = agent(i)
        alone = Population.build([configs[i]], [model], loaded=loaded, device="cpu")
        for _ in range(3):
            update(alone, stage(alone, [batches[i]], [weights[i]]))
        for which in ("online", "spr_target"):
            mine, theirs = together.agent_state(i, which), alone.agent_state(0, which)
            for k in theirs:
                torch.testing.assert_close(
                    mine[k], theirs[k], rtol=1e-4, atol=1e-6, msg=f"agent {i} {which} {k}"
                )
        start = model.state_dict()  # and the encoder moved at the agent's own rate
        moved = (theirs["encoder.layers.0.weight"] - start["encoder.layers.0.weight"]).abs().max()
        assert (moved == 0) if scheme == "frozen" else (moved > 0)


def test_a_population_refuses_agents_of_different_architectures(tmp_path):
    from population_helpers import TINY as POP

    from sgi_lab.config import build_config

    save_pretrained_run(tmp_path / "pre", hidden_size=64)
    pretrained = tr.load_pretrained(tmp_path / "pre")
    configs = [
        build_config(FinetuneConfig, {**POP, "encoder": "nature", "seed": s}) for s in (0, 1)
    ]
    models = [
        SGIModel(**tr.model_args_for(configs[0], 6, pretrained)),
        SGIModel(**tr.model_args_for(configs[1], 6)),
    ]
    with pytest.raises(ValueError, match="share one architecture.*hidden_size: 64 vs 512"):
        Population.build(configs, models, loaded=[(), ()], device="cpu")


def test_mismatched_pretrained_models_are_clear_errors(tmp_path):
    save_pretrained_run(tmp_path / "nature")
    config = FinetuneConfig(encoder="resnet")
    pretrained = tr.load_pretrained(tmp_path / "nature")
    model = SGIModel(**tr.model_args_for(config, 6, pretrained))
    with pytest.raises(tr.PretrainedMismatchError, match="'nature'.*'resnet'"):
        tr.transfer_pretrained(model, pretrained)
    # Same encoder, another game's action count: the differing tensors are named with shapes.
    save_pretrained_run(tmp_path / "four", num_actions=4)
    pretrained = tr.load_pretrained(tmp_path / "four")
    model = SGIModel(**tr.model_args_for(FinetuneConfig(encoder="nature"), 6, pretrained))
    with pytest.raises(
        tr.PretrainedMismatchError,
        match=r"4 actions.*transition.first.weight: pretrained \(64, 68, 3, 3\) vs finetune \(64, 70, 3, 3\)",
    ):
        tr.transfer_pretrained(model, pretrained)


def test_unfinished_pretraining_runs_need_an_explicit_checkpoint(tmp_path):
    pre = SGIModel("nature", 6, noisy=False, rl_head=False)
    run = RunDir(tmp_path / "unfinished")
    run.set_status("running", kind="pretrain", step=50)
    path = run.save_checkpoint(
        50,
        {"model": pre.state_dict(), "model_args": {"encoder": "nature", "num_actions": 6}},
        "pretrain",
    )
    with pytest.raises(ConfigError, match="never finished.*ckpt_00000050.pt"):
        tr.load_pretrained(run.path)
    assert tr.load_pretrained(path).path == path  # named explicitly: used
    full = path.read_bytes()
    (tmp_path / "truncated.pt").write_bytes(full[: len(full) // 2])
    with pytest.raises(CheckpointError, match="truncated.pt: not a PyTorch checkpoint"):
        tr.load_pretrained(tmp_path / "truncated.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="foreign"):
        tr.load_pretrained(tmp_path / "foreign.pt")


# -- the update ---------------------------------------------------------------------------------


def test_schedules():
    config = FinetuneConfig(steps=10_000, learning_starts=2_000, eps_steps=2_001)
    assert ft.epsilon_at(0, config) == 1.0
    assert ft.epsilon_at(2_001, config) == 0.0
    assert ft.epsilon_at(1_000, config) == pytest.approx(1 - 1000 / 2001)
    assert ft.beta_at(0, config) == 0.4 and ft.beta_at(2_000, config) == 0.4
    assert ft.beta_at(6_000, config) == pytest.approx(0.7)
    assert ft.beta_at(10_000, config) == 1.0
    # SPR's weight 5 on mean_k(2 - 2 cos) at K = 5, written as what it weighs -sum_k cos by
    assert finetuning_settings(FinetuneConfig()).spr_coefficient == 2.0


def test_update_targets_use_sampler_returns_and_discounts(monkeypatch):
    config = FinetuneConfig(**TINY, steps=100)
    pop = population_of_one(config)
    replay = filled_replay(config)
    seen = {}
    real = update_module.c51_target

    def spy(target_probs, returns, discounts, support, selection=None):
        seen.update(returns=returns.clone(), discounts=discounts.clone(), selection=selection)
        return real(target_probs, returns, discounts, support, selection)

    monkeypatch.setattr(update_module, "c51_target", spy)
    batch, weights = replay.sample(4, beta=0.4)
    stats, priorities = update_module.update(pop, update_module.stage(pop, [batch], [weights]))
    np.testing.assert_array_equal(seen["returns"].numpy(), batch.returns)
    np.testing.assert_array_equal(seen["discounts"].numpy(), batch.bootstrap_discount)
    assert seen["selection"] is not None  # double Q
    assert set(stats) >= {"losses/rl", "losses/spr", "losses/total", "charts/q_mean"}
    assert all(torch.isfinite(v).all() for v in stats.values())
    assert priorities.shape == (1, 4) and (priorities >= 0).all()
    assert pop.updates == 1


@pytest.mark.parametrize(
    "overrides",
    [
        {"ssl": "none"},
        {"ssl": "all", "goal_window": 5},
        {"target_tau": 0.5, "target_update_period": 2},
    ],
    ids=["no_ssl", "all_ssl", "separate_q_target"],
)
def test_update_variants(overrides):
    config = FinetuneConfig(**{**TINY, **overrides}, steps=100)
    pop = population_of_one(config)
    replay = filled_replay(config)
    before = {k: v.clone() for k, v in pop.agent_state(0).items()}
    for _ in range(2):
        stats = update(pop, replay)
    assert all(torch.isfinite(v) for v in stats.values())
    after = pop.agent_state(0)
    changed = [k for k, v in after.items() if not torch.equal(v, before[k])]
    assert any(k.startswith("encoder.") for k in changed)
    if config.ssl == "all":
        assert {"losses/goal_rl", "losses/inverse"} <= set(stats)
        assert any(k.startswith("goal_head.") for k in changed)
    if config.ssl == "none":
        assert "losses/spr" not in stats and not any(k.startswith("transition.") for k in changed)
    if pop.q_target is not None:
        q = pop.agent_state(0, "q_target")["head.value_out.weight_mu"]
        assert not torch.equal(q, before["head.value_out.weight_mu"])
        assert not torch.equal(q, after["head.value_out.weight_mu"])  # an EMA, not a copy


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16"])
def test_every_trainable_parameter_gets_its_gradient(monkeypatch, amp):
    """Targets and losses share one autocast region, so the losses reuse bf16 casts of weights
    first cast by the gradient-free target passes; those casts must still carry gradients."""
    config = FinetuneConfig(**TINY, steps=100)
    pop = population_of_one(config)
    pop.amp = amp
    replay = filled_replay(config)
    grads = {}
    names = {id(v): k for k, v in pop.online.items()}

    def record():
        grads.update({names[id(p)]: p.grad for p in pop.trainable()})

    monkeypatch.setattr(pop.optimizer, "step", record)
    update(pop, replay)
    # The goal and inverse heads only learn with ssl 'all'.
    expected = [n for n in grads if not n.startswith(("goal_head.", "inverse"))]
    missing = [n for n in expected if grads[n] is None or not grads[n].abs().sum() > 0]
    assert not missing, f"no gradient for {missing}"
    assert any(n.endswith("weight_sigma") for n in expected)  # the noisy layers are in there


def test_frozen_encoder_weights_and_batch_norm_stay_bit_identical(tmp_path):
    save_pretrained_run(tmp_path / "pre", encoder="resnet")
    config = FinetuneConfig(**{**TINY, "encoder": "resnet"}, scheme="frozen", steps=100)
    pop = population_of_one(config, tr.load_pretrained(tmp_path / "pre"))
    replay = filled_replay(config)
    encoder = {k: v.clone() for k, v in pop.agent_state(0).items() if k.startswith("encoder.")}
    assert any("running_mean" in k for k in encoder)
    head = pop.agent_state(0)["head.advantage_out.weight_mu"]
    for _ in range(3):
        update(pop, replay)
    for which in ("online", "spr_target"):
        state = pop.agent_state(0, which)
        for k, v in encoder.items():
            assert torch.equal(state[k], v), (which, k)
    assert not torch.equal(pop.agent_state(0)["head.advantage_out.weight_mu"], head)


def test_non_finite_loss_stops_with_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(
        update_module, "c51_loss", lambda logits, actions, target: logits[:, 0, 0] * np.nan
    )
    config = FinetuneConfig(**{**TINY, "learning_starts": 5}, steps=20)
    with pytest.raises(
        FloatingPointError, match="non-finite loss at update 0 for agent.*Pong seed 0"
    ):
        ft.finetune(config, tmp_path / "run", progress=False)
    status = RunDir(tmp_path / "run").status()
    assert status["state"] == "failed" and "non-finite" in status["message"]


def test_bad_input_is_rejected_clearly(tmp_path):
    with pytest.raises(UnknownGameError, match="valid games: Alien"):
        ft.finetune(FinetuneConfig(game="pongg"), tmp_path / "a", progress=False)
    with pytest.raises(ConfigError, match="dueling"):
        ft.finetune(FinetuneConfig(dueling=False), tmp_path / "b", progress=False)
    save_pretrained_run(tmp_path / "pre", encoder="nature")
    config = FinetuneConfig(
        **{**TINY, "encoder": "resnet"}, steps=40, pretrained=str(tmp_path / "pre")
    )
    with pytest.raises(tr.PretrainedMismatchError, match="encoder is 'nature'"):
        ft.finetune(config, tmp_path / "c", progress=False)
    # Validation failures leave nothing behind.
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()
    with pytest.raises(ConfigError, match="share their config.*lr"):
        ft.finetune_population(
            [FinetuneConfig(**TINY), FinetuneConfig(**TINY, lr=1.0e-3, seed=1)],
            [tmp_path / "d", tmp_path / "e"],
            progress=False,
        )


def test_the_authors_env_protocol_reaches_training_replay_and_evaluation(tmp_path):
    """``env_protocol: rlpyt``: the training env is the authors' (the replay's frames and
    terminals are what ``make_env(preprocessing="rlpyt")`` returns for the same actions, and
    its stacks start at every life loss, as that env's), and so is the evaluation env (its
    cap ends an episode of 200 frames after 51 steps, the default's after 50)."""
    from sgi_lab.data.population_replay import PopulationReplay
    from sgi_lab.envs import make_env
    from sgi_lab.runs.checkpoints import load_checkpoint

    steps = 90
    config = FinetuneConfig(
        **{**TINY, "eps_end": 1.0, "learning_starts": 70, "hidden_size": 64},
        game="Breakout",
        steps=steps,
        env_protocol="rlpyt",
    )  # random actions throughout (they lose lives quickly), updates from step 70
    run = ft.finetune(config, tmp_path / "run", progress=False)
    state = load_checkpoint(run.checkpoints()[-1], "cpu", kind="finetune")["replay"]
    assert state["size"] == steps
    frames, actions = state["frames"].numpy(), state["actions"].numpy()
    terminals, firsts = state["terminals"].numpy(), state["firsts"].numpy()

    env = make_env("Breakout", seed=config.seed, train=True, preprocessing="rlpyt")
    obs, _ = env.reset()
    shown, ended = [], []
    for t in range(steps):
        shown.append(obs)
        assert np.array_equal(frames[t], obs[-1]), f"row {t}: not the authors' env's frame"
        obs, _, terminated, truncated, info = env.step(int(actions[t]))
        assert terminals[t] == info["terminal"], f"row {t}"
        ended.append(terminated or truncated)
        if ended[-1]:
            obs, _ = env.reset()
    env.close()
    life_losses = np.flatnonzero(terminals & ~np.array(ended))
    assert len(life_losses) >= 1 and life_losses.max() < steps - 1, life_losses
    assert np.array_equal(firsts[1:], terminals[:-1]) and firsts[0]
    replay = PopulationReplay(1, steps, K=0, n_step=0)
    replay.load_state_dict(0, state)
    stacks = replay.batch_at(torch.arange(steps)[None]).obs[0, :, 0].numpy()
    assert np.array_equal(stacks, np.stack(shown))
    assert not stacks[life_losses + 1, :3].any()  # the env's zero padding after a loss

    result = run.evaluation
    assert result["env_protocol"] == "rlpyt" and result["lengths"] == [51]


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16"])
def test_augmented_frames_crop_jitter_and_scale_every_agents_stacks(amp):
    """(N, B, T) stacks with given corners and factors, time-major, against a hand-made
    replicate pad + crop + multiply of each stack on its own."""
    from sgi_lab.nets.encoders import PIXEL_SCALE

    dtype = torch.bfloat16 if amp else torch.float32
    rng = np.random.default_rng(0)
    N, B, T = 2, 3, 4
    obs = torch.from_numpy(rng.integers(0, 255, (N, B, T, 4, 84, 84), dtype=np.uint8))
    corners = torch.from_numpy(rng.integers(0, 9, (N, B, T, 2)))
    factors = torch.from_numpy(rng.uniform(0.9, 1.1, (N, B, T)).astype(np.float32))
    ours = augmentation.augmented_frames(
        obs, corners, factors, channels_last=True, dtype=dtype, time_major=True
    )
    assert ours.shape == (N, T, B, 4, 84, 84) and ours.dtype == dtype
    assert ours.flatten(0, 2).is_contiguous(memory_format=torch.channels_last)
    pad = torch.nn.ReplicationPad2d(4)
    expected = torch.empty(N, T, B, 4, 84, 84)
    for n in range(N):
        for b in range(B):
            for t in range(T):
                dy, dx = corners[n, b, t].tolist()
                padded = pad(obs[n, b, t].float()[None])[0]
                crop = padded[:, dy : dy + 84, dx : dx + 84]
                expected[n, t, b] = crop * factors[n, b, t] * PIXEL_SCALE
    tol = {"rtol": 8e-3, "atol": 1e-3} if amp else {"rtol": 1e-6, "atol": 1e-6}
    torch.testing.assert_close(ours.float(), expected, **tol)
    # Without draws: the stacks only reordered and scaled; batch-major input stays batch-major.
    plain = augmentation.augmented_frames(
        obs[:, :, 0], None, None, channels_last=False, dtype=torch.float32
    )
    torch.testing.assert_close(plain, obs[:, :, 0].float() * PIXEL_SCALE)
    # Encoding the prepared frames is encoding the augmented pixels.
    model = SGIModel("nature", 6)
    with torch.no_grad():
        torch.testing.assert_close(
            model.encode(ours[0, 0].float(), prepared=True),
            model.encode(expected[0, 0] / PIXEL_SCALE),
            rtol=1e-2 if amp else 1e-5,
            atol=1e-2 if amp else 1e-5,
        )


# -- runs ---------------------------------------------------------------------------------------


def test_resume_after_a_crash_continues_at_the_checkpoint(tmp_path):
    config = FinetuneConfig(**TINY, steps=60, hidden_size=64)  # small heads: 6x smaller ckpts
    out = tmp_path / "run"

    def crash(step, agent):
        if step == 45:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        ft.finetune(config, out, progress=False, callback=crash)
    run = ft.FinetuneRun(out)
    assert run.status()["state"] == "failed"
    assert [p.name for p in run.checkpoints()] == ["ckpt_00000030.pt"]
    assert max(r["step"] for r in read_jsonl(run.metrics_path)) == 40  # logged past the checkpoint

    seen = []
    run = ft.finetune(
        config, out, progress=False, callback=lambda s, pop: seen.append((s, pop.updates))
    )
    assert seen[0] == (31, 12) and seen[-1] == (60, 41)  # updates at steps 20..60, one per step
    assert run.status()["state"] == "finished" and run.evaluation["episodes"] == 1
    steps = [r["step"] for r in read_jsonl(run.metrics_path)]
    assert steps == sorted(set(steps))  # strictly increasing: nothing logged twice
    assert {10, 20, 30, 40, 50, 60} <= set(steps)
    log = (out / "log.txt").read_text()
    assert "resuming" in log
    # the evaluation's line says what its normalised score's 0 and 1 are
    assert "(HNS " in log and "; 0 = a uniform random policy, 1 = the human player's score)" in log

    # A finished run is returned as it is; overwrite starts over.
    mtime = (out / "eval.json").stat().st_mtime_ns
    ft.finetune(config, out, progress=False)
    assert (out / "eval.json").stat().st_mtime_ns == mtime
    with pytest.raises(ConfigError, match="different config.*seed"):
        ft.finetune(FinetuneConfig(**TINY, steps=60, hidden_size=64, seed=3), out, progress=False)


def test_a_stop_request_checkpoints_at_that_step_and_the_run_resumes_there(tmp_path):
    """A stop between periodic checkpoints (every 30 steps) writes one at the step it came
    at, so nothing since the last periodic checkpoint is lost."""
    config = FinetuneConfig(**TINY, steps=60, hidden_size=64)  # small heads: 6x smaller ckpts
    out = tmp_path / "run"
    stop = Deadline()

    def ask(step, population):
        if step == 45:
            stop.request_stop("pre-empted")

    with pytest.raises(RunStopped, match="stopped at step 45: pre-empted; re-run") as info:
        ft.finetune(config, out, progress=False, callback=ask, stop=stop)
    assert info.value.step == 45
    run = ft.FinetuneRun(out)
    assert [p.name for p in run.checkpoints()] == ["ckpt_00000030.pt", "ckpt_00000045.pt"]
    status = run.status()
    assert status["state"] == "failed" and "stopped at step 45" in status["message"]
    assert not (out / "eval.json").exists()

    seen = []
    run = ft.finetune(config, out, progress=False, callback=lambda s, pop: seen.append(s))
    assert seen[0] == 46 and seen[-1] == 60
    assert run.status()["state"] == "finished" and run.evaluation["step"] == 60


def test_checkpoints_do_not_change_what_a_run_learns_so_their_interval_may_change(tmp_path):
    """Writing a checkpoint reads the state and advances nothing: a run checkpointing every 20
    steps ends at the same weights and metrics as one checkpointing only at its end, so
    ``checkpoint_every`` is a runtime key (a stopped run resumes under another interval).
    On MinAtar: a checkpoint holds the same state (weights, targets, Adam moments, replay,
    random streams) whatever the encoder and game, and MinAtar's runs cost a fraction of Nature's."""
    small = {**TINY, "game": "minatar/breakout", "encoder": "minatar", "hidden_size": 32}
    often = ft.finetune(
        FinetuneConfig(**{**small, "steps": 60, "checkpoint_every": 20}),
        tmp_path / "a",
        progress=False,
    )
    ft.finetune(
        FinetuneConfig(**{**small, "steps": 60, "checkpoint_every": 60}),
        tmp_path / "b",
        progress=False,
    )
    # (older checkpoints are pruned: the newest two stay)
    assert [p.name for p in often.checkpoints()] == ["ckpt_00000040.pt", "ckpt_00000060.pt"]
    a = torch.load(tmp_path / "a" / "model.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "b" / "model.pt", weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows = [(tmp_path / r / "metrics.jsonl").read_text().splitlines() for r in ("a", "b")]
    strip = [
        [
            {
                k: v
                for k, v in json.loads(x).items()
                if k not in ("charts/sps", "charts/ups", "time")
            }
            for x in r
        ]
        for r in rows
    ]
    assert strip[0] == strip[1]
    assert "checkpoint_every" in RUNTIME_KEYS
    stop = Deadline()
    stop.request_stop("pre-empted")
    config = FinetuneConfig(**{**small, "steps": 60, "checkpoint_every": 60})
    with pytest.raises(RunStopped):
        ft.finetune(config, tmp_path / "c", progress=False, stop=stop)
    resumed = ft.finetune(
        dataclasses.replace(config, checkpoint_every=20), tmp_path / "c", progress=False
    )
    assert resumed.status()["state"] == "finished"


def test_a_population_of_a_pretrained_and_a_fresh_agent_stops_and_resumes(tmp_path):
    """Both agents checkpoint at the stop and resume there in the same population, each with
    its own Adam moments and learning rates (the groups are rebuilt from each agent's own
    transfer)."""
    import dataclasses

    save_pretrained_run(tmp_path / "pre", hidden_size=64)  # small heads: 6x smaller checkpoints
    base = FinetuneConfig(**TINY, steps=60, hidden_size=64)
    configs = [dataclasses.replace(base, pretrained=str(tmp_path / "pre")), base]
    outs = [tmp_path / "sgi", tmp_path / "scratch"]
    stop = Deadline()

    def ask(step, population):
        assert population.lr_factors  # one population, two sets of rates
        if step == 45:
            stop.request_stop("pre-empted")

    with pytest.raises(RunStopped, match="stopped at step 45"):
        ft.finetune_population(
            configs, outs, False, params=["sgi", "none"], callback=ask, stop=stop
        )
    moments = [torch.load(o / "checkpoints/ckpt_00000045.pt", weights_only=True) for o in outs]
    runs = ft.finetune_population(configs, outs, False, params=["sgi", "none"])
    for run, out, saved, name in zip(runs, outs, moments, ["sgi", "none"]):
        assert run.status()["state"] == "finished" and run.evaluation["step"] == 60
        assert run.status()["params"] == name
        assert "resuming at step 45" in (out / "log.txt").read_text()
        assert saved["optimizer"]["state"]  # each agent saved its own moments
    transfers = [json.loads((o / "transfer.json").read_text()) for o in outs]
    sgi, scratch = (t["lr_groups"] for t in transfers)
    assert sgi["encoder_transition"] == pytest.approx(1e-6) and scratch == {"fresh": 1e-4}
    # Nature on a CPU: agents in a loop, fp32 (TINY's cpu_amp off), recorded
    assert [t["update_precision"] for t in transfers] == ["fp32", "fp32"]


def test_a_first_interrupt_stops_at_the_step_with_a_checkpoint(tmp_path):
    """Ctrl-C, or a notebook's "interrupt kernel" (SIGINT), once: the run stops at the step it
    came in, checkpointed, instead of losing the steps since the last periodic checkpoint."""
    import os
    import signal

    out = tmp_path / "run"

    def interrupt(step, population):
        if step == 25:
            os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)  # SIG_IGN in a shell's background job
    with pytest.raises(RunStopped, match="stopped at step 25: SIGINT received"):
        ft.finetune(FinetuneConfig(**TINY, steps=60), out, progress=False, callback=interrupt)
    assert [p.name for p in ft.FinetuneRun(out).checkpoints()] == ["ckpt_00000025.pt"]
    assert signal.getsignal(signal.SIGINT) is before  # the handler is given back


def test_a_time_limit_stops_training_then_leaves_the_evaluation_to_a_call_with_time(tmp_path):
    config = FinetuneConfig(**TINY, steps=30)
    out = tmp_path / "run"
    # A limit that has passed once the first step is done: checkpoint at step 1, stop.
    with pytest.raises(RunStopped, match="at step 1: its time limit of 0.001 s passed"):
        ft.finetune(config, out, progress=False, stop=Deadline(0.001))
    assert [p.name for p in ft.FinetuneRun(out).checkpoints()] == ["ckpt_00000001.pt"]

    # Training ends with less than half of the limit left: stop before evaluating (the last
    # step is checkpointed), so the evaluation gets a call of its own.
    stop = Deadline(1000.0)
    stop.end -= 600  # 400 s of 1000 left
    with pytest.raises(RunStopped, match="at step 30: less than half of the time limit"):
        ft.finetune(config, out, progress=False, stop=stop)
    run = ft.FinetuneRun(out)
    assert run.checkpoints()[-1].name == "ckpt_00000030.pt"
    assert run.status()["state"] == "failed" and not (out / "eval.json").exists()

    # With the whole limit ahead the evaluation runs, nothing is trained again.
    seen = []
    run = ft.finetune(
        config, out, progress=False, callback=lambda s, p: seen.append(s), stop=Deadline(1000.0)
    )
    assert seen == [] and run.status()["state"] == "finished"
    assert run.evaluation["step"] == 30 and run.evaluation["episodes"] == 1


def test_a_stop_request_ends_an_evaluation_without_keeping_part_of_it():
    from sgi_lab.train.evaluate import play_episodes

    stop = Deadline()
    stop.request_stop("SIGTERM received")
    with pytest.raises(RunStopped, match="during its evaluation: SIGTERM received"):
        play_episodes(
            lambda obs: np.zeros(obs.shape[:2], np.int64), ["Pong"], [6], episodes=1,
            num_envs=1, max_frames=40, progress=False, stop=stop,
        )  # fmt: skip


def test_stop_after_on_the_cli_exits_75_and_signals_ask_for_a_clean_stop(tmp_path, capsys):
    import os
    import signal

    from sgi_lab.launch.cli import EXIT_STOPPED

    out = tmp_path / "run"
    argv = ["finetune", "--params", "params/finetune/smoke.yaml", "--game", "pong", "--seed", "0"]
    argv += ["--out", str(out), "--no-progress", "--set", "steps=30", "--set", "batch_size=4"]
    argv += ["--set", "learning_starts=20", "--set", "eval_episodes=1", "--set", "eval_envs=1"]
    argv += ["--set", "eval_max_frames=200", "--set", "checkpoint_every=30"]
    assert main([*argv, "--stop-after", "0.001s"]) == EXIT_STOPPED == 75
    assert "stopped at step 1" in capsys.readouterr().err
    assert main(argv) == 0 and ft.FinetuneRun(out).evaluation["step"] == 30
    assert main([*argv, "--stop-after", "soon"]) == 2
    assert (
        "a duration like 540, 90s, 9m or 1.5h was expected, got 'soon'" in capsys.readouterr().err
    )

    for signum in (signal.SIGTERM, signal.SIGINT):
        stop = Deadline()
        before = signal.getsignal(signum)
        with stop_on_signals(stop, signum):
            os.kill(os.getpid(), signum)  # handled: no KeyboardInterrupt, the process lives on
            assert stop.reason() == f"{signal.Signals(signum).name} received"
            if signum == signal.SIGINT:
                assert signal.getsignal(signum) is before  # a second Ctrl-C acts as before
            else:  # a second SIGTERM (a group's and a driver's) is the same request: still here
                os.kill(os.getpid(), signum)
                assert stop.reason() == "SIGTERM received"
        assert signal.getsignal(signum) is before
    assert "SIGTERM: stopping at the next step, with a checkpoint; SIGKILL stops it at once" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "text, seconds", [("540", 540.0), ("90s", 90.0), ("9m", 540.0), ("1.5h", 5400.0), (2, 2.0)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5", "9 minutes", "", "1e3"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ConfigError, match="a duration like"):
        parse_duration(text)


@pytest.mark.smoke
def test_smoke_finetune_from_a_pretraining_run_via_the_cli(tmp_path, capsys):
    save_pretrained_run(tmp_path / "pre", encoder="nature")
    out = tmp_path / "run"
    argv = ["finetune", "--params", "params/finetune/smoke.yaml", "--game", "pong", "--seed", "1"]
    argv += ["--pretrained", str(tmp_path / "pre"), "--out", str(out), "--no-progress"]
    argv += ["--set", "steps=120", "--set", "learning_starts=80", "--set", "eval_max_frames=400"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["run"] == str(out) and summary["step"] == 120
    run = ft.FinetuneRun(out)
    status = run.status()
    assert status["state"] == "finished" and status["params"] == "smoke"
    assert status["pretrain_params"] == "sgi_m"
    transfer = json.loads((out / "transfer.json").read_text())
    assert transfer["lr_groups"] == pytest.approx(
        {"encoder_transition": 1e-6, "pretrained": 1e-4 / 3, "fresh": 1e-4}
    )
    assert all(n.startswith(("head.advantage_out", "head.value_out")) for n in transfer["fresh"])
    episodes = run.evaluation
    assert episodes["episodes"] == 2 and len(episodes["scores"]) == 2 and episodes["step"] == 120
    metrics = run.metrics()
    assert {"losses/rl", "losses/spr", "charts/q_mean", "charts/beta", "charts/sps"} <= set(metrics)
    assert list(run.episodes().columns) == ["step", "return", "clipped_return", "length"]
    assert main(["evaluate", str(out), "--episodes", "1", "--no-progress"]) == 0
    assert json.loads((out / "eval.json").read_text())["episodes"] == 1


@pytest.mark.smoke
def test_sigterm_to_the_process_group_stops_a_population_with_env_workers_cleanly(tmp_path):
    """`timeout` and schedulers signal the whole process group, environment workers included:
    the run still stops at a step with every agent checkpointed, exit status 75."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "pop"
    argv = [sys.executable, "-m", "sgi_lab.launch.cli", "finetune"]
    argv += ["--params", "params/finetune/smoke.yaml", "--game", "pong,breakout", "--seed", "0"]
    argv += ["--out", str(out), "--no-progress", "--set", "steps=100000", "--set", "batch_size=4"]
    argv += ["--set", "env_workers=2", "--set", "learning_starts=20", "--set", "log_every=10"]
    proc = subprocess.Popen(argv, start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        metrics = out / "Pong__s0" / "metrics.jsonl"
        deadline = time.time() + 120
        while not (metrics.exists() and metrics.read_text().count("\n") >= 3):
            assert proc.poll() is None and time.time() < deadline, "the run did not get going"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 75, err
    assert "SIGTERM received; re-run the same command to resume" in err
    steps = {
        tuple(p.name for p in ft.FinetuneRun(out / f"{g}__s0").checkpoints())
        for g in ("Pong", "Breakout")
    }
    (names,) = steps  # both agents, the same step
    assert len(names) == 1 and int(names[0][5:13]) >= 30


def test_a_term_is_switched_on_once_and_its_weight_read_only_in_the_sum():
    from sgi_lab.config import PretrainConfig

    # Finetuning: ssl is the switch; a goal_weight of 0 keeps the term, weighted by 0.
    settings = finetuning_settings(FinetuneConfig(ssl="all", goal_weight=0.0))
    assert settings.terms == {"spr", "goal_rl", "inverse"} and settings.n_step == 1
    assert finetuning_settings(FinetuneConfig(ssl="none")).terms == frozenset()
    losses = {
        "spr": torch.tensor([1.0, 2.0]),
        "goal_rl": torch.tensor([3.0, 4.0]),
        "inverse": torch.tensor([5.0, 6.0]),
    }
    # 2 * 5 / K (SPR's convention) x spr + 0 x goal_rl + 1 x inverse
    torch.testing.assert_close(weighted_sum(losses, settings), torch.tensor([7.0, 10.0]))
    # Pretraining: a weight of 0 leaves the term (and its head) out: the S/G/I ablations.
    assert pretraining_settings(PretrainConfig(goal_weight=0.0)).terms == {"spr", "inverse"}
    assert pretraining_settings(PretrainConfig(n_step=3)).n_step == 3


def test_a_model_copied_in_from_another_run_is_refused_naming_the_difference(tmp_path):
    import yaml

    from sgi_lab.config import PretrainConfig, to_dict

    save_pretrained_run(tmp_path / "pre")
    own = to_dict(PretrainConfig(encoder="nature"))
    (tmp_path / "pre" / "config.yaml").write_text(yaml.safe_dump(own))

    def record(config: dict) -> None:
        payload = torch.load(tmp_path / "pre" / "model.pt", weights_only=True)
        torch.save({**payload, "config": config}, tmp_path / "pre" / "model.pt")

    record({**own, "cpu_amp": False, "channels_last": False})  # settled at run time: its own
    assert tr.load_pretrained(tmp_path / "pre").config["goal_weight"] == 1.0
    record({**own, "goal_weight": 0.0})  # another objective's model under this folder's label
    with pytest.raises(
        ConfigError, match=r"^pretrained: .*model.pt: not this run's model: .*\['goal_weight'\]"
    ):
        tr.load_pretrained(tmp_path / "pre")
