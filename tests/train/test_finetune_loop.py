"""The finetuning loop with the environments overlapped with the learner (``env_overlap``): the
serial loop with the store moved after the learn step, bit for bit; and the update period
(``update_every``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import sgi_lab.train.finetune_loop as loop
from sgi_lab.config import FinetuneConfig
from sgi_lab.envs.pool import EnvPool
from sgi_lab.runs.checkpoints import load_checkpoint
from sgi_lab.train.finetune import finetune
from sgi_lab.train.update import learn

pytest.importorskip("minatar")
pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {
    "game": "minatar/breakout",
    "encoder": "minatar",
    "hidden_size": 32,
    "steps": 60,
    "batch_size": 8,
    "updates_per_step": 2,
    "spr_steps": 2,
    "n_step": 3,
    "learning_starts": 25,
    "eps_steps": 26,
    "eval_episodes": 1,
    "eval_envs": 1,
    "log_every": 10,
    "checkpoint_every": 60,
    "seed": 4,
    # fixed: "auto" times both on this machine, and the layouts' sums differ in the last bit
    "channels_last": False,
    "cpu_amp": False,
}
TIMING = ("charts/sps", "charts/ups", "time")


class SerialPool(EnvPool):
    """The environments stepped to the end when the actions are sent: with the overlapped
    loop's order (send, learn, receive, store) this is the serial loop, act -> step -> learn ->
    store, i.e. the serial loop with the store after the learn step."""

    def send(self, actions, active=None):
        super().send(actions, active)
        self._played = super().receive()

    def receive(self, observations=True):
        return self._played


def run(tmp_path, name, monkeypatch, pool=EnvPool, **overrides):
    """A finetuning run's learn calls (step, transitions stored when it learned), its final
    checkpoint and its metrics rows without timings."""
    seen = []

    def spy_learn(population, replay, beta):
        seen.append((population.updates, replay.size))
        return learn(population, replay, beta)

    monkeypatch.setattr(loop, "learn", spy_learn)
    monkeypatch.setattr(loop, "EnvPool", pool)
    out = finetune(FinetuneConfig(**{**TINY, **overrides}), tmp_path / name, progress=False)
    rows = [json.loads(line) for line in (out.path / "metrics.jsonl").read_text().splitlines()]
    rows = [{k: v for k, v in r.items() if k not in TIMING} for r in rows]
    checkpoint = load_checkpoint(out.checkpoints()[-1], "cpu", kind="finetune")
    checkpoint.pop("config")
    return seen, checkpoint, rows


def assert_same(a, b, where="checkpoint"):
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, where


def test_the_overlapped_loop_is_the_serial_loop_with_the_store_after_the_learn_step(
    tmp_path, monkeypatch
):
    """With a worker playing while the learner updates, every update sees the replay one
    transition short (the one being played) and nothing else differs from the serial loop run
    in that order: same transitions, replay (contents, priorities), weights, Adam moments,
    random streams and metrics."""
    options = {"env_overlap": True, "env_workers": 1}
    overlapped = run(tmp_path, "overlap", monkeypatch, **options)
    serial_lagged = run(tmp_path, "serial", monkeypatch, pool=SerialPool, **options)
    seen = overlapped[0]
    # 35 steps from learning_starts (25..59 stored before their updates), 2 updates each;
    # updates of step t (counted after it) see t - 1 transitions.
    assert len(seen) == 2 * (TINY["steps"] - TINY["learning_starts"] + 1)
    assert [size for _, size in seen] == [
        t - 1 for t in range(TINY["learning_starts"], TINY["steps"] + 1) for _ in range(2)
    ]
    assert seen == serial_lagged[0]
    assert_same(overlapped[1], serial_lagged[1])
    assert overlapped[2] == serial_lagged[2]


def test_the_serial_loop_learns_from_the_newest_transition_and_the_lag_changes_only_that(
    tmp_path, monkeypatch
):
    """Off (the default), step t's updates see its own transition; with the lag the same
    updates at the same steps see one fewer, and until learning starts the two loops play the
    same episodes (no update: nothing to lag)."""
    seen, checkpoint, rows = run(tmp_path, "off", monkeypatch)
    lagged_seen, lagged, lagged_rows = run(tmp_path, "on", monkeypatch, env_overlap=True)
    assert [size for _, size in seen] == [size + 1 for _, size in lagged_seen]
    assert [u for u, _ in seen] == [u for u, _ in lagged_seen]
    assert checkpoint["updates"] == lagged["updates"] == len(seen)
    before = [r for r in rows if r["step"] < TINY["learning_starts"]]
    assert before and before == [r for r in lagged_rows if r["step"] < TINY["learning_starts"]]
    # The learner's inputs differ from the first update on, so the weights do.
    model, lagged_model = checkpoint["model"], lagged["model"]
    assert any(not torch.equal(model[k], lagged_model[k]) for k in model)


def test_updates_are_taken_on_every_update_every_th_step(tmp_path, monkeypatch):
    """``update_every: 4`` (DQN's update period): the step's two updates on steps 28, 32, ..., 60
    only (counted after the step, from learning_starts 25), each seeing that step's own
    transition; the acting before learning starts is the every-step run's."""
    seen, checkpoint, rows = run(tmp_path, "every4", monkeypatch, update_every=4)
    steps = [t for t in range(TINY["learning_starts"], TINY["steps"] + 1) if t % 4 == 0]
    assert [size for _, size in seen] == [t for t in steps for _ in range(2)]
    assert checkpoint["updates"] == len(seen) == 2 * len(steps)
    every = run(tmp_path, "every1", monkeypatch)
    assert len(every[0]) == 2 * (TINY["steps"] - TINY["learning_starts"] + 1)
    before = [r for r in rows if r["step"] < TINY["learning_starts"]]
    assert before and before == [r for r in every[2] if r["step"] < TINY["learning_starts"]]


@pytest.mark.smoke
def test_the_overlap_benchmark_times_both_loops_in_interleaved_rounds(tmp_path, monkeypatch):
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import env_overlap

    out = tmp_path / "overlap.json"
    argv = ["env_overlap.py", "--small", "--seeds", "0", "--rounds", "2", "--steps", "3"]
    monkeypatch.setattr(sys, "argv", [*argv, "--learning-starts", "30", "--json", str(out)])
    env_overlap.main()
    result = json.loads(out.read_text())
    assert result["agents"] == 2 and result["workers"] == 1 and len(result["rounds"]) == 2
    for r in result["rounds"]:
        assert r["ratio"] == pytest.approx(r["serial_ms"] / r["overlapped_ms"])
    assert result["pool_step_alone_ms"] > 0 and result["cpu"]
