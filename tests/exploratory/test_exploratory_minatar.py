"""Exploratory (IDF curiosity) collection on MinAtar: networks sized from the
observation spec, an ordinary store with the game's (C, 10, 10) spec, its ``minatar`` protocol
and its own state as labels, aligned with the frames the agent saw; bad combinations refused in
one line before anything is created."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from sgi_lab.config import ExploreConfig, load_config
from sgi_lab.data import TransitionStore
from sgi_lab.exploratory.collector import collect_exploratory
from sgi_lab.exploratory.networks import IDFModel, PolicyNet, small_convnet
from sgi_lab.runs.folder import RunDir

pytest.importorskip("minatar")

SMOKE = load_config(ExploreConfig, "params/collect/exploratory_smoke.yaml", {"threads": 1})


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny networks on a shared 2-core machine run faster on one torch thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_networks_size_themselves_from_the_observation():
    # Atari keeps Burda et al.'s net: 8/4/3 kernels, strides 4/2/1 -> 64x7x7 = 3,136 features.
    atari = small_convnet(32, 512)
    assert [m.kernel_size[0] for m in atari if isinstance(m, torch.nn.Conv2d)] == [8, 4, 3]
    assert atari[-1].in_features == 64 * 7 * 7
    # A 10x10 grid: three 3x3 stride-1 convs, 10 -> 8 -> 6 -> 4: 64x4x4 = 1,024 features.
    grid = small_convnet(32, 512, (4, 10, 10))
    assert [m.stride[0] for m in grid if isinstance(m, torch.nn.Conv2d)] == [1, 1, 1]
    assert grid[0].in_channels == 4 and grid[-1].in_features == 64 * 4 * 4
    assert grid(torch.zeros(3, 4, 10, 10)).shape == (3, 512)
    # Seaquest's 10 channels; 36 pixels is the smallest side Burda's kernels leave a cell of.
    assert small_convnet(8, 16, (10, 10, 10))[0].in_channels == 10
    assert small_convnet(8, 16, (4, 36, 36))[-1].in_features == 16 * 1 * 1
    with pytest.raises(ValueError, match=r"^observation shape \(4, 6, 6\): too small"):
        small_convnet(8, 16, (4, 6, 6))
    config = ExploreConfig(conv_width=4, feature_dim=16, hidden_size=16, forward_blocks=1)
    logits, values = PolicyNet(3, config, (4, 10, 10))(torch.zeros(5, 4, 10, 10))
    assert logits.shape == (5, 3) and values.shape == (5,)
    inverse, forward = IDFModel(3, config, (4, 10, 10)).sequence_losses(
        torch.zeros(3, 2, 4, 10, 10), torch.zeros(2, 2, dtype=torch.int64)
    )
    assert inverse.shape == forward.shape == (4,)


def test_minatar_params_file_is_burdas_with_envs_in_process():
    from sgi_lab.launch.cli import build_parser
    from sgi_lab.launch.collect_exploratory import explore_config

    minatar = load_config(ExploreConfig, "params/collect/exploratory_minatar.yaml")
    assert minatar == dataclasses.replace(ExploreConfig(), asynchronous=False)
    # The command line's default for a MinAtar game; Atari's stays Burda's own.
    argv = ["collect", "exploratory", "--steps", "1", "--out", "x", "--game"]
    assert explore_config(build_parser().parse_args([*argv, "minatar/breakout"])) == minatar
    assert explore_config(build_parser().parse_args([*argv, "pong"])) == ExploreConfig()


def test_minatar_exploratory_store_has_the_games_spec_and_labels(tmp_path):
    seen: list[list[np.ndarray]] = [[] for _ in range(SMOKE.num_envs)]

    def record(obs, actions):
        assert obs.shape == (SMOKE.num_envs, 4, 10, 10)
        for i, o in enumerate(obs):
            seen[i].append(o.copy())

    store = collect_exploratory(
        "MinAtar-Breakout",
        400,
        tmp_path / "e",
        seed=1,
        config=SMOKE,
        progress=False,
        on_step=record,
    )
    m = store.manifest
    assert (m.game, m.source, m.env_protocol) == ("minatar/breakout", "exploratory", "minatar")
    assert store.observation_spec.stacked_shape == (4, 10, 10) and store.frame_shape == (4, 10, 10)
    assert m.sticky_action_prob == 0.1 and m.params["difficulty_ramping"] is True
    assert m.num_actions == 3 and len(store) == 400 and not store.has_ram
    assert m.label_names == ["paddle_x", "ball_x", "ball_y", "ball_dir", "bricks"]
    frames = store.stack(np.arange(len(store)))
    assert set(np.unique(frames)) <= {0, 255}
    # Every store row is one of the observations the agent acted on (whole env streams).
    acted = {o.tobytes() for stream in seen for o in stream}
    assert all(f.tobytes() in acted for f in frames)
    assert store.num_episodes == int(store.firsts.sum()) >= SMOKE.num_envs
    # The labels are the state behind the row's frame: Breakout's paddle on channel 0 of the
    # bottom row, the ball on channel 1, as MinAtar draws them.
    labels = store.gather_labels(np.arange(len(store)))
    names = m.label_names
    for frame, row in zip(frames, labels, strict=True):
        state = dict(zip(names, row.tolist(), strict=True))
        assert frame[0, 9, state["paddle_x"]] == 255
        assert frame[1, state["ball_y"], state["ball_x"]] == 255
        assert int(frame[3].sum()) // 255 == state["bricks"]
    # The agent is an ordinary finished run inside the store.
    run = RunDir(store.path / "agent", create=False)
    assert run.status()["state"] == "finished" and run.saved_config()["game"] == "minatar/breakout"


def test_interrupted_minatar_collection_resumes_in_its_protocol(tmp_path):
    config = dataclasses.replace(SMOKE, chunk_size=64, rollout_steps=16)
    out = tmp_path / "e"

    def interrupt(metrics):
        if metrics["update"] == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        collect_exploratory("minatar/breakout", 600, out, config=config, progress=False,
                            on_update=interrupt)  # fmt: skip
    partial = json.loads((tmp_path / "e.partial" / "manifest.json").read_text())
    assert partial["env_protocol"] == "minatar" and partial["num_transitions"] >= 64
    store = collect_exploratory("minatar/breakout", 600, out, config=config, progress=False)
    assert len(store) == 600 and store.manifest.env_protocol == "minatar"
    frames, labels = store.stack(np.arange(600)), store.gather_labels(np.arange(600))
    paddle = labels[:, store.manifest.label_names.index("paddle_x")]
    assert (frames[np.arange(600), 0, 9, paddle] == 255).all()  # still the state behind each row


def test_bad_minatar_combinations_are_refused_before_anything_is_made(tmp_path, capsys):
    from sgi_lab.launch.cli import main

    out = tmp_path / "e"
    bad = ExploreConfig(**{**SMOKE.__dict__, "max_episode_frames": 400})
    with pytest.raises(ValueError, match=r"^max_episode_frames: 400 is an Atari setting"):
        collect_exploratory("minatar/breakout", 100, out, config=bad, progress=False)
    assert not out.exists() and not out.with_name("e.partial").exists()
    argv = ["collect", "exploratory", "--steps", "100", "--out", str(out), "--no-progress"]
    argv += ["--params", "params/collect/exploratory_smoke.yaml"]
    assert main([*argv, "--game", "minatar/breakot"]) == 2
    assert "did you mean" in capsys.readouterr().err
    assert main([*argv, "--game", "minatar/breakout", "--set", "max_episode_frames=400"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_episode_frames: 400 is an Atari setting" in err[0]
    assert main([*argv, "--game", "minatar/breakout", "--env-protocol", "rlpyt"]) == 2
    assert "--env-protocol rlpyt" in capsys.readouterr().err
    assert not out.exists() and not out.with_name("e.partial").exists()


@pytest.mark.smoke
def test_cli_collect_exploratory_minatar(tmp_path, capsys):
    from sgi_lab.launch.cli import main

    out = tmp_path / "e"
    argv = ["collect", "exploratory", "--game", "minatar/breakout", "--steps", "300"]
    argv += ["--envs", "2", "--params", "params/collect/exploratory_smoke.yaml"]
    rc = main([*argv, "--set", "threads=1", "--seed", "3", "--out", str(out), "--no-progress"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["transitions"] == 300 and summary["source"] == "exploratory"
    assert summary["env_protocol"] == "minatar" and summary["observation"]["channels"] == 4
    store = TransitionStore(out)
    assert store.manifest.params["num_envs"] == 2 and store.observation_spec.height == 10
