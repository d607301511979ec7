"""Kill -9 at random moments, re-run, and check: the work completes, nothing incomplete ever
opens as complete, and the result is bit-exact with an uninterrupted run (collect, pretrain).

Slow (about 2-4 minutes on 2 cores): ``pytest -m slow tests/runs/test_kill9.py -s`` prints figures.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import moving_dot_store

from sgi_lab.config import PretrainConfig, build_config
from sgi_lab.data import StoreError, TransitionStore
from sgi_lab.data.collect import collect_random
from sgi_lab.runs.checkpoints import load_checkpoint
from sgi_lab.runs.folder import RunDir
from sgi_lab.train.pretrain import pretrain

pytestmark = pytest.mark.slow
TRIALS = 4

COLLECT = """
import sys
from sgi_lab.data.collect import collect_random
collect_random("pong", 3000, sys.argv[1], seed=0, chunk_size=200, progress=False)
"""

PRETRAIN = """
import sys, torch
torch.set_num_threads(1)
from sgi_lab.config import PretrainConfig, build_config
from sgi_lab.train.pretrain import pretrain
config = build_config(PretrainConfig, dict(encoder="nature", batch_size=8, log_every=5,
    checkpoint_every=5, prefetch=0, steps=40, goal_weight=0.0))
pretrain(config, sys.argv[2], sys.argv[1], progress=False)
"""


def kill_at_random(code: str, args: list[str], ready, rng: random.Random, budget: float = 90):
    """Start ``code``, wait until ``ready()`` (some durable progress), then kill -9 it after a
    random extra delay; returns True when it was killed (False: it finished first)."""
    child = subprocess.Popen([sys.executable, "-c", code, *args])
    try:
        deadline = time.time() + budget
        while not ready() and child.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))
        if child.poll() is not None:
            return False
        child.send_signal(signal.SIGKILL)
        child.wait()
        return True
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_collect_killed_at_random_resumes_to_the_uninterrupted_store(tmp_path):
    rng = random.Random(0)
    reference = collect_random(
        "pong", 3000, tmp_path / "ref", seed=0, chunk_size=200, progress=False
    )
    killed = recovered = 0
    for trial in range(TRIALS):
        out = tmp_path / f"t{trial}"
        partial = tmp_path / f"t{trial}.partial"
        if kill_at_random(
            COLLECT, [str(out)], lambda p=partial: len(list(p.glob("chunks/frame_*.npy"))) >= 1, rng
        ):
            killed += 1
            with pytest.raises(StoreError):
                TransitionStore(out)  # nothing incomplete opens as complete
        store = collect_random("pong", 3000, out, seed=0, chunk_size=200, progress=False)
        assert not partial.exists() and store.verify() == []
        recovered += store.fingerprint == reference.fingerprint
    print(f"\ncollect: {TRIALS} trials, {killed} killed mid-run, {recovered} bit-exact")
    assert recovered == TRIALS and killed >= 1


def test_pretrain_killed_at_random_resumes_bit_exact(tmp_path):
    rng = random.Random(1)
    store = moving_dot_store(tmp_path / "dots", rows=800)
    config = build_config(
        PretrainConfig,
        dict(
            encoder="nature",
            batch_size=8,
            log_every=5,
            checkpoint_every=5,
            prefetch=0,
            steps=40,
            goal_weight=0.0,
        ),
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        reference = load_checkpoint(pretrain(config, store, tmp_path / "ref", progress=False))
        killed = recovered = 0
        for trial in range(TRIALS):
            out = tmp_path / f"t{trial}"
            if kill_at_random(
                PRETRAIN,
                [str(out), str(store.path)],
                lambda o=out: (
                    (o / "checkpoints").is_dir() and any((o / "checkpoints").glob("ckpt_*.pt"))
                ),
                rng,
            ):
                killed += 1
                assert not (out / "model.pt").exists() or RunDir(out).finished
                assert not RunDir(out).finished
            model = load_checkpoint(pretrain(config, store, out, progress=False))
            assert RunDir(out).finished
            assert not list(out.rglob(".*.tmp"))  # crash litter cleaned
            same = all(
                torch.equal(reference["model"][k], model["model"][k]) for k in model["model"]
            )
            recovered += same
    finally:
        torch.set_num_threads(threads)
    print(f"\npretrain: {TRIALS} trials, {killed} killed mid-run, {recovered} bit-exact")
    assert recovered == TRIALS and killed >= 1


FINETUNE = """
import sys, torch
torch.set_num_threads(1)
from sgi_lab.config import FinetuneConfig, build_config
from sgi_lab.train.finetune import finetune_population, population_configs, population_folders
base = build_config(FinetuneConfig, dict(encoder="nature", batch_size=4, updates_per_step=1,
    spr_steps=2, n_step=3, steps=80, learning_starts=20, eps_steps=21, log_every=10,
    checkpoint_every=10, eval_episodes=1, eval_envs=1, eval_max_frames=100, cpu_amp=False))
configs = population_configs(base, ["Pong", "Breakout"], [0])
finetune_population(configs, population_folders(sys.argv[1], configs), progress=False)
"""


def test_finetune_population_killed_at_random_resumes_and_finishes(tmp_path):
    """Two agents killed -9 during training (or evaluation), re-run: both finish, metrics
    never repeat a step, no temp file is left, and a killed run never reads as finished."""
    from sgi_lab.base.files import read_jsonl
    from sgi_lab.runs.folder import FinetuneRun
    from sgi_lab.train.finetune import finetune_population

    rng = random.Random(2)
    killed = recovered = 0
    for trial in range(TRIALS):
        root = tmp_path / f"t{trial}"
        folders = [root / "Pong__s0", root / "Breakout__s0"]
        ready = lambda f=folders[1]: len(list((f / "checkpoints").glob("ckpt_*.pt"))) >= 1  # noqa: E731
        if kill_at_random(FINETUNE, [str(root)], ready, rng):
            killed += 1
            assert not all(FinetuneRun(f).finished for f in folders)
        subprocess.run([sys.executable, "-c", FINETUNE, str(root)], check=True)
        for f in folders:
            run = FinetuneRun(f)
            assert run.finished and run.evaluation["step"] == 80
            steps = [r["step"] for r in read_jsonl(run.metrics_path)]
            assert steps == sorted(set(steps)) and steps[-1] == 80
            assert not list(f.rglob("*.tmp"))
        recovered += 1
    print(f"\\nfinetune population: {TRIALS} trials, {killed} killed, {recovered} recovered")
    assert recovered == TRIALS and killed >= 1
    del finetune_population
