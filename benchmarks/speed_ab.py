"""Interleaved before/after timing of a training step: this checkout against a git ref.

    python benchmarks/speed_ab.py --base 8032bc1 --rounds 4                  # finetuning update
    python benchmarks/speed_ab.py --base HEAD~1 --job pretrain --encoders resnet --steps 5
    python benchmarks/speed_ab.py --base HEAD --job learn --encoders minatar --now-lean --clock cpu --threads 1

On a shared VM whose speed drifts by tens of percent from one minute to the next, two timings
taken minutes apart compare machine states, not code. This script checks the base ref out into a
temporary git worktree and, round after round, times the base's and this checkout's update in
fresh processes one right after the other, alternating which goes first (each process imports
its own ``sgi_lab`` through PYTHONPATH), so each round compares the two versions on the same
machine state. It prints, per round and version, the fastest and the median step, and the
per-round ratio of medians.

Jobs: ``learn`` times `sgi_lab.train.update.learn_step` of a vmap'd population of ``--agents``
(batch 32, `benchmarks/learn_ops.py`'s random replay; ``--encoders minatar nature``);
``finetune`` times one update of a population of one (`sgi_lab.train.population.Population`; `train_step` in versions before it) (batch 32, RL + SPR with K = 5,
from a replay of real Pong transitions); ``pretrain`` times `sgi_lab.train.pretrain_step.train_step`
(batch 256, all three objectives, the synthetic batch of ``pretrain_speed.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run inside each version's checkout: time the step of that version's own code.
CHILD = """
import json, statistics, sys, time
import torch
sys.path.insert(0, "benchmarks")
torch.set_num_threads({threads})
import sgi_lab
{setup}
for _ in range(3):
    step()
times = []
for _ in range({steps}):
    start = time.{clock}()
    step()
    times.append(time.{clock}() - start)
print(json.dumps({{"sgi_lab": sgi_lab.__file__, "min": min(times), "median": statistics.median(times)}}))
"""

SETUP = {
    "finetune": """
from sgi_lab.config import FinetuneConfig
import finetune_speed as fs
config = FinetuneConfig(encoder="{encoder}", steps=4_000, device="cpu", cpu_amp=True,
                        channels_last=True)  # the same explicit settings in every version
if hasattr(fs, "Learner"):  # the population learner
    learner = fs.Learner(config, rows=1_500)
    batches = iter([learner.sample() for _ in range({steps} + 3)])
    step = lambda: learner.step(next(batches))
else:  # versions before it: one agent and train_step
    from sgi_lab.train.finetune import train_step
    agent = fs.filled_agent(config, rows=1_500)
    batches = iter([agent.replay.sample(32, 0.4) for _ in range({steps} + 3)])
    step = lambda: train_step(agent, *next(batches))
""",
    "pretrain": """
from types import SimpleNamespace
from pretrain_speed import NUM_ACTIONS, make_config, synthetic_batch
try:  # the step's own module and typed batch (since 1dde72c, 2026-11-25)
    from sgi_lab.train.pretrain_step import PretrainBatch, build_state, train_step
except ImportError:  # versions before it: the step in pretrain.py, a dict batch
    from sgi_lab.train.pretrain import build_state, train_step
    PretrainBatch = lambda **batch: batch
args = SimpleNamespace(device="cpu", no_channels_last=False, fp32=False, target_bn="batch", no_cuda_graphs=False)
config = make_config("{encoder}", 256, args)
state = build_state(config, NUM_ACTIONS, torch.device("cpu"))
state.model.train()
state.target.train()
batch = PretrainBatch(**synthetic_batch(256))
step = lambda: train_step(config, state, batch)["losses/total"].item()
""",
    "learn": """
import learn_ops
from sgi_lab.train.update import learn_step
# a vmap'd population of {agents} agents (learn_ops.build: random rows, as on a GPU) with the
# CPU's own settings: host checks on, the replay's tree sampling
pop, replay = learn_ops.build("{encoder}", {agents}, 32, "tree", 600)
pop.host_checks = replay.tree.host_checks = True
{lean}
replay.set_beta(0.4)
step = lambda: learn_step(pop, replay)
""",
}

CPU_PATH = (
    "vars(pop).pop(\"lean_kernels\", None)  # the CPU's own path (learn_ops.build sets a GPU's)"
)
LEAN = "pop.lean_kernels = True  # the GPU's lean kernels (sgi_lab.nets.agent_axis)"


def time_version(
    checkout: Path,
    job: str,
    encoder: str,
    steps: int,
    threads: int,
    clock: str = "wall",
    agents: int = 16,
    lean: bool = False,
) -> dict:
    path = LEAN if lean else CPU_PATH
    setup = SETUP[job].format(encoder=encoder, steps=steps, agents=agents, lean=path)
    timer = {"wall": "perf_counter", "cpu": "process_time"}[clock]
    code = CHILD.format(setup=setup, steps=steps, threads=threads, clock=timer)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=checkout, env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"timing {checkout} failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["sgi_lab"].startswith(str(checkout)):  # the editable install won instead
        raise RuntimeError(f"{checkout} imported sgi_lab from {result['sgi_lab']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git ref to compare against")
    parser.add_argument("--encoders", nargs="+", default=["nature", "resnet"])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--job", choices=sorted(SETUP), default="finetune")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per process")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--agents", type=int, default=16, help="population size (job learn)")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: the process's CPU time per step (use --threads 1), which other jobs on a "
        "shared machine disturb far less than the wall clock",
    )
    parser.add_argument(
        "--now-lean",
        action="store_true",
        help="job learn: this checkout takes the lean kernels (a GPU's path); with --base HEAD, "
        "the CPU's path against the lean one in one checkout",
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(base), args.base], cwd=ROOT, check=True
        )
        try:
            for round_ in range(1, args.rounds + 1):
                for encoder in args.encoders:
                    row = {"round": round_, "job": args.job, "encoder": encoder}
                    versions = [("base", base), ("now", ROOT)]
                    if round_ % 2 == 0:  # alternate which goes first
                        versions.reverse()
                    for name, checkout in versions:
                        timing = time_version(
                            checkout,
                            args.job,
                            encoder,
                            args.steps,
                            args.threads,
                            args.clock,
                            args.agents,
                            lean=args.now_lean and name == "now",
                        )
                        row[f"{name}_min_s"] = round(timing["min"], 4)
                        row[f"{name}_median_s"] = round(timing["median"], 4)
                    row["median_ratio"] = round(row["now_median_s"] / row["base_median_s"], 3)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT)
    for encoder in args.encoders:
        mine = [r for r in rows if r["encoder"] == encoder]
        summary = {
            "encoder": encoder,
            "base_fastest_s": min(r["base_min_s"] for r in mine),
            "now_fastest_s": min(r["now_min_s"] for r in mine),
            "median_ratios": [r["median_ratio"] for r in mine],
        }
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
