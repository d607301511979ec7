"""A study's controls as finetuning sees them: the positive control loads a finetuned agent's
layers exactly where an SGI pretraining run's would go, and the negative control trains the same
tensors in the same groups at the same learning rates from their initialization."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from population_helpers import make_config

import sgi_lab.train.transfer as tr
from sgi_lab.base.files import atomic_torch_save
from sgi_lab.config import ConfigError, to_dict
from sgi_lab.nets import SGIModel, parameter_group
from sgi_lab.train.population import Population

pytestmark = pytest.mark.usefixtures("one_thread")

ACTIONS = 6


def finetune_model(config) -> SGIModel:
    torch.manual_seed(config.seed)
    return SGIModel(**tr.model_args_for(config, ACTIONS))


def pretraining_state(args: dict) -> dict[str, torch.Tensor]:
    """What an SGI pretraining run's model holds: no Q outputs, a goal head and inverse model."""
    torch.manual_seed(7)
    model = SGIModel(**{**args, "rl_head": False, "goal_head": True, "inverse_model": True})
    return model.state_dict()


@pytest.fixture
def agent_run(tmp_path):
    """A finished from-scratch agent's run folder, its model trained away from initialization."""
    config = make_config(seed=3)
    model = finetune_model(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # not the initialization any model here starts from
    folder = tmp_path / "agent"
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(to_dict(config)))
    (folder / "status.json").write_text(json.dumps({"kind": "finetune", "state": "finished"}))
    payload = {
        "format": "sgi-lab",
        "kind": "finetuned_model",
        "step": 100,
        "model": model.state_dict(),
        "model_args": tr.model_args_for(config, ACTIONS),
        "config": to_dict(config),
        "game": config.game,
    }
    atomic_torch_save(payload, folder / "model.pt")
    return folder, model.state_dict()


def test_an_agent_provides_exactly_the_tensors_a_pretraining_run_provides(agent_run):
    folder, trained = agent_run
    source = tr.load_pretrained(folder)
    assert source.source_kind == "agent" and source.step == 100
    assert not any(parameter_group(k) == "q_output" for k in source.state)
    config = make_config(seed=0, scheme="reduced_lr")
    model = finetune_model(config)
    transfer = tr.transfer_pretrained(model, source)
    # the names a pretraining run of the same architecture would give this model
    pretrained = tr.Pretrained(folder, pretraining_state(source.model_args), source.model_args, 1)
    expected = tr.transfer_pretrained(finetune_model(config), pretrained)
    assert set(transfer.loaded) == set(expected.loaded)
    assert {parameter_group(k) for k in transfer.loaded} == {
        "encoder",
        "transition",
        "projection",
        "predictor",
    }
    state = model.state_dict()
    for name in transfer.loaded:
        if "sigma" not in name:  # noisy sigmas restart at sigma_0, as after pretraining
            assert torch.equal(state[name], trained[name]), name
    for name in transfer.fresh:
        assert not torch.equal(state[name], trained[name]), name  # the outputs start fresh
    assert transfer.to_json()["source_kind"] == "agent"


def test_the_negative_control_keeps_the_initialization_in_the_same_groups(agent_run):
    folder, trained = agent_run
    source = tr.load_pretrained(folder)
    config = make_config(seed=0, scheme="reduced_lr", pretrained_values="initial")
    loaded_model, initial_model = finetune_model(config), finetune_model(config)
    before = {k: v.clone() for k, v in initial_model.state_dict().items()}
    loaded = tr.transfer_pretrained(loaded_model, source, "loaded")
    initial = tr.transfer_pretrained(initial_model, source, "initial")
    assert initial.loaded == loaded.loaded and initial.fresh == loaded.fresh
    assert initial.to_json()["values"] == "initial"
    after = initial_model.state_dict()
    assert all(torch.equal(after[k], before[k]) for k in before)  # nothing copied
    weight = next(k for k in initial.loaded if k.startswith("encoder.") and "weight" in k)
    assert not torch.equal(after[weight], trained[weight])
    # the same learning rate for every parameter as the arm that loads the values
    pops = [
        Population.build([config], [m], loaded=[t.loaded], device="cpu")
        for m, t in ((loaded_model, loaded), (initial_model, initial))
    ]
    groups = [p.agent_lr_groups(0) for p in pops]
    assert groups[0] == groups[1]
    assert groups[0]["encoder_transition"] == pytest.approx(1e-4 * 0.01)
    assert groups[0]["pretrained"] == pytest.approx(1e-4 / 3)
    with pytest.raises(ValueError, match="values"):
        tr.transfer_pretrained(finetune_model(config), source, "random")


def test_a_run_that_is_neither_pretraining_nor_a_finished_agent_is_refused(agent_run, tmp_path):
    folder, _ = agent_run
    (folder / "status.json").write_text(json.dumps({"kind": "finetune", "state": "running"}))
    (folder / "model.pt").unlink()
    with pytest.raises(ConfigError, match="never finished"):
        tr.load_pretrained(folder)
    other = tmp_path / "collect"
    other.mkdir()
    (other / "status.json").write_text(json.dumps({"kind": "collect", "state": "finished"}))
    with pytest.raises(ConfigError, match="a collect run, not a pretraining run"):
        tr.load_pretrained(other)
