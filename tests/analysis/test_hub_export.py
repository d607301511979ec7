"""``sgi-lab export hub``: a tiny MinAtar pretraining run as a Hub folder (safetensors, config,
model card), read back bit for bit and finetuned from with ``--pretrained FOLDER``, offline."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sgi_lab.config import PretrainConfig
from sgi_lab.data.store_writer import TransitionStoreWriter
from sgi_lab.envs.spec import minatar_spec
from sgi_lab.launch.cli import main
from sgi_lab.runs.checkpoints import CheckpointError
from sgi_lab.runs.hub import WEIGHTS, read_hub_folder
from sgi_lab.train.pretrain import pretrain
from sgi_lab.train.transfer import load_pretrained

pytest.importorskip("safetensors", reason="safetensors is not installed")
pytestmark = pytest.mark.usefixtures("one_thread")

PRETRAIN = {
    "encoder": "minatar", "hidden_size": 32, "steps": 4, "batch_size": 8, "spr_steps": 3,
    "n_step": 3, "goal_window": 10, "log_every": 2, "checkpoint_every": 2, "prefetch": 0,
}  # fmt: skip
# learning starts after the first checkpoint: it holds the weights as loaded
FINETUNE = {
    "hidden_size": 32, "steps": 80, "batch_size": 8, "updates_per_step": 1, "spr_steps": 2,
    "n_step": 3, "learning_starts": 50, "eps_steps": 51, "eval_episodes": 1, "eval_envs": 1,
    "log_every": 40, "checkpoint_every": 40,
}  # fmt: skip


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A 4-step SGI run on a synthetic MinAtar Breakout store (300 rows, no emulator)."""
    root = tmp_path_factory.mktemp("hub")
    rng = np.random.default_rng(0)
    spec = minatar_spec("breakout")
    writer = TransitionStoreWriter.create(
        root / "store", game="minatar/breakout", source="random", num_actions=3,
        env_protocol="minatar", observation_spec=spec, sticky_action_prob=0.1,
    )  # fmt: skip
    first = np.zeros(300, dtype=np.uint8)
    first[::50] = 1
    writer.append_many(
        frame=(rng.random((300, *spec.frame_shape)) < 0.2).astype(np.uint8) * 255,
        action=rng.integers(0, 3, 300), reward=(rng.random(300) < 0.1).astype(np.float32),
        terminal=np.roll(first, -1), first=first,
    )  # fmt: skip
    writer.close()
    run = root / "pre"
    pretrain(PretrainConfig(**PRETRAIN), root / "store", run, progress=False, params_name="tiny")
    return run


def test_a_run_exports_to_a_hub_folder_that_loads_back_bit_for_bit(pretrained, tmp_path, capsys):
    out = tmp_path / "hub"
    assert main(["export", "hub", str(pretrained), str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md", "config.yaml", "model.safetensors", "sgi_lab.json", "target.safetensors",
    ]  # fmt: skip
    assert (out / "config.yaml").read_text() == (pretrained / "config.yaml").read_text()
    card = (out / "README.md").read_text()
    fingerprint = json.loads((pretrained / "status.json").read_text())["inputs"]["data"]
    assert "library_name: sgi-lab" in card and fingerprint in card
    assert "SPR x2, goal-conditioned RL x1, inverse dynamics x1" in card
    assert "| env protocol | minatar |" in card and "| steps | 4 (batch 8) |" in card

    model = torch.load(pretrained / "model.pt", weights_only=True)
    loaded = load_pretrained(out)
    assert (loaded.params, loaded.step, loaded.game) == ("tiny", 4, "minatar/breakout")
    assert loaded.model_args == model["model_args"] and loaded.config == model["config"]
    assert set(loaded.state) == set(model["model"])
    for key, value in model["model"].items():
        assert torch.equal(loaded.state[key], value), key
    assert loaded.target_state.keys() == load_pretrained(pretrained).target_state.keys()

    capsys.readouterr()
    assert main(["export", "hub", str(pretrained), str(out)]) == 2  # never into a full folder
    assert "not empty" in capsys.readouterr().err
    (out / WEIGHTS).write_bytes((out / WEIGHTS).read_bytes()[:-8])  # a torn download
    with pytest.raises(CheckpointError, match="SHA-256"):
        read_hub_folder(out)


def test_finetune_starts_from_a_hub_folder(pretrained, tmp_path, capsys):
    pytest.importorskip("minatar", reason="MinAtar (the `minatar` extra) is not installed")
    out, run = tmp_path / "hub", tmp_path / "ft"
    assert main(["export", "hub", str(pretrained), str(out)]) == 0
    sets = [f"--set={k}={v}" for k, v in FINETUNE.items()]
    argv = ["finetune", "--params", "params/finetune/minatar_reduced_lr.yaml", "--game",
            "minatar/breakout", "--seed", "0", "--pretrained", str(out), "--out", str(run)]  # fmt: skip
    assert main([*argv, *sets, "--set=population_batching=loop", "--no-progress"]) == 0
    status = json.loads((run / "status.json").read_text())
    assert status["pretrain_params"] == "tiny"
    source = torch.load(pretrained / "model.pt", weights_only=True)["model"]
    before = torch.load(run / "checkpoints" / "ckpt_00000040.pt", weights_only=True)["model"]
    encoder = [k for k in source if k.startswith("encoder.")]
    assert encoder and all(torch.equal(before[k], source[k]) for k in encoder)
    transfer = json.loads((run / "transfer.json").read_text())
    assert set(encoder) <= set(transfer["loaded"])
