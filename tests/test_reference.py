"""sgi-lab against the authors' code (mila-iqia/SGI over astooke/rlpyt) on identical inputs.

The fixtures in ``tests/fixtures/reference/`` were made by running the authors' code
(``benchmarks/reference/``: sgi-lab writes the inputs, the reference computes on them in its own
environment, ``reference.json`` names the commits): the same weights, the same batch and the
same random draws (augmentation, goal offsets, goal noise and swaps, noisy-net noise). Each test
runs sgi-lab's own training step, with the settings of the paper's params files (the
reference's side of docs/paper_vs_code.md), and compares every loss term, the gradient of every
parameter (after clipping), the parameters after the Adam step and the target networks after
their update. A failure names the term or tensor that differs.

Tolerances: float32 on both sides, different but equivalent arithmetic (sgi-lab's transition
model convolves the action planes once; its C51 projection and losses are written differently),
so values agree to rounding: losses to a relative 1e-5, gradients to 1e-4 relative to the
tensor's scale. Adam's first step is -lr g / (|g| + eps) per entry, whose slope in g is up to
lr / eps: an entry with |g| near eps = 1.5e-4 turns a gradient rounding difference into a
larger step difference. Updates are compared to 1e-3 of the tensor's largest step plus
lr / eps times the largest gradient difference measured for that tensor; that still tells
apart any learning-rate group (they differ by 3x or more), any clipping and any eps.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sgi_lab.augment.ops import jitter_factor, shift
from sgi_lab.config import FinetuneConfig, PretrainConfig, build_config, load_config
from sgi_lab.nets import SGIModel
from sgi_lab.objectives import goals_from_draws, n_step_return
from sgi_lab.train import population_steps
from sgi_lab.train import pretrain_step as pretrain_module
from sgi_lab.train.acting import acting_q
from sgi_lab.train.acting import greedy as acting_greedy
from sgi_lab.train.finetune import epsilon_at
from sgi_lab.train.population import Population
from sgi_lab.train.transfer import Pretrained, model_args_for, transfer_pretrained
from sgi_lab.train.update import StagedBatch, update

FIXTURES = Path(__file__).parent / "fixtures" / "reference"
CASES = json.loads((FIXTURES / "cases.json").read_text())
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
UPDATE_RTOL = 1e-3
STATISTICS = ("running_mean", "running_var", "num_batches_tracked")
PRETRAIN_CASES = ["pretrain_nature", "pretrain_resnet", "pretrain_resnet_l"]
# The authors' SPR weights on their loss mean_k(2 - 2 cos) (sgim_pretrain.sh's spr_weight=1,
# sgim_finetune.sh's 5: benchmarks/reference/run_reference.py); sgi-lab's spr_coefficient on
# -sum_k cos is 2 w / K of them, written so in the params files (0.4) and the default (2.0).
REFERENCE_SPR_WEIGHT = {"pretrain": 1.0, "finetune": 5.0}


def load(name: str, kind: str) -> dict[str, np.ndarray]:
    return unpacked(dict(np.load(FIXTURES / f"{name}.{kind}.npz", allow_pickle=False)))


def _load_npz_pack():
    """benchmarks/reference/npz_pack.py, the generators' writer and reader of packed fixtures
    (a script beside the generators, which run in the reference's venv too: not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "reference" / "npz_pack.py"
    spec = importlib.util.spec_from_file_location("npz_pack", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


npz_pack = _load_npz_pack()
unpacked = npz_pack.unpacked  # fixtures are read through the writer's own inverse


def test_packed_fixtures_unpack_key_for_key():
    """npz_pack's packed and unpacked are inverses: every array comes back under its key, with
    its dtype, shape and bits; newer files are packed, and each of their per-tensor arrays is
    found."""
    arrays = {
        "grad/a.weight": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
        "grad/b.bias": np.array(np.float32(0.1)),  # 0-d
        "grad/c": np.zeros((0, 3), np.float32),
        "update_index/a.weight": np.array([0, 5]),
        "update/n.num_batches_tracked": np.array([1], np.int64),
        "done_n": np.array([True, False]),
        "loaded": np.array(["encoder.x", "head.y"]),
    }
    back = unpacked(npz_pack.packed(arrays))
    assert sorted(back) == sorted(arrays)
    for key, value in arrays.items():
        assert back[key].dtype == value.dtype and back[key].shape == value.shape, key
        np.testing.assert_array_equal(back[key], value)
    files = np.load(FIXTURES / "pretrain_resnet_l.reference.npz", allow_pickle=False).files
    assert any(k.startswith("packed/grad/") for k in files)
    ref = load("pretrain_resnet_l", "reference")
    assert all(f"update_index/{k[len('update/') :]}" in ref for k in ref if k.startswith("update/"))


def augmented(frames: np.ndarray, corners: np.ndarray, noise: np.ndarray) -> torch.Tensor:
    """The augmented float pixels the inputs' draws give (as the generator computed them)."""
    frames = torch.from_numpy(frames)
    lead = frames.shape[:-3]
    flat = shift(frames.reshape(-1, *frames.shape[-3:]), torch.from_numpy(corners).reshape(-1, 2))
    out = flat.float() * jitter_factor(torch.from_numpy(noise).reshape(-1)).view(-1, 1, 1, 1)
    return out.view(*lead, *out.shape[1:])


def assert_close_scaled(
    name: str, actual: torch.Tensor, expected: np.ndarray, rtol: float, atol: float = 0.0
) -> float:
    """|a - e| <= rtol * max|e| + atol (+ a floor for all-zero tensors), naming the tensor;
    returns the largest difference relative to max|e|."""
    expected_t = torch.from_numpy(np.asarray(expected)).to(actual.dtype)
    scale = float(expected_t.abs().max()) if expected_t.numel() else 0.0
    err = float((actual.detach() - expected_t).abs().max()) if expected_t.numel() else 0.0
    assert err <= rtol * scale + atol + 1e-12, (
        f"{name}: largest difference {err:.3g} vs scale {scale:.3g} "
        f"(relative {err / max(scale, 1e-30):.3g} > {rtol})"
    )
    return err / max(scale, 1e-30)


# -- pretraining ---------------------------------------------------------------------------------


def reference_pretrain_config(case: dict) -> PretrainConfig:
    """The paper params files' settings (the reference's side of every option)."""
    args = case["model_args"]
    if case.get("objective") == "bc":  # params/pretrain/bc.yaml (bc_pretrain.sh)
        return build_config(
            PretrainConfig,
            encoder=args["encoder"],
            spr_coefficient=0.0,
            goal_weight=0.0,
            inverse_weight=0.0,
            bc_weight=1.0,
            grad_clip_groups="reference",
            batch_size=case["batch_size"],
            spr_steps=case["spr_steps"],
            augment=False,
            cpu_amp=False,
            channels_last=False,
            device="cpu",
            prefetch=0,
        )
    return build_config(
        PretrainConfig,
        encoder=args["encoder"],
        spr_coefficient=2.0 * REFERENCE_SPR_WEIGHT["pretrain"] / case["spr_steps"],
        goal_weight=1.0,
        inverse_weight=1.0,
        goal_noise="reference",
        goal_offsets="reference",
        goal_distance_scale=5.0,
        goal_film="reference",
        goal_double_q=True,
        goal_returns="reference",
        grad_clip_groups="reference",
        batch_size=case["batch_size"],
        spr_steps=case["spr_steps"],
        n_step=1,
        augment=False,  # the augmentation is fed (the inputs' draws)
        cpu_amp=False,
        channels_last=False,
        device="cpu",
        prefetch=0,
    )


def run_pretrain_step(name: str, monkeypatch: pytest.MonkeyPatch, **overrides):
    case = CASES[name]
    x = with_shared_target(load(name, "inputs"))
    config = dataclasses.replace(reference_pretrain_config(case), **overrides)
    args = case["model_args"]
    sizes = {k: args[k] for k in ("image_size", "hidden_size", "width_scale")}
    state = pretrain_module.build_state(config, args["num_actions"], torch.device("cpu"), **sizes)
    online = {k[7:]: torch.from_numpy(v) for k, v in x.items() if k.startswith("online/")}
    target = {k[7:]: torch.from_numpy(v) for k, v in x.items() if k.startswith("target/")}
    state.model.load_state_dict(online)
    state.target.load_state_dict(target)
    before = {k: v.detach().clone() for k, v in state.model.state_dict().items()}
    target_before = {k: v.detach().clone() for k, v in state.target.state_dict().items()}

    draws = (
        {
            "noise": torch.from_numpy(x["goal_noise"]),
            "alpha": torch.from_numpy(x["goal_alpha"]),
            "swap": torch.from_numpy(x["goal_swap"]),
            "offset": torch.from_numpy(x["goal_swap_offset"]).long(),
        }
        if "goal_noise" in x
        else {}
    )
    captured = {}

    def fed_goals(latents, generator, alpha_max, swap_prob, noise_scale):
        goals, _ = goals_from_draws(latents, draws, alpha_max, swap_prob, noise_scale)
        captured["goals"] = goals
        return goals

    monkeypatch.setattr(pretrain_module, "sample_goals", fed_goals)
    batch = pretrain_module.PretrainBatch(
        obs=augmented(x["frames"], x["corners"], x["jitter"]),
        actions=torch.from_numpy(x["actions"]).long(),
        valid=torch.ones(x["actions"].shape, dtype=torch.bool),
        goal_obs=(
            augmented(x["goal_frames"], x["goal_corners"], x["goal_jitter"])
            if config.goal_weight > 0
            else None
        ),
    )
    logs = pretrain_module.train_step(config, state, batch)
    grads = {k: p.grad for k, p in state.model.named_parameters() if p.grad is not None}
    after = state.model.state_dict()
    return config, logs, grads, before, after, target_before, state.target.state_dict(), captured


@pytest.mark.parametrize("name", PRETRAIN_CASES)
def test_pretraining_losses_equal_the_reference(name, monkeypatch):
    config, logs, _, _, _, _, _, captured = one_update("pretrain", name, monkeypatch)
    ref = load(name, "reference")
    K, w = config.spr_steps, REFERENCE_SPR_WEIGHT["pretrain"]
    assert config.spr_coefficient == 2.0 * w / K == 0.4  # the paper params files' value, exactly
    # The reference's SPR term is mean_k(2 - 2 cos) = 2 + (2 / K) * (-sum_k cos).
    expected = {
        "losses/spr": (float(ref["loss/spr"]) - 2.0) * K / 2.0,
        "losses/goal": float(ref["loss/goal"]),
        "losses/inverse": float(ref["loss/inverse"]),
        # its total adds the constant 2 w that changes no gradient
        "losses/total": float(ref["loss/spr"]) * w
        + float(ref["loss/goal"])
        + float(ref["loss/inverse"])
        - 2.0 * w,
    }
    assert_close_scaled("goals", captured["goals"], ref["goals"], LOSS_RTOL)
    for key, value in expected.items():
        got = float(logs[key].detach())
        assert got == pytest.approx(value, rel=LOSS_RTOL, abs=1e-7), (
            f"{name} {key}: sgi-lab {got!r}, reference {value!r}"
        )


def test_the_bc_baseline_equals_the_reference(monkeypatch):
    """BC (bc_pretrain.sh): cross-entropy of the dataset's action against the Q head's expected
    values (the reference's ``bc_from_values``), its gradients and Adam step."""
    name = "pretrain_bc"
    config, logs, grads, before, after, *_ = one_update("pretrain", name, monkeypatch)
    ref = load(name, "reference")
    got, expected = float(logs["losses/bc"].detach()), float(ref["loss/bc"])
    assert got == pytest.approx(expected, rel=LOSS_RTOL), f"{name} losses/bc: {got} vs {expected}"
    compare_gradients_and_updates(name, ref, grads, before, after, config.lr, config.adam_eps)


@pytest.mark.parametrize("name", PRETRAIN_CASES)
def test_pretraining_gradients_and_step_equal_the_reference(name, monkeypatch):
    config, _, grads, before, after, _, _, _ = one_update("pretrain", name, monkeypatch)
    ref = load(name, "reference")
    compare_gradients_and_updates(name, ref, grads, before, after, config.lr, config.adam_eps)


def compare_gradients_and_updates(name, ref, grads, before, after, lr, eps):
    grad_error = {}
    for key in ref:
        if key.startswith("grad/"):
            param = key[5:]
            if param not in grads and not np.any(ref[key]):
                continue  # no gradient on either side (the reference's is written as zeros)
            assert param in grads, f"{name}: sgi-lab has no gradient for {param}"
            rel = assert_close_scaled(
                f"{name} gradient of {param}", grads[param], ref[key], GRAD_RTOL
            )
            grad_error[param] = rel * float(np.abs(ref[key]).max())
    assert len(grad_error) >= 10
    for key in ref:
        if key.startswith("update/"):
            param = key[7:]
            idx = torch.from_numpy(ref[f"update_index/{param}"])
            delta = (after[param] - before[param]).flatten()[idx]
            # + the float32 rounding of parameter - before (one ulp of the largest entry each)
            ulp = 2.0 * float(before[param].abs().max()) * 2.0**-23
            slack = lr / eps * grad_error.get(param, 0.0) + ulp
            assert_close_scaled(
                f"{name} Adam update of {param}", delta, ref[key], UPDATE_RTOL, slack
            )


def test_pretraining_gradient_clipping_equals_the_reference(monkeypatch):
    """The reference rerun with a norm limit of 1 (the fixture's norm is ~8): it clips the
    encoder and heads, and the transition model, each on its own, and not the predictor or
    the inverse model."""
    name = "pretrain_nature"
    config, _, grads, before, after, *_ = run_pretrain_step(name, monkeypatch, grad_clip=1.0)
    ref = load(name, "clip1.reference")
    compare_gradients_and_updates(name, ref, grads, before, after, config.lr, config.adam_eps)
    config, _, grads, before, after, *_ = run_pretrain_step(
        name, monkeypatch, grad_clip=1.0, grad_clip_groups="all"
    )
    with pytest.raises(AssertionError):  # clipping all gradients together differs
        compare_gradients_and_updates(name, ref, grads, before, after, config.lr, config.adam_eps)


@pytest.mark.parametrize("name", PRETRAIN_CASES)
def test_pretraining_target_updates_equal_the_reference(name, monkeypatch):
    """The reference has two EMA targets of the same online network (tau 0.01 each): the agent's
    target model (goal RL's bootstrap), moved after the Adam step, and the SPR target encoder
    and projection inside the model, moved inside the forward pass, i.e. toward the weights
    *before* the step. sgi-lab has one target, moved after the step: equal to the first, and
    ahead of the second by tau * (theta_after - theta_before) (docs/paper_vs_code.md).

    Batch-norm running statistics of the targets are left out: a target in training mode updates
    them in each of its own forward passes, which the two codes batch differently; they are used
    only with ``target_batch_norm: running`` (not the paper's setting)."""
    config, _, _, before, after, target_before, target_after, _ = one_update(
        "pretrain", name, monkeypatch
    )
    ref = load(name, "reference")
    tau = 1.0 - config.ema_tau
    checked = {"q_target": 0, "spr_target": 0}
    for key in ref:
        kind, _, param = key.partition("/")
        if kind not in checked or param.endswith(STATISTICS):
            continue
        idx = torch.from_numpy(ref[f"{kind}_index/{param}"])
        delta = (target_after[param] - target_before[param]).flatten()[idx]
        if kind == "spr_target":  # the reference's SPR target follows the pre-step weights
            delta = delta - tau * (after[param] - before[param]).flatten()[idx]
        ulp = 2.0 * float(target_before[param].abs().max()) * 2.0**-23
        assert_close_scaled(f"{name} {kind} update of {param}", delta, ref[key], 1e-4, ulp)
        checked[kind] += 1
    assert checked["q_target"] >= 10 and checked["spr_target"] >= 4, checked


# -- finetuning ----------------------------------------------------------------------------------


# The reference's goal RL in finetuning (src/algos.py's loss, the same code as pretraining's):
# double Q, its return, distance scale 5, bootstrapped from its agent's target model
# (params/finetune/all_ssl.yaml); goal and inverse-dynamics weights 1, as sgim_pretrain.sh's.
REFERENCE_SSL_ALL = {
    "ssl": "all",
    "goal_weight": 1.0,
    "inverse_weight": 1.0,
    "goal_distance_scale": 5.0,
    "goal_returns": "reference",
    "goal_double_q": True,
    "goal_target": "rl_target",
}


def test_the_all_ssl_params_finetune_as_the_fixture():
    """params/finetune/all_ssl.yaml takes the reference's side of every ssl-all option (what
    the ``finetune_all`` fixture pins) and of the finetuning options the other cases pin."""
    root = Path(__file__).resolve().parents[1]
    cfg = load_config(FinetuneConfig, root / "params/finetune/all_ssl.yaml")
    fixture = reference_finetune_config(CASES["finetune_all"])
    for key in [*REFERENCE_SSL_ALL, "lr_groups", "pretrained_lr_scale", "grad_clip"]:
        assert getattr(cfg, key) == getattr(fixture, key), key
    assert (cfg.spr_target_update, cfg.spr_target_start, cfg.target_tau) == (
        fixture.spr_target_update,
        fixture.spr_target_start,
        fixture.target_tau,
    )
    assert cfg.rl_head_hidden == "separate"  # row 40: the reference's two copies


def with_loaded_online(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A compact case's inputs leave out the finetuning model's loaded tensors equal to the
    pretrained ones (benchmarks/reference/make_inputs.py): put them back."""
    for k in x.get("loaded", ()):
        x.setdefault(f"online/{k}", x[f"pretrained/{k}"])
    return x


def with_shared_target(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A compact pretraining case's inputs store a target tensor equal to the online one once
    (make_inputs.py): put it back as a ``target/`` entry. Finetuning cases have no ``target/``."""
    if any(k.startswith("target/") for k in x):
        for k in [k for k in x if k.startswith("online/")]:
            x.setdefault("target/" + k[len("online/") :], x[k])
    return x


def reference_finetune_config(case: dict) -> FinetuneConfig:
    """The reference's finetuning (config.yaml, configs['ernbw'], sgim_finetune.sh), with all
    of SGI's losses for a case with ``ssl: all``."""
    ssl = REFERENCE_SSL_ALL if case.get("ssl") == "all" else {}
    return build_config(
        FinetuneConfig,
        **ssl,
        game="Pong",
        encoder=case["model_args"]["encoder"],
        batch_size=case["batch_size"],
        spr_steps=case["spr_steps"],
        n_step=case["n_step"],
        scheme="reduced_lr",
        lr_groups="reference",
        encoder_lr_scale=0.01,  # encoder_lr 1e-6
        pretrained_lr_scale=0.3,  # q_l1_lr 3e-5
        grad_clip=0.0,  # clip_grad_norm=-1, clip_model_grad_norm=-1
        spr_target_update="before_step",
        spr_target_start="pretrained_target",
        cpu_amp=False,
        channels_last=False,
        device="cpu",
    )


# Row 40 of docs/paper_vs_code.md: the prefix of the RL head's own copy of the Q head's first
# layers, which SGIModel builds with ``FinetuneConfig.rl_head_hidden: separate``; ``head.``'s
# first layers are then the goal head's copy, SPR's projection.
RL_COPY = "rl_hidden."
HIDDEN = ("head.advantage_hidden.", "head.value_hidden.")


def with_rl_copy(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` plus an ``rl_hidden.`` entry equal to each ``head.*_hidden.`` entry."""
    copies = {RL_COPY + k[len("head.") :]: v for k, v in tensors.items() if k.startswith(HIDDEN)}
    return {**tensors, **copies}


def run_finetune_update(name: str, monkeypatch: pytest.MonkeyPatch, before_update=None):
    case = CASES[name]
    x = with_loaded_online(load(name, "inputs"))
    config = reference_finetune_config(case)
    ssl_all = config.ssl == "all"

    def entries(prefix: str) -> dict[str, torch.Tensor]:
        n = len(prefix)
        return {k[n:]: torch.from_numpy(v) for k, v in x.items() if k.startswith(prefix)}

    pretrained = Pretrained(
        path=Path("fixture"),
        state=entries("pretrained/"),
        model_args=case["pretrained_model_args"],
        step=0,
        target_state=entries("pretrained_target/"),
    )
    A = case["model_args"]["num_actions"]
    model = SGIModel(**model_args_for(config, A, pretrained))
    transfer = transfer_pretrained(model, pretrained)
    # row 40's option: the RL head's own copy of the first layers, loaded as
    # the reference's copy_base_params loads it, from the pretrained first layers
    copies = any(k.startswith(RL_COPY) for k in model.state_dict())
    assert sorted(k for k in transfer.loaded if not k.startswith(RL_COPY)) == list(x["loaded"])
    online = entries("online/")  # the generator's transfer, fresh output layers included
    if copies:
        online = with_rl_copy(online)
    for k in transfer.loaded:
        torch.testing.assert_close(model.state_dict()[k], online[k], rtol=0, atol=0)
    model.load_state_dict(online)
    pop = Population.build([config], [model], transfer.loaded)
    pop.start_spr_target(0, pretrained.target_state)

    def fed_draw(batch, steps):
        out = {
            "corners_obs": torch.from_numpy(x["corners"])[None],
            "jitter_obs": jitter_factor(torch.from_numpy(x["jitter"]))[None],
            "corners_boot": torch.from_numpy(x["boot_corners"])[None],
            "jitter_boot": jitter_factor(torch.from_numpy(x["boot_jitter"]))[None],
        }
        for which in ("online", "target") + (("goal",) if ssl_all else ()):
            noise = entries(f"noise_{which}/")
            # the reference's two copies were fed the same noise (run_reference.py)
            noise = with_rl_copy(noise) if copies else noise
            out[f"noise_{which}"] = {k: v[None] for k, v in noise.items()}
        if ssl_all:
            out["corners_goal"] = torch.from_numpy(x["goal_corners"])[None]
            out["jitter_goal"] = jitter_factor(torch.from_numpy(x["goal_jitter"]))[None]
            out["goal_draws"] = {
                "noise": torch.from_numpy(x["goal_noise"])[None],
                "alpha": torch.from_numpy(x["goal_alpha"])[None],
                "swap": torch.from_numpy(x["goal_swap"])[None],
                "offset": torch.from_numpy(x["goal_swap_offset"]).long()[None],
            }
        return out

    monkeypatch.setattr(population_steps, "draw", lambda _pop, batch, steps: fed_draw(batch, steps))
    rewards = torch.from_numpy(x["rewards"])
    returns, discounts = n_step_return(rewards, 1.0 - torch.from_numpy(x["dones"]), config.gamma)
    staged = StagedBatch(
        obs=torch.from_numpy(x["frames"])[None],
        boot_obs=torch.from_numpy(x["boot_frames"])[None],
        actions=torch.from_numpy(x["actions"]).long()[None],
        valid=torch.ones(x["actions"].shape, dtype=torch.bool)[None],
        returns=returns[None],
        discounts=discounts[None],
        weights=torch.from_numpy(x["is_weights"])[None],
        goal_obs=torch.from_numpy(x["goal_frames"])[None] if ssl_all else None,
    )
    if before_update is not None:
        before_update(pop)
    before = {k: v.detach()[0].clone() for k, v in pop.online.items()}
    spr_before = {k: v.detach()[0].clone() for k, v in pop.spr_target.items()}
    stats, priorities = update(pop, staged)
    grads = {k: v.grad[0] for k, v in pop.online.items() if getattr(v, "grad", None) is not None}
    after = {k: v.detach()[0] for k, v in pop.online.items()}
    spr_after = {k: v.detach()[0] for k, v in pop.spr_target.items()}
    return SimpleNamespace(
        config=config,
        population=pop,
        stats=stats,
        priorities=priorities[0],
        grads=grads,
        before=before,
        after=after,
        spr_before=spr_before,
        spr_after=spr_after,
    )


_ORIGINAL_CONFIGS = (reference_pretrain_config, reference_finetune_config)
_UPDATES: dict[tuple[str, str], object] = {}


def one_update(stage: str, name: str, monkeypatch: pytest.MonkeyPatch):
    """A case's update with the reference's settings, run once and shared by the tests that only
    read it (an update takes seconds; the losses, gradients, targets and acting tests of a case
    read the same one). A test that patches the settings (the option tests) gets its own run."""
    run = {"pretrain": run_pretrain_step, "finetune": run_finetune_update}[stage]
    if (reference_pretrain_config, reference_finetune_config) != _ORIGINAL_CONFIGS:
        return run(name, monkeypatch)
    if (stage, name) not in _UPDATES:
        with pytest.MonkeyPatch.context() as own:
            _UPDATES[stage, name] = run(name, own)
    return _UPDATES[stage, name]


def test_finetuning_n_step_returns_equal_rlpyts():
    """sgi-lab's n-step return and bootstrap discount against rlpyt's discount_return_n_step
    (what the reference's replay stores as return_ and done_n), with an episode end inside."""
    x, ref = load("finetune_nature", "inputs"), load("finetune_nature", "reference")
    dones = torch.from_numpy(x["dones"])
    returns, discounts = n_step_return(torch.from_numpy(x["rewards"]), 1.0 - dones, 0.99)
    torch.testing.assert_close(returns, torch.from_numpy(ref["return_"]), rtol=1e-6, atol=1e-6)
    expected = 0.99 ** x["dones"].shape[1] * (1.0 - ref["done_n"].astype(np.float32))
    torch.testing.assert_close(discounts, torch.from_numpy(expected), rtol=1e-6, atol=0)
    assert ref["done_n"].any() and not ref["done_n"].all()


FINETUNE_CASES = [
    "finetune_nature",
    "finetune_resnet",
    "finetune_resnet_l",
    "finetune_all",
    "finetune_all_resnet",
]


@pytest.mark.parametrize("name", FINETUNE_CASES)
def test_finetuning_losses_and_priorities_equal_the_reference(name, monkeypatch):
    """Each loss term (with ``ssl: all`` goal RL and inverse dynamics too), the PER-weighted
    total and the new priorities."""
    run = one_update("finetune", name, monkeypatch)
    config, stats, priorities = run.config, run.stats, run.priorities
    ref = load(name, "reference")
    K, w = config.spr_steps, torch.from_numpy(load(name, "inputs")["is_weights"])
    spr_weight = REFERENCE_SPR_WEIGHT["finetune"]
    assert config.spr_coefficient == 2.0 * spr_weight / K  # the default, 2.0
    rl = torch.from_numpy(ref["rl_per_sample"])
    spr_steps = torch.from_numpy(ref["spr_per_step"])  # (K+1, B) of 2 - 2 cos
    spr_ref = spr_steps[1:].mean(0)  # mean_k(2 - 2 cos) per sample (no terminal inside K)
    per_sample = rl + spr_weight * spr_ref
    expected = {
        "losses/rl": float(rl.mean()),
        "losses/spr": float(((spr_ref - 2.0) * K / 2.0).mean()),
    }
    if config.ssl == "all":
        goal = torch.from_numpy(ref["goal_rl_per_sample"])
        inverse = torch.from_numpy(ref["inverse_per_sample"])
        expected["losses/goal_rl"] = float(goal.mean())
        expected["losses/inverse"] = float(inverse.mean())
        per_sample = per_sample + config.goal_weight * goal + config.inverse_weight * inverse
        # the reference's weighted means, as its optimize_agent adds them
        assert float((w * goal).mean()) == pytest.approx(float(ref["loss/goal"]), rel=1e-6)
        assert float((w * inverse).mean()) == pytest.approx(float(ref["loss/inverse"]), rel=1e-6)
    # the reference's total adds the constant 2 w spr_weight that changes no gradient
    expected["losses/total"] = float((w * per_sample).mean()) - 2.0 * spr_weight * float(w.mean())
    for key, value in expected.items():
        got = float(stats[key][0])
        assert got == pytest.approx(value, rel=LOSS_RTOL, abs=1e-7), (
            f"{name} {key}: sgi-lab {got!r}, reference {value!r}"
        )
    # new priorities: the C51 KL, clamped to [1e-6, 1e6] by the reference
    assert_close_scaled(f"{name} priorities", priorities.clamp(1e-6, 1e6), ref["priorities"], 1e-5)


@pytest.mark.parametrize("name", FINETUNE_CASES)
def test_finetuning_gradients_step_and_spr_target_equal_the_reference(name, monkeypatch):
    """Every gradient, the Adam step of every parameter and the SPR target's update. With
    ``ssl: all`` the Q head's first layers are compared by their gradient only: the reference
    keeps two copies of them (see `test_finetuning_all_keeps_one_copy_of_the_q_heads_first_layers`),
    whose gradients sum to sgi-lab's."""
    run = one_update("finetune", name, monkeypatch)
    ref, config = load(name, "reference"), run.config
    compare_gradients_and_updates(
        name, ref, run.grads, run.before, run.after, config.lr, config.adam_eps
    )
    compare_spr_target(name, ref, run)


def compare_spr_target(name: str, ref: dict[str, np.ndarray], run: SimpleNamespace) -> None:
    """The SPR target's update after a finetuning update, against the reference's."""
    spr_before, spr_after = run.spr_before, run.spr_after
    checked = 0
    for key in ref:
        kind, _, param = key.partition("/")
        # the target projection runs noise-free: its sigmas are never used (the reference
        # averages them anyway, sgi-lab does not)
        if kind != "spr_target" or param.endswith(STATISTICS + ("_sigma",)):
            continue
        idx = torch.from_numpy(ref[f"spr_target_index/{param}"])
        delta = (spr_after[param] - spr_before[param]).flatten()[idx]
        ulp = 2.0 * float(spr_before[param].abs().max()) * 2.0**-23
        assert_close_scaled(f"{name} SPR target update of {param}", delta, ref[key], 1e-4, ulp)
        checked += 1
    assert checked >= 8


PRETRAIN_TEXT_SIDE = [
    {"goal_film": "text"},
    {"goal_returns": "text"},
    {"goal_double_q": False},
]
FINETUNE_TEXT_SIDE = [
    {"lr_groups": "text", "pretrained_lr_scale": 1 / 3},
    {"grad_clip": 10.0},
    {"spr_target_update": "after_step"},
    {"double_q": False},
]


@pytest.mark.parametrize("change", PRETRAIN_TEXT_SIDE, ids=str)
def test_each_pretraining_option_is_seen_by_the_fixtures(change, monkeypatch):
    """The other side of each option moves something the fixtures compare: the fixtures can
    tell the settings apart, and the options reach the update."""
    base = reference_pretrain_config
    monkeypatch.setattr(
        sys.modules[__name__],
        "reference_pretrain_config",
        lambda case: dataclasses.replace(base(case), **change),
        raising=False,
    )
    with pytest.raises(AssertionError):
        test_pretraining_gradients_and_step_equal_the_reference("pretrain_resnet", monkeypatch)


@pytest.mark.parametrize("change", FINETUNE_TEXT_SIDE, ids=str)
def test_each_finetuning_option_is_seen_by_the_fixtures(change, monkeypatch):
    base = reference_finetune_config
    monkeypatch.setattr(
        sys.modules[__name__],
        "reference_finetune_config",
        lambda case: dataclasses.replace(base(case), **change),
        raising=False,
    )
    with pytest.raises(AssertionError):
        test_finetuning_gradients_step_and_spr_target_equal_the_reference(
            "finetune_nature", monkeypatch
        )


FINETUNE_ALL_TEXT_SIDE = [
    {"goal_double_q": False},
    {"goal_returns": "text"},
    {"goal_distance_scale": 1.0},
    {"goal_target": "spr_target"},
]


@pytest.mark.parametrize("change", FINETUNE_ALL_TEXT_SIDE, ids=str)
def test_each_ssl_all_finetuning_option_is_seen_by_the_fixtures(change, monkeypatch):
    """The dataclass side of each ``ssl: all`` goal-RL option moves the gradients that the
    ``finetune_all`` fixture pins: the options reach the update, and the fixture tells the
    settings apart."""
    base = reference_finetune_config
    monkeypatch.setattr(
        sys.modules[__name__],
        "reference_finetune_config",
        lambda case: dataclasses.replace(base(case), **change),
        raising=False,
    )
    with pytest.raises(AssertionError):
        test_finetuning_gradients_step_and_spr_target_equal_the_reference(
            "finetune_all", monkeypatch
        )


def test_goal_rl_bootstraps_from_the_separate_rl_target(monkeypatch):
    """``goal_target: rl_target`` with a separate Q target network (``target_tau`` < 1): goal
    RL's bootstrap is read from that network. Built as a copy of the online network, it gives
    the fixture's gradients; moved off it, the goal head's gradients move."""
    name = "finetune_all"
    base = reference_finetune_config
    monkeypatch.setattr(
        sys.modules[__name__],
        "reference_finetune_config",
        lambda case: dataclasses.replace(base(case), target_tau=0.5),
        raising=False,
    )
    ref = load(name, "reference")

    def compare(run):
        lr, eps = run.config.lr, run.config.adam_eps
        compare_gradients_and_updates(name, ref, run.grads, run.before, run.after, lr, eps)

    run = one_update("finetune", name, monkeypatch)
    assert run.population.q_target is not None
    compare(run)

    def move_goal_head(pop):
        with torch.no_grad():
            pop.q_target["goal_head.advantage_out.weight_mu"].mul_(3.0)

    with pytest.raises(AssertionError, match="gradient of goal_head"):
        compare(run_finetune_update(name, monkeypatch, before_update=move_goal_head))


SSL_ALL_CASES = ["finetune_all", "finetune_all_resnet"]


@pytest.mark.parametrize("name", SSL_ALL_CASES)
def test_finetuning_all_keeps_one_copy_of_the_q_heads_first_layers(name, monkeypatch):
    """The default (``rl_head_hidden: shared``, docs/paper_vs_code.md row 40; ``separate`` is
    the reference's, `test_a_second_copy_of_the_q_heads_first_layers_equals_the_reference`):
    finetuning with goal RL, the reference has two copies of the Q head's first layers, both loaded from the pretrained
    goal head: the RL head's (trained by the C51 loss alone) and the goal head's, which is
    SPR's projection (trained by SPR, goal RL and inverse dynamics), each with its own noise
    sample and Adam state. sgi-lab has one layer that all the losses train. On the fixture
    both copies get a gradient of their own, whose sum is sgi-lab's (compared in
    `test_finetuning_gradients_step_and_spr_target_equal_the_reference`), and sgi-lab's one
    Adam step is neither copy's."""
    run = one_update("finetune", name, monkeypatch)
    ref = load(name, "reference")
    hidden = [k[len("grad_rl/") :] for k in ref if k.startswith("grad_rl/")]
    assert len(hidden) == 8, hidden  # {advantage,value}_hidden.{weight,bias}_{mu,sigma}
    differs = {"rl": [], "ssl": []}
    for param in (p for p in hidden if p.endswith("_mu")):
        for part in ("rl", "ssl"):
            assert np.abs(ref[f"grad_{part}/{param}"]).max() > 0, f"{param}: no {part} gradient"
            idx = torch.from_numpy(ref[f"update_{part}_index/{param}"])
            ours = (run.after[param] - run.before[param]).flatten()[idx]
            theirs = torch.from_numpy(ref[f"update_{part}/{param}"])
            differs[part].append(float((ours - theirs).abs().max() / theirs.abs().max()))
    # The RL head's copy moves with the C51 gradient alone (measured: 2.0 steps off sgi-lab's,
    # every tensor); the SSL copy's gradient is most of the sum (its step differs by 1-186%).
    assert min(differs["rl"]) > 1.0 and max(differs["ssl"]) > 0.5, differs


@pytest.mark.parametrize("name", ["finetune_nature", "finetune_resnet", "finetune_resnet_l"])
def test_acting_equals_the_reference(name, monkeypatch):
    """After the update: the Q values the agent acts on while training (noisy nets with the
    update's noise, batch norm on running statistics: rlpyt's sampling mode), the noise-free
    ones it is evaluated on (evaluation mode) and the greedy actions, on the batch's first
    observations; and the epsilon schedule and evaluation epsilon of the reference's settings
    (config.yaml: eps 1 -> 0, eps_steps 2001, min_steps_learn 2000, eps_eval 0.001)."""
    compare_acting(name, one_update("finetune", name, monkeypatch))


def compare_acting(name: str, run: SimpleNamespace) -> None:
    """The acting comparisons of `test_acting_equals_the_reference` on an update's result."""
    config, pop = run.config, run.population
    ref, x = load(name, "reference"), load(name, "inputs")
    frames = torch.from_numpy(x["frames"][:, 0])  # (B, 4, H, W) uint8
    q_sample = torch.cat([acting_q(pop, frames[b : b + 1]) for b in range(frames.shape[0])])
    assert_close_scaled(f"{name} acting Q values (noisy)", q_sample, ref["act/q_sample"], 1e-5)
    model = pop.agent_model(0).eval()
    model.set_noise(False)
    with torch.no_grad():
        q_eval = model.q_values(model.encode(frames))
    assert_close_scaled(f"{name} evaluation Q values", q_eval, ref["act/q_eval"], 1e-5)
    greedy = acting_greedy(pop, frames[None].numpy())[0]
    np.testing.assert_array_equal(greedy, ref["act/q_eval"].argmax(-1))
    assert config.eval_eps == pytest.approx(float(ref["act/eps_eval"][0]))
    schedule = dataclasses.replace(config, eps_from="learning_starts", learning_starts=2000)
    ours = [epsilon_at(int(itr), schedule) for itr in ref["act/eps_itrs"]]
    np.testing.assert_allclose(ours, ref["act/eps"], rtol=0, atol=1e-12)
    # the default schedule anneals from step 0 instead (docs/paper_vs_code.md)
    assert epsilon_at(1000, config) < 1.0 and float(ref["act/eps"][2]) == 1.0


# Row 40's option, as docs/paper_vs_code.md and benchmarks/reference/README.md describe it: with
# goal RL in finetuning, the RL head keeps its own copy of the first layers (``rl_hidden.``,
# trained by the C51 loss alone, acting and the C51 target read it), and ``head.``'s first
# layers are the goal head's copy (SPR's projection: SPR, goal RL and inverse dynamics).
ROW_40_OPTION = {"rl_head_hidden": "separate"}


def split_copies(ref: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The ``finetune_all`` reference's outputs with each copy of the first layers under its
    own name: ``grad_ssl``/``update_ssl`` (the goal head's copy) as ``head.``'s gradient and
    step (in place of the two copies' summed gradient), ``grad_rl``/``update_rl`` as
    ``rl_hidden.``'s."""
    renamed = {"_rl": RL_COPY, "_ssl": "head."}
    out = dict(ref)
    for key, value in ref.items():
        kind, _, param = key.partition("/")
        for part, prefix in renamed.items():
            for suffix in ("", "_index"):
                base = kind.removesuffix(part + suffix)
                if base != kind and base in ("grad", "update"):
                    out[f"{base}{suffix}/{prefix}{param.removeprefix('head.')}"] = value
    return out


@pytest.mark.parametrize("name", SSL_ALL_CASES)
def test_a_second_copy_of_the_q_heads_first_layers_equals_the_reference(name, monkeypatch):
    """With the option, each copy takes the reference's copy's gradient and Adam step (the RL
    head's: ``grad_rl``/``update_rl``; the goal head's: ``grad_ssl``/``update_ssl``), every
    other tensor as without it, and acting after the update equals the reference's."""
    base = reference_finetune_config
    monkeypatch.setattr(
        sys.modules[__name__],
        "reference_finetune_config",
        lambda case: dataclasses.replace(base(case), **ROW_40_OPTION),
        raising=False,
    )
    run = run_finetune_update(name, monkeypatch)
    assert any(k.startswith(RL_COPY) for k in run.grads), "the option built no second copy"
    ref = load(name, "reference")
    per_copy = split_copies(ref)
    lr, eps = run.config.lr, run.config.adam_eps
    compare_gradients_and_updates(name, per_copy, run.grads, run.before, run.after, lr, eps)
    compare_spr_target(name, ref, run)
    compare_acting(name, run)
