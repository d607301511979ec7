"""A trained agent as a collector's policy: its labels are the Random collector's, its actions
are the agent's, its manifest says how the store was made, and a wrong file is refused."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from sgi_lab.data import TransitionStore
from sgi_lab.data.collect import collect
from sgi_lab.data.store_format import StoreFolderError
from sgi_lab.launch.cli import main
from sgi_lab.nets import SGIModel
from sgi_lab.runs.checkpoints import CheckpointError
from sgi_lab.train import agent_policy
from sgi_lab.train.agent_policy import AgentPolicy, AgentPolicyError, collect_with_agent

pytest.importorskip("minatar")

GAME = "minatar/breakout"
ENV = {"sticky_action_prob": 0.1, "difficulty_ramping": True, "frames": 1, "channels": None}
ARGS = {"encoder": "minatar", "num_actions": 3, "image_size": 10, "hidden_size": 16}


def agent_file(path, favourite=None, kind="finetuned_model", game=GAME, args=ARGS, seed=0):
    """A finetuning agent's model file of a small random network; ``favourite``: a hand-made
    agent whose Q values always rank that action first (all atom mass of its advantage on
    v_max, whatever the frame)."""
    torch.manual_seed(seed)
    model = SGIModel(**args)
    if favourite is not None:
        head = model.head.advantage_out
        with torch.no_grad():
            head.weight_mu.zero_()
            bias = torch.zeros(model.num_actions, head.bias_mu.numel() // model.num_actions)
            bias[favourite, -1] = 50.0
            head.bias_mu.copy_(bias.flatten())
    config = {"game": game, "seed": 0, **(ENV if game.startswith("minatar/") else {})}
    payload = {"format": "sgi-lab", "kind": kind, "step": 1234, "model": model.state_dict()}
    payload.update(model_args=args, config=config, game=game)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(payload, path)
    return path


class ReplayActions:
    """Plays a recorded list of actions, in order."""

    def __init__(self, actions):
        self.actions = iter(actions.tolist())

    def __call__(self, obs):
        return next(self.actions)


def test_labels_equal_a_replay_of_the_same_actions_through_the_random_collectors_path(tmp_path):
    file = agent_file(tmp_path / "run" / "model.pt")
    store = collect_with_agent(
        file, GAME, 300, tmp_path / "agent", eps=0.3, seed=5, chunk_size=100, progress=False
    )
    assert store.has_labels and store.label_names == ("paddle_x", "ball_x", "ball_y",
                                                      "ball_dir", "bricks")  # fmt: skip
    # The same seed and actions through `collect` (collect_random's own path), the run's env.
    replay = collect(
        ReplayActions(store.actions), GAME, 300, tmp_path / "replay", seed=5, chunk_size=100,
        progress=False, env_kwargs=ENV,
    )  # fmt: skip
    rows = np.arange(300)
    np.testing.assert_array_equal(store.gather_labels(rows), replay.gather_labels(rows))
    np.testing.assert_array_equal(store.gather_frames(rows), replay.gather_frames(rows))
    np.testing.assert_array_equal(store.rewards, replay.rewards)
    np.testing.assert_array_equal(store.firsts, replay.firsts)
    labels = store.gather_labels(rows)
    assert len(np.unique(labels[:, 0])) > 1 and len(np.unique(labels[:, 1:3], axis=0)) > 5
    assert store.sticky_action_prob == 0.1 and store.manifest.env_protocol == "minatar"


@pytest.mark.parametrize("favourite", [0, 2])
def test_the_agents_policy_chooses_the_actions(tmp_path, favourite):
    file = agent_file(tmp_path / f"fav{favourite}.pt", favourite=favourite)
    greedy = collect_with_agent(file, GAME, 200, tmp_path / "g", eps=0.0, progress=False)
    assert set(greedy.actions.tolist()) == {favourite}
    # With eps 0.5 a random action is drawn half the time: the favourite 1/2 + 1/6 of them.
    noisy = collect_with_agent(file, GAME, 600, tmp_path / "n", eps=0.5, progress=False)
    share = np.mean(noisy.actions == favourite)
    assert 0.58 < share < 0.76 and set(noisy.actions.tolist()) == {0, 1, 2}


def test_the_epsilon_draws_are_the_evaluations(tmp_path):
    """Per step one uniform, then one action, from a generator seeded with the seed."""
    file = agent_file(tmp_path / "fav1.pt", favourite=1)
    model, _ = agent_policy.load_agent(file)
    policy = AgentPolicy(model, eps=0.4, seed=9)
    rng = np.random.default_rng(9)
    obs = np.zeros((4, 10, 10), np.uint8)
    with agent_policy._noise_free(model):
        for _ in range(50):
            random, drawn = rng.random(1)[0] < 0.4, int(rng.integers(0, 3, size=1)[0])
            assert policy(obs) == (drawn if random else 1)


def test_the_manifest_records_the_policy_and_round_trips(tmp_path):
    file = agent_file(tmp_path / "agent__x" / "checkpoints" / "ckpt_00001234.pt", kind="finetune")
    out = tmp_path / "store"
    store = collect_with_agent(file, GAME, 150, out, eps=0.1, seed=3, progress=False)
    policy = store.manifest.params["policy"]
    assert policy == {
        "file": str(file),
        "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
        "kind": "finetune",
        "step": 1234,
        "game": GAME,
        "run": "agent__x",
        "eps": 0.1,
    }
    assert store.manifest.source == "agent" and store.manifest.params["steps"] == 150
    on_disk = json.loads((out / "manifest.json").read_text())["params"]["policy"]
    assert on_disk == policy and TransitionStore(out).manifest.params == store.manifest.params
    # The same collection again is the store already there; another epsilon is refused.
    before = (out / "manifest.json").stat().st_mtime_ns
    again = collect_with_agent(file, GAME, 150, out, eps=0.1, seed=3, progress=False)
    assert (out / "manifest.json").stat().st_mtime_ns == before
    np.testing.assert_array_equal(again.actions, store.actions)
    with pytest.raises(StoreFolderError, match="other settings"):
        collect_with_agent(file, GAME, 150, out, eps=0.2, seed=3, progress=False)


def test_an_interrupted_collection_resumes_to_the_uninterrupted_store(tmp_path, monkeypatch):
    file = agent_file(tmp_path / "run" / "model.pt")
    whole = collect_with_agent(
        file, GAME, 250, tmp_path / "whole", eps=0.5, seed=1, chunk_size=100, progress=False
    )
    calls = {"n": 0}
    act = agent_policy._epsilon_greedy

    def crash_at_150(*args):
        calls["n"] += 1
        if calls["n"] > 150:
            raise KeyboardInterrupt
        return act(*args)

    monkeypatch.setattr(agent_policy, "_epsilon_greedy", crash_at_150)
    with pytest.raises(KeyboardInterrupt):
        collect_with_agent(
            file, GAME, 250, tmp_path / "cut", eps=0.5, seed=1, chunk_size=100, progress=False
        )
    monkeypatch.setattr(agent_policy, "_epsilon_greedy", act)
    resumed = collect_with_agent(
        file, GAME, 250, tmp_path / "cut", eps=0.5, seed=1, chunk_size=100, progress=False
    )
    np.testing.assert_array_equal(resumed.actions, whole.actions)
    rows = np.arange(250)
    np.testing.assert_array_equal(resumed.gather_labels(rows), whole.gather_labels(rows))


def test_a_run_folder_plays_its_model_else_its_newest_checkpoint(tmp_path):
    run = tmp_path / "run"
    agent_file(run / "checkpoints" / "ckpt_00000100.pt", favourite=0, kind="finetune")
    agent_file(run / "checkpoints" / "ckpt_00000200.pt", favourite=2, kind="finetune")
    store = collect_with_agent(run, GAME, 50, tmp_path / "a", eps=0.0, progress=False)
    assert set(store.actions.tolist()) == {2}
    assert store.manifest.params["policy"]["file"].endswith("ckpt_00000200.pt")
    agent_file(run / "model.pt", favourite=1)
    store = collect_with_agent(run, GAME, 50, tmp_path / "b", eps=0.0, progress=False)
    assert set(store.actions.tolist()) == {1}


def test_wrong_files_and_settings_are_refused_in_one_line(tmp_path):
    file = agent_file(tmp_path / "model.pt")
    out = tmp_path / "out"
    cases = [
        (dict(source=tmp_path / "missing.pt"), "no such finetuning run folder"),
        (dict(source=tmp_path / "empty_run"), "not a finetuning run folder"),
        (dict(game="minatar/asterix"), "an agent of minatar/breakout, not of minatar/asterix"),
        (dict(full_action_space=True), "chooses among 3 actions"),
        (dict(eps=1.5), r"eps: must lie in \[0, 1\]"),
        (dict(source=agent_file(tmp_path / "p.pt", kind="pretrained_model")), "not a trained"),
    ]
    (tmp_path / "empty_run").mkdir()
    for change, message in cases:
        kwargs = {"source": file, "game": GAME, "eps": 0.05, **change}
        with pytest.raises(AgentPolicyError, match=message) as caught:
            collect_with_agent(kwargs.pop("source"), kwargs.pop("game"), 10, out, **kwargs)
        assert "\n" not in str(caught.value)
    (tmp_path / "foreign.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="foreign.pt"):
        collect_with_agent(tmp_path / "foreign.pt", GAME, 10, out)
    assert not out.exists() and not (tmp_path / "out.partial").exists()


def test_an_agent_of_other_observations_is_refused(tmp_path):
    file = agent_file(tmp_path / "wide.pt", args={**ARGS, "in_channels": 7})
    with pytest.raises(AgentPolicyError, match=r"shape \(7, 10, 10\).*\(4, 10, 10\)"):
        collect_with_agent(file, GAME, 10, tmp_path / "out")


def test_an_atari_agent_collects_ram_in_its_own_env(tmp_path):
    pytest.importorskip("ale_py")
    file = agent_file(
        tmp_path / "pong.pt", game="Pong", args={"encoder": "nature", "num_actions": 6}
    )
    store = collect_with_agent(file, "pong", 40, tmp_path / "pong", progress=False)
    assert store.has_ram and store.manifest.env_protocol == "dopamine"
    assert store.manifest.params["policy"]["game"] == "Pong"
    with pytest.raises(AgentPolicyError, match="played the 'dopamine' env"):
        collect_with_agent(file, "pong", 10, tmp_path / "x", env_protocol_name="rlpyt")


def test_the_command_line_collects_with_an_agent_and_refuses_its_options_elsewhere(
    tmp_path, capsys
):
    file = agent_file(tmp_path / "fav2.pt", favourite=2)
    out = tmp_path / "store"
    argv = ["collect", "agent", "--agent", str(file), "--game", GAME, "--steps", "60"]
    assert main([*argv, "--eps", "0", "--seed", "4", "--out", str(out), "--no-progress"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["source"] == "agent" and printed["policy"]["eps"] == 0.0
    assert set(TransitionStore(out).actions.tolist()) == {2}
    random = ["collect", "random", "--game", GAME, "--steps", "10", "--out", str(tmp_path / "r")]
    assert main([*random, "--eps", "0.1"]) == 2
    assert "--eps: an option of `collect agent`" in capsys.readouterr().err
    assert main(["collect", "agent", "--game", GAME, "--steps", "10", "--out", str(out)]) == 2
    assert "give --agent" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
