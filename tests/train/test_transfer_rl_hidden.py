"""Finetuning with the RL head's own copy of the Q head's first layers (``rl_head_hidden:
separate``, docs/paper_vs_code.md row 40): the model's arguments, the transfer, the learning-rate
group, and a population update (the copy's noise, gradient, step and the SPR target's EMA)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from population_helpers import fake_batch, make_config, population

import sgi_lab.train.finetune as ft
import sgi_lab.train.transfer as tr
from sgi_lab.nets import SGIModel
from sgi_lab.runs.checkpoints import load_checkpoint
from sgi_lab.train.population import Population
from sgi_lab.train.population_steps import draw
from sgi_lab.train.update import stage, update

pytestmark = pytest.mark.usefixtures("one_thread")

SEPARATE = {"ssl": "all", "rl_head_hidden": "separate", "hidden_size": 16, "encoder": "nature"}


def hidden_names() -> list[str]:
    return [
        f"{s}_hidden.{p}_{q}"
        for s in ("advantage", "value")
        for p in ("weight", "bias")
        for q in ("mu", "sigma")
    ]


def pretrained_model(num_actions: int = 6) -> tr.Pretrained:
    """A pretraining run's model (noise-free, goal head, no Q outputs) with first layers whose
    sigmas differ from their initial value, as a file would hold them."""
    args = {"encoder": "nature", "num_actions": num_actions, "hidden_size": 16, "noisy": False}
    args.update(rl_head=False, goal_head=True, inverse_model=True)
    torch.manual_seed(7)
    model = SGIModel(**args)
    with torch.no_grad():
        model.head.advantage_hidden.weight_sigma.fill_(0.25)
    return tr.Pretrained(
        path=Path("pre/model.pt"), state=model.state_dict(), model_args=args, step=3
    )


def test_model_args_build_the_copy_only_with_goal_rl_and_separate():
    assert tr.model_args_for(make_config(**SEPARATE), 6)["rl_hidden"] is True
    for other in ({"ssl": "all"}, {"ssl": "spr", "rl_head_hidden": "separate"}, {}):
        assert "rl_hidden" not in tr.model_args_for(make_config(**other), 6)


def test_transfer_copies_the_pretrained_first_layers_into_the_copy_after_the_sigma_reset():
    pretrained = pretrained_model()
    config = make_config(**SEPARATE, lr_groups="reference")
    model = SGIModel(**tr.model_args_for(config, 6, pretrained))
    transfer = tr.transfer_pretrained(model, pretrained)
    state = model.state_dict()
    copies = [f"rl_hidden.{n}" for n in hidden_names()]
    for name in hidden_names():
        torch.testing.assert_close(
            state[f"rl_hidden.{name}"], state[f"head.{name}"], rtol=0, atol=0
        )
        if name.endswith("_mu"):  # the pretrained means
            assert torch.equal(state[f"rl_hidden.{name}"], pretrained.state[f"head.{name}"])
    sigma = state["rl_hidden.advantage_hidden.weight_sigma"]  # reset: 0.5 / sqrt(3136), not 0.25
    assert torch.all(sigma == 0.5 / 3136**0.5)
    assert set(copies) <= set(transfer.loaded)
    assert not set(copies) & set(transfer.fresh) and not set(copies) & set(transfer.ignored)
    for groups in ("reference", "text"):  # the reference's q_l1_lr group, as head.'s layers
        for name in copies:
            assert tr.lr_group(name, set(transfer.loaded), "reduced_lr", groups) == "pretrained"
    # without pretraining the copy starts fresh, like every other layer
    fresh = SGIModel(**tr.model_args_for(config, 6))
    assert tr.lr_group(copies[0], set(), "reduced_lr", "reference") == "fresh"
    assert not torch.equal(
        fresh.rl_hidden.value_hidden.weight_mu, fresh.head.value_hidden.weight_mu
    )


def test_an_update_trains_the_copy_with_its_own_noise_and_leaves_it_out_of_sprs_target():
    config = make_config(**SEPARATE, lr_groups="reference")
    pretrained = pretrained_model()
    model = SGIModel(**tr.model_args_for(config, 6, pretrained))
    transfer = tr.transfer_pretrained(model, pretrained)
    pop = Population.build([config], [model], transfer.loaded)
    by_id = {id(v): k for k, v in pop.online.items()}
    groups = {g["name"]: {by_id[id(p)] for p in g["params"]} for g in pop.optimizer.param_groups}
    assert "rl_hidden.advantage_hidden.weight_mu" in groups["pretrained"]
    assert not any(k.startswith("rl_hidden.") for k in pop.ema_names())
    drawn = draw(pop, config.batch_size, config.spr_steps + 1)["noise_online"]
    assert not torch.equal(
        drawn["rl_hidden.value_hidden.eps_in"], drawn["head.value_hidden.eps_in"]
    )

    before = {k: v.detach().clone() for k, v in pop.online.items()}
    target_before = {k: v.clone() for k, v in pop.spr_target.items()}
    batch = fake_batch(config, 6, seed=0)
    update(pop, stage(pop, [batch], [np.ones(config.batch_size, np.float32)]))
    for name in ("rl_hidden.advantage_hidden.weight_mu", "head.advantage_hidden.weight_mu"):
        assert not torch.equal(pop.online[name], before[name]), f"{name} did not move"
    # SPR's EMA follows head.'s copy (the projection), never the RL head's
    moved = (
        pop.spr_target["head.advantage_hidden.weight_mu"]
        - target_before["head.advantage_hidden.weight_mu"]
    )
    assert moved.abs().max() > 0
    for k in (k for k in pop.spr_target if k.startswith("rl_hidden.")):
        assert torch.equal(pop.spr_target[k], target_before[k]), k
    # the copy's Adam step differs from head.'s: each copy has its own gradient
    step_rl = (
        pop.online["rl_hidden.value_hidden.weight_mu"] - before["rl_hidden.value_hidden.weight_mu"]
    )
    step_head = pop.online["head.value_hidden.weight_mu"] - before["head.value_hidden.weight_mu"]
    assert not torch.allclose(step_rl, step_head)
    # agent_model gives back the copy, read by q_logits
    agent = pop.agent_model(0)
    assert torch.equal(
        agent.rl_hidden.value_hidden.weight_mu, pop.online["rl_hidden.value_hidden.weight_mu"][0]
    )


def test_a_run_with_the_copy_saves_resumes_and_evaluates_it(tmp_path):
    """A finetuning run from a pretraining folder with ``separate``: the copy is loaded
    (transfer.json), checkpointed, restored after a crash, saved in model.pt with the arguments
    that rebuild it, and evaluation reads it."""
    pretrained = pretrained_model()
    pre = tmp_path / "pre"
    pre.mkdir()
    payload = {"format": "sgi-lab", "kind": "pretrained_model", "step": 3, "config": {}}
    payload.update(model=pretrained.state, model_args=pretrained.model_args, game="Pong")
    torch.save(payload, pre / "model.pt")
    (pre / "status.json").write_text(json.dumps({"state": "finished", "kind": "pretrain"}))
    config = make_config(
        **SEPARATE,
        pretrained=str(pre),
        steps=36,
        learning_starts=20,
        eps_steps=21,
        updates_per_step=1,
        eval_episodes=1,
        eval_envs=1,
        eval_max_frames=200,
        log_every=10,
        checkpoint_every=30,
    )
    out = tmp_path / "run"

    def crash(step, agent):
        if step == 33:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        ft.finetune(config, out, progress=False, callback=crash)
    saved = load_checkpoint(out / "checkpoints" / "ckpt_00000030.pt")
    assert saved["model_args"]["rl_hidden"] is True
    copy = saved["model"]["rl_hidden.advantage_hidden.weight_mu"]
    assert not torch.equal(copy, pretrained.state["head.advantage_hidden.weight_mu"])  # trained
    run = ft.finetune(config, out, progress=False)
    assert "resuming" in (out / "log.txt").read_text()
    assert run.status()["state"] == "finished" and run.evaluation["episodes"] == 1
    transfer = json.loads((out / "transfer.json").read_text())
    assert "rl_hidden.value_hidden.weight_mu" in transfer["loaded"]
    final = load_checkpoint(out / "model.pt")
    model = SGIModel(**final["model_args"])
    model.load_state_dict(final["model"])  # strict: the copy is there and nothing else is new
    assert model.has_rl_hidden


def test_the_copy_runs_under_vmap_as_agent_by_agent():
    """Two agents (6 and 4 actions) with the copy: the vmap'd update (the GPU's path) gives the
    losses of the loop over agents."""
    losses = {}
    for batching in ("vmap", "loop"):
        configs = [make_config(seed=s, **SEPARATE, population_batching=batching) for s in (0, 1)]
        pop = population(configs, (6, 4))
        batches = [fake_batch(c, a, i) for i, (c, a) in enumerate(zip(configs, (6, 4)))]
        stats, _ = update(pop, stage(pop, batches, [np.ones(4, np.float32)] * 2))
        losses[batching] = torch.stack([stats["losses/rl"], stats["losses/total"]])
    torch.testing.assert_close(losses["vmap"], losses["loop"], rtol=1e-5, atol=1e-6)
