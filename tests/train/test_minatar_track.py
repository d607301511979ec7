"""The MinAtar track end to end: collect -> pretrain -> finetune a 2-game population -> evaluate,
each stage on MinAtar's (C, 10, 10) observations, and the refusals that keep the two
families apart."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from sgi_lab.config import ConfigError, FinetuneConfig, PretrainConfig, build_config, read_params
from sgi_lab.data.collect import collect_random
from sgi_lab.envs.games import UnknownGameError
from sgi_lab.metrics import minatar_normalized_score
from sgi_lab.runs.folder import slug
from sgi_lab.train import finetune as ft
from sgi_lab.train.pretrain import pretrain
from sgi_lab.train.transfer import PretrainedMismatchError, load_pretrained, model_args_for

pytest.importorskip("minatar")
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_thread")

PRETRAIN = {
    "encoder": "minatar",
    "hidden_size": 32,
    "steps": 4,
    "batch_size": 8,
    "spr_steps": 3,
    "n_step": 3,
    "goal_window": 10,
    "log_every": 2,
    "checkpoint_every": 2,
    "prefetch": 0,
}
FINETUNE = {
    "game": "minatar/breakout",
    "encoder": "minatar",
    "hidden_size": 32,
    "steps": 120,
    "batch_size": 8,
    "updates_per_step": 1,
    "spr_steps": 2,
    "n_step": 3,
    "learning_starts": 60,
    "eps_steps": 61,
    "eval_episodes": 2,
    "eval_envs": 2,
    "log_every": 40,
    "checkpoint_every": 60,
}


GAMES = ("minatar/breakout", "minatar/asterix")  # both 4 channels: one population


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Tiny random stores of Breakout and Asterix (4 channels of 10x10 each)."""
    root = tmp_path_factory.mktemp("minatar")
    return {
        game: collect_random(game, 300, root / game, seed=3, chunk_size=100, progress=False)
        for game in GAMES
    }


@pytest.fixture
def store(stores):
    return stores["minatar/breakout"]


def test_collect_pretrain_finetune_evaluate_on_minatar(stores, tmp_path):
    for store in stores.values():
        assert store.observation_spec.stacked_shape == (4, 10, 10)
        assert store.frame_shape == (4, 10, 10)
        # Each game pretrains its own model (the transition model reads its actions).
        pretrain(PretrainConfig(**PRETRAIN), store, tmp_path / slug(store.game), progress=False)

    run = tmp_path / "minatar-breakout"
    model_path = run / "model.pt"
    pretrained = load_pretrained(run)
    assert model_path.is_file() and pretrained.step == 4
    # Sizes that are not SGIModel's defaults are recorded (Atari's records stay as they were).
    assert pretrained.model_args["image_size"] == 10
    assert pretrained.model_args["hidden_size"] == 32
    assert pretrained.build_model().init_args["in_channels"] == 4
    status = json.loads((run / "status.json").read_text())
    assert status["data_env_protocol"] == "minatar"
    encoder = pretrained.build_model().encoder
    z = encoder(torch.zeros(2, 4, 10, 10, dtype=torch.uint8))
    assert z.shape == (2, 16, 8, 8)  # MinAtarCNN: one 3x3 conv, 16 channels

    configs = ft.population_configs(
        FinetuneConfig(**FINETUNE, pretrained=str(tmp_path / "{game}")),
        games=GAMES,
    )
    assert [c.env_protocol for c in configs] == ["minatar", "minatar"]
    outs = ft.population_folders(tmp_path / "finetune", configs)
    runs = ft.finetune_population(configs, outs, progress=False)
    for config, finetuned in zip(configs, runs, strict=True):
        result = finetuned.evaluation
        assert result["game"] == config.game and result["episodes"] == 2
        assert result["normalization"] == "MinAtar score"
        assert result["env_protocol"] == "minatar" and result["max_frames"] is None
        want = minatar_normalized_score(config.game, result["mean"])
        assert result["normalized_score"] == pytest.approx(want) == result["hns"]
        assert json.loads((finetuned.path / "status.json").read_text())["env_protocol"] == (
            "minatar"
        )
        saved = json.loads((finetuned.path / "eval.json").read_text())
        assert saved["normalization"] == "MinAtar score"
        transfer = json.loads((finetuned.path / "transfer.json").read_text())
        assert any(name.startswith("encoder.") for name in transfer["loaded"])
        model = torch.load(finetuned.path / "model.pt", weights_only=True)
        assert model["model_args"]["image_size"] == 10
        assert model["model"]["encoder.layers.0.weight"].shape[1] == 4  # input channels
        losses = finetuned.metrics()["losses/total"].dropna()  # logged once learning started
        assert len(losses) >= 1 and np.isfinite(losses).all()


def test_the_families_stay_apart(store, tmp_path):
    # An Atari encoder on a MinAtar store, before any folder is made.
    with pytest.raises(ConfigError, match="^encoder: 'resnet' is an Atari encoder"):
        pretrain(PretrainConfig(**{**PRETRAIN, "encoder": "resnet"}), store, tmp_path / "a")
    assert not (tmp_path / "a").exists()
    # A batch larger than the store's valid starts: one line naming batch_size.
    with pytest.raises(ConfigError, match=r"^batch_size: 99999999999 sequences per batch"):
        pretrain(PretrainConfig(**{**PRETRAIN, "batch_size": 99999999999}), store, tmp_path / "b")
    assert not (tmp_path / "b").exists()
    # A MinAtar store's model finetuned on an Atari game (and an encoder/game mismatch).
    run = tmp_path / "pretrain"
    pretrain(PretrainConfig(**{**PRETRAIN, "steps": 1}), store, run, progress=False)
    atari = FinetuneConfig(encoder="nature", game="Pong", pretrained=str(run))
    with pytest.raises(PretrainedMismatchError, match="reads 4 channels of 10x10.*Pong gives 4 "):
        model_args_for(atari, 6, load_pretrained(run))
    with pytest.raises(ConfigError, match="^encoder: 'nature' is an Atari encoder"):
        FinetuneConfig(encoder="nature", game="minatar/breakout")
    with pytest.raises(ConfigError, match="^env_protocol: minatar/breakout plays 'minatar'"):
        FinetuneConfig(encoder="minatar", game="minatar/breakout", env_protocol="rlpyt")
    with pytest.raises(ConfigError, match="^env_protocol: Pong plays an Atari protocol"):
        FinetuneConfig(env_protocol="minatar")
    # Games of other channel counts cannot share a population's stacked tensors.
    configs = ft.population_configs(
        FinetuneConfig(**FINETUNE),
        games=["minatar/breakout", "minatar/freeway"],
    )
    with pytest.raises(ValueError, match="minatar/freeway: 7 channels of 10x10"):
        ft.finetune_population(configs, ft.population_folders(tmp_path / "ft", configs))


def test_minatar_options_reach_training_and_evaluation(tmp_path):
    """channels=10 pads every game to one input shape (Breakout's 4 and Freeway's 7 channels
    in one population), frames=2 stacks two grids; the options are recorded in eval.json."""
    configs = ft.population_configs(
        FinetuneConfig(
            **{**FINETUNE, "steps": 70, "eval_episodes": 1, "eval_envs": 1},
            channels=10,
            frames=2,
            sticky_action_prob=0.0,
            difficulty_ramping=False,
        ),
        games=["minatar/breakout", "minatar/freeway"],
    )
    assert configs[1].observation_spec.stacked_shape == (20, 10, 10)
    runs = ft.finetune_population(configs, ft.population_folders(tmp_path, configs), progress=False)
    options = {"sticky_action_prob": 0.0, "difficulty_ramping": False, "frames": 2, "channels": 10}
    for finetuned in runs:
        assert finetuned.evaluation["env_options"] == options
        model = torch.load(finetuned.path / "model.pt", weights_only=True)
        assert model["model_args"]["in_channels"] == 20
        assert model["model"]["encoder.layers.0.weight"].shape[1] == 20
    replay = torch.load(runs[1].checkpoints()[-1], weights_only=True)["replay"]
    frames = replay["frames"].numpy()
    assert frames.shape == (70, 10, 10, 10)
    assert frames[:, :7].any() and not frames[:, 7:].any()  # Freeway's 7, then padding
    with pytest.raises(ConfigError, match="^channels: a MinAtar option, not one of Atari game"):
        FinetuneConfig(channels=10)


@pytest.mark.slow
def test_an_agent_learns_breakout_within_4000_steps(tmp_path, monkeypatch):
    """SGI-None on MinAtar Breakout at the study's replay ratio (one update a step), 4,000
    agent steps: the evaluation's mean return is well above the uniform random policy's
    (0.42, sgi_lab/metrics/data/minatar_scores.json). Measured on a 2-core Intel Xeon, one
    thread: 2.47 over 30 episodes in 82 s."""
    monkeypatch.setenv("SGI_LAB_CPU_SETTINGS", "cpu_amp=false,channels_last=false")
    config = build_config(
        FinetuneConfig,
        {
            **read_params(ROOT / "params/finetune/minatar_none.yaml")["config"],
            "steps": 4000,
            "learning_starts": 1000,
            "updates_per_step": 1,
            "eval_episodes": 30,
            "seed": 0,
        },
    )
    run = ft.finetune(config, tmp_path / "run", progress=False)
    assert run.evaluation["episodes"] == 30
    assert run.evaluation["mean"] > 1.5  # uniform random: 0.42


def test_a_shared_population_runs_each_agent_as_its_own_population_would(stores, tmp_path, capsys):
    """`sgi-lab finetune --agents` (what an experiment with share_populations runs): an SGI
    agent finetuned with reduced lrs, the same encoder naively and one from scratch, each from
    its own params file, in one population; each records its own params name and rates, and
    the scratch agent takes the same actions and ends at the same weights as the same agent
    run alone with --params."""
    from sgi_lab.launch.cli import main

    store = stores["minatar/breakout"]
    pretrain(PretrainConfig(**PRETRAIN), store, tmp_path / "pre", progress=False)
    params = {}
    for name, extra in (
        ("minatar_reduced_lr", {"scheme": "reduced_lr", "encoder_lr_scale": 0.01}),
        ("minatar_naive", {"scheme": "naive"}),
        ("minatar_none", {}),
    ):
        params[name] = tmp_path / f"{name}.yaml"
        document = {"name": name, "config": {**FINETUNE, **extra}}
        params[name].write_text(yaml.safe_dump(document))
    agents = [
        {"label": "reduced_lr__sgi", "params": "minatar_reduced_lr", "pretrained": "pre"},
        {"label": "naive__sgi", "params": "minatar_naive", "pretrained": "pre"},
        {"label": "sgi_none", "params": "minatar_none", "pretrained": None},
    ]
    for agent in agents:
        agent.update(
            params=str(params[agent["params"]]),
            pretrained=agent["pretrained"] and str(tmp_path / agent["pretrained"]),
            game="minatar/breakout",
            seed=0,
            out=str(tmp_path / "shared" / agent["label"]),
        )
    file = tmp_path / "agents.yaml"
    file.write_text(yaml.safe_dump({"agents": agents}))
    # A loop over the agents: vmap's batched arithmetic rounds differently from one agent's
    # (equal to 1e-4 an update, tests/train/test_population.py), which Adam's 60 steps here
    # amplify to ~1e-3 on near-zero gradients; the loop isolates what this test is about.
    loop = ["--set", "population_batching=loop"]
    assert main(["finetune", "--agents", str(file), "--no-progress", *loop]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [s["run"] for s in summary] == [a["out"] for a in agents]
    lrs = {}
    for agent in agents:
        run = ft.FinetuneRun(agent["out"])
        assert run.status()["state"] == "finished" and run.evaluation["step"] == 120
        assert run.status()["params"] == Path(agent["params"]).stem
        lrs[agent["label"]] = json.loads((run.path / "transfer.json").read_text())["lr_groups"]
    base = FINETUNE.get("lr", FinetuneConfig().lr)
    assert lrs["reduced_lr__sgi"]["encoder_transition"] == pytest.approx(0.01 * base)
    assert list(lrs["naive__sgi"].values()) == pytest.approx([base] * len(lrs["naive__sgi"]))
    assert lrs["sgi_none"] == {"fresh": pytest.approx(base)}

    alone = tmp_path / "alone"
    argv = ["finetune", "--params", str(params["minatar_none"]), "--game", "minatar/breakout"]
    assert main([*argv, "--seed", "0", "--out", str(alone), "--no-progress", *loop]) == 0
    shared = Path(agents[2]["out"])
    for step in (60, 120):  # before learning (the agent's own streams) and after 60 updates
        a, b = (
            torch.load(f / f"checkpoints/ckpt_{step:08d}.pt", weights_only=True)["replay"]
            for f in (alone, shared)
        )
        torch.testing.assert_close(a["actions"], b["actions"], rtol=0, atol=0)
    a, b = (torch.load(f / "model.pt", weights_only=True)["model"] for f in (alone, shared))
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5, msg=key)


def test_an_agents_file_names_what_is_wrong(tmp_path, capsys):
    from sgi_lab.launch.cli import main

    good = {"params": "params/finetune/minatar_none.yaml", "game": "minatar/breakout", "seed": 0}
    cases = [
        ({"agents": []}, "expected a mapping with a non-empty list 'agents'"),
        ({"agents": [{**good, "out": "x", "lr": 1}]}, r"agents\[0\]: unknown key\(s\) \['lr'\]"),
        ({"agents": [good]}, r"agents\[0\]: missing \['out'\]"),
        (
            {"agents": [{**good, "out": "x"}, {**good, "seed": 1, "out": "x"}]},
            r"agents\[0\] and agents\[1\] share the folder x",
        ),
        (
            {"agents": [{**good, "game": "minatar/brekout", "out": "x"}]},
            r"agents\[0\]: .*brekout.*did you mean",
        ),
    ]
    for document, message in cases:
        file = tmp_path / "agents.yaml"
        file.write_text(yaml.safe_dump(document))
        with pytest.raises((ConfigError, UnknownGameError), match=message):
            ft.read_agents(file)
        assert main(["finetune", "--agents", str(file)]) == 2
        capsys.readouterr()
    assert not (tmp_path / "x").exists()
    file.write_text(yaml.safe_dump({"agents": [{**good, "out": str(tmp_path / "y")}]}))
    assert main(["finetune", "--agents", str(file), "--game", "minatar/breakout"]) == 2
    assert "--game not allowed" in capsys.readouterr().err
    assert main(["finetune", "--agents", str(file), "--params", good["params"]]) == 2
    assert "give --params (one config) or --agents" in capsys.readouterr().err
