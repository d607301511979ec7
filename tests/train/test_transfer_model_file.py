"""A pretraining run's ``model.pt``: what it keeps of the EMA target (SPR's target network, the
encoder and projection), and that files written before, which hold the whole target, still load
and start finetuning's SPR target exactly as a new file does."""

from __future__ import annotations

import json
from unittest import mock

import pytest
import torch
from conftest import moving_dot_store
from population_helpers import make_config

import sgi_lab.train.transfer as tr
from sgi_lab.config import PretrainConfig, build_config
from sgi_lab.nets import SGIModel
from sgi_lab.runs.checkpoints import load_checkpoint
from sgi_lab.train.population import Population
from sgi_lab.train.pretrain import load_pretrained_model, pretrain

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(encoder="nature", batch_size=4, steps=3, log_every=3, checkpoint_every=3, prefetch=0)
TINY.update(hidden_size=16, spr_coefficient=2.0, goal_weight=1.0, inverse_weight=1.0)
KEPT = ("encoder.", "head.advantage_hidden.", "head.value_hidden.")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished SGI pretraining run (S + G + I, 3 steps), its model.pt's payload and the
    whole EMA target at its last step (what resuming would need: a finished run writes no
    checkpoint at its last step, so it is caught on its way into model.pt)."""
    import sgi_lab.train.pretrain as pretrain_module

    root = tmp_path_factory.mktemp("pre")
    store = moving_dot_store(root / "dot", rows=300, num_actions=6)
    config = build_config(PretrainConfig, TINY)
    seen = {}
    part = pretrain_module.pretrained_target_part

    def keep_whole(state):
        seen["whole"] = {k: v.clone() for k, v in state.items()}
        return part(state)

    with mock.patch.object(pretrain_module, "pretrained_target_part", keep_whole):
        path = pretrain(config, store, root / "run", progress=False)
    return path, load_checkpoint(path, kind="pretrained_model"), seen["whole"]


def test_model_pt_keeps_the_online_model_and_sprs_part_of_the_target(run):
    path, payload, whole = run  # whole: the last step's EMA target, which resuming needs
    model, target = payload["model"], payload["target"]
    assert set(target) == {k for k in whole if k.startswith(KEPT)}
    assert {k.split(".")[0] for k in whole} - {k.split(".")[0] for k in target} == {
        "transition",
        "predictor",
        "film",
        "goal_head",
        "inverse",
    }
    for k, v in target.items():
        assert torch.equal(v, whole[k]), k
    assert set(model) == set(SGIModel(**payload["model_args"]).state_dict())  # the model whole
    assert set(tr.load_pretrained(path.parent).target_state) == set(target)


def old_file(run, tmp_path):
    """The same run as sgi-lab wrote it before: model.pt with the whole EMA target."""
    path, payload, whole = run
    folder = tmp_path / "old"
    folder.mkdir()
    torch.save({**payload, "target": whole}, folder / "model.pt")
    (folder / "status.json").write_text(json.dumps({"state": "finished", "kind": "pretrain"}))
    return folder, whole


def finetuned_spr_target(pretrained: tr.Pretrained) -> dict[str, torch.Tensor]:
    """Agent 0's SPR target after starting it from the pretrained target (ssl: all, so that
    the target also follows the goal head)."""
    config = make_config(encoder="nature", ssl="all", spr_target_start="pretrained_target")
    torch.manual_seed(0)
    model = SGIModel(**tr.model_args_for(config, 6, pretrained))
    transfer = tr.transfer_pretrained(model, pretrained)
    pop = Population.build([config], [model], transfer.loaded)
    pop.start_spr_target(0, pretrained.target_state)
    return pop.agent_state(0, "spr_target")


def test_an_older_model_pt_with_the_whole_target_loads_and_finetunes_as_a_new_one(run, tmp_path):
    path, payload, _ = run
    folder, whole = old_file(run, tmp_path)
    old, new = tr.load_pretrained(folder), tr.load_pretrained(path.parent)
    assert set(old.state) == set(new.state) and set(old.target_state) == set(new.target_state)
    assert len(whole) > len(old.target_state)  # the file held more; only SPR's part is read
    for k in new.state:
        assert torch.equal(old.state[k], new.state[k])
    for k in new.target_state:
        assert torch.equal(old.target_state[k], new.target_state[k])
    # the probes, representations and analysis notebooks read the model through this
    model = load_pretrained_model(folder)
    assert not model.training
    for k, v in model.state_dict().items():
        assert torch.equal(v, payload["model"][k]), k
    # SPR's target: the pretrained EMA encoder and projection; the goal head and FiLM as the
    # loaded online weights, from either file
    from_old, from_new = finetuned_spr_target(old), finetuned_spr_target(new)
    for k, v in from_new.items():
        assert torch.equal(from_old[k], v), k
    enc = "encoder.layers.0.weight"
    assert torch.equal(from_new[enc], whole[enc]) and not torch.equal(whole[enc], old.state[enc])
    film = "film.layers.0.weight"
    assert torch.equal(from_new[film], old.state[film])


def test_a_model_pt_without_a_target_still_loads(run, tmp_path):
    path, payload, _ = run
    folder = tmp_path / "oldest"
    folder.mkdir()
    torch.save({k: v for k, v in payload.items() if k != "target"}, folder / "model.pt")
    (folder / "status.json").write_text(json.dumps({"state": "finished", "kind": "pretrain"}))
    pretrained = tr.load_pretrained(folder)
    assert pretrained.target_state is None
    assert set(pretrained.state) == set(payload["model"])
