"""An agent's whole replay as a store: a tiny MinAtar finetuning run exported (`sgi-lab export
replay`) row for row against its last checkpoint's replay, the making agent's record in the
manifest, the store verified and pretrained on; and the refusals (an unfinished run, a run
without checkpoints, another run's store at OUT)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from sgi_lab.base.files import read_jsonl
from sgi_lab.config import FinetuneConfig, build_config
from sgi_lab.data.replay_export import commit_history, config_sha256, export_replay, learning_curve
from sgi_lab.data.sampler import SequenceSampler
from sgi_lab.data.store_format import StoreError, StoreFolderError
from sgi_lab.launch.cli import main
from sgi_lab.runs.status import UnfinishedRunError
from sgi_lab.train import finetune as ft

pytest.importorskip("minatar")
pytestmark = pytest.mark.usefixtures("one_thread")

AGENT = {
    "game": "minatar/breakout",
    "encoder": "minatar",
    "hidden_size": 32,
    "ssl": "none",
    "steps": 150,
    "batch_size": 8,
    "updates_per_step": 1,
    "n_step": 3,
    "learning_starts": 60,
    "eps_steps": 61,
    "eval_episodes": 2,
    "eval_envs": 2,
    "log_every": 50,
    "checkpoint_every": 60,
    "seed": 5,
}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished 150-step MinAtar Breakout agent, checkpointed at 60, 120 and 150."""
    out = tmp_path_factory.mktemp("agent") / "run"
    with torch.random.fork_rng():
        ft.finetune(build_config(FinetuneConfig, AGENT), out, progress=False)
    return out


def _last_replay(run: Path) -> dict:
    return torch.load(run / "checkpoints" / "ckpt_00000150.pt", weights_only=True)["replay"]


def test_export_replay_is_the_checkpoints_replay_bit_for_bit(run, tmp_path):
    store = export_replay(run, tmp_path / "replay", chunk_size=64)
    replay = _last_replay(run)
    assert len(store) == replay["size"] == 150 and store.manifest.chunks == [64, 64, 22]
    rows = np.arange(150)
    assert np.array_equal(store.gather_frames(rows), replay["frames"].numpy())
    assert store.gather_frames(rows).shape == (150, 4, 10, 10)
    assert np.array_equal(store.actions, replay["actions"].numpy())
    assert np.array_equal(store.rewards, replay["rewards"].numpy())
    assert store.rewards.dtype == np.float32
    assert np.array_equal(store.terminals, replay["terminals"].numpy())
    assert np.array_equal(store.firsts, replay["firsts"].numpy())
    assert store.verify() == []
    m = store.manifest
    assert (m.source, m.game, m.env_protocol, m.sticky_action_prob) == (
        "replay", "minatar/breakout", "minatar", 0.1
    )  # fmt: skip
    assert m.num_actions == 3 and store.observation_spec.stacked_shape == (4, 10, 10)


def test_the_manifest_records_the_making_agent_and_its_curve(run, tmp_path):
    store = export_replay(run, tmp_path / "replay")
    p = store.manifest.params
    config = torch.load(run / "checkpoints" / "ckpt_00000150.pt", weights_only=True)["config"]
    evaluation = json.loads((run / "eval.json").read_text())
    assert p["run"] == "run" and p["steps"] == 150 and p["seed"] == 5
    assert p["config_sha256"] == config_sha256(config) and p["config"]["ssl"] == "none"
    assert p["final_evaluation"]["mean"] == evaluation["mean"]
    assert p["final_evaluation"]["episodes"] == 2
    assert p["checkpoints"] == [60, 120, 150] and p["resumed_at"] == []
    commit = json.loads((run / "status.json").read_text())["provenance"][0].get("commit")
    assert p["commits"] == ([{"commit": commit, "from_step": 0}] if commit else [])
    assert p["terminal_on_life_loss"] is False
    episodes = [r for r in read_jsonl(run / "metrics.jsonl") if "episode/return" in r]
    assert [c["step"] for c in p["curve"]] == [60, 120, 150]
    assert sum(c["episodes"] for c in p["curve"]) == len(episodes)
    # the agent's training episodes are the store's: each episode that ended, with its return
    store_returns = np.add.reduceat(store.rewards, store.episode_starts)
    assert [r["episode/return"] for r in episodes] == pytest.approx(
        store_returns[: len(episodes)].tolist()
    )


def test_the_commits_a_run_trained_on_are_listed_in_order_with_where_each_took_over():
    provenance = [{"step": 0, "commit": "a"}, {"step": 100, "commit": "a"},
                  {"step": 200, "commit": "b"}, {"step": 300}]  # fmt: skip
    assert commit_history({"provenance": provenance}) == [
        {"commit": "a", "from_step": 0},
        {"commit": "b", "from_step": 200},
    ]
    assert commit_history({}) == []


def test_learning_curve_by_hand():
    rows = [
        {"step": 3, "episode/return": 1.0, "episode/length": 3},
        {"step": 10, "losses/total": 0.5},
        {"step": 10, "episode/return": 3.0, "episode/length": 7},
        {"step": 25, "episode/return": 0.0, "episode/length": 15},
    ]
    assert learning_curve(rows, [10, 20, 30]) == [
        {"step": 10, "episodes": 2, "mean_return": 2.0, "mean_length": 5.0},
        {"step": 20, "episodes": 0, "mean_return": None, "mean_length": None},
        {"step": 30, "episodes": 1, "mean_return": 0.0, "mean_length": 15.0},
    ]


def test_cli_export_is_idempotent_and_the_store_pretrains(run, tmp_path, capsys):
    out = tmp_path / "replay"
    assert main(["export", "replay", str(run), str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["transitions"] == 150
    manifest = (out / "manifest.json").read_bytes()
    assert main(["export", "replay", str(run), str(out)]) == 0  # the same run: untouched
    assert (out / "manifest.json").read_bytes() == manifest
    sampler = SequenceSampler(export_replay(run, out), batch_size=8, K=3, n_step=3, goal_window=10)
    batch = sampler.sample()
    assert batch.obs.shape == (8, 4, 4, 10, 10)
    pretrained = tmp_path / "pretrain"
    sets = ["encoder=minatar", "hidden_size=32", "steps=3", "batch_size=8", "spr_steps=3",
            "n_step=3", "goal_window=10", "log_every=1", "checkpoint_every=3", "prefetch=0"]  # fmt: skip
    argv = ["pretrain", "--params", "params/pretrain/minatar_sgi.yaml", "--data", str(out)]
    argv += [x for s in sets for x in ("--set", s)]
    assert main([*argv, "--out", str(pretrained), "--no-progress"]) == 0
    assert json.loads((pretrained / "status.json").read_text())["state"] == "finished"


def test_refusals(run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(run, other)
    export_replay(other, tmp_path / "replay")
    with pytest.raises(StoreFolderError, match="other settings"):
        export_replay(run, tmp_path / "replay")  # another run's store at OUT
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(StoreFolderError, match="not an sgi-lab store"):
        export_replay(run, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    for ckpt in (other / "checkpoints").iterdir():
        ckpt.unlink()
    with pytest.raises(StoreError, match="no checkpoints"):
        export_replay(other, tmp_path / "again")
    status = json.loads((other / "status.json").read_text())
    (other / "status.json").write_text(json.dumps({**status, "state": "running"}))
    with pytest.raises(UnfinishedRunError):
        export_replay(other, tmp_path / "again")
    with pytest.raises(FileNotFoundError):
        export_replay(tmp_path / "nowhere", tmp_path / "again")
