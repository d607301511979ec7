"""Memory of a finetuning population, per agent: networks and optimizer state, replay, and the
activations of one update; and the largest population that fits a given memory.

    python benchmarks/population_memory.py                       # Nature and ResNet, this CPU
    python benchmarks/population_memory.py --device cuda         # the same on a GPU
    python benchmarks/population_memory.py --agents 1 2 4 --budget-gb 24 80

State is counted from the tensors a population holds (online parameters and buffers, the SPR
target, Adam's two moments; a separate Q target when configured). The replay is what
`sgi_lab.data.replay.PrioritizedReplay` allocates for 100k steps (84x84 uint8 frames plus
per-row arrays and the sum tree). Activations are measured, each population size in its own process: on CUDA the peak
allocated memory of one update above the state; on a CPU the growth of resident memory over
three updates; the slope per agent over the sizes is the figure reported.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from sgi_lab.config import FinetuneConfig, to_dict
from sgi_lab.data.replay import PrioritizedReplay

FULL_RUN_STEPS = 100_000


def state_bytes(learner) -> dict[str, float]:
    pop = learner.population
    n = pop.size

    def total(tensors) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    online = total(pop.online.values())
    target = total(pop.spr_target.values())
    q_target = total(pop.q_target.values()) if pop.q_target is not None else 0
    adam = 2 * total(pop.trainable())
    return {
        "networks_mb_per_agent": (online + target + q_target) / n / 1e6,
        "adam_mb_per_agent": adam / n / 1e6,
    }


def replay_bytes(steps: int = FULL_RUN_STEPS) -> float:
    replay = PrioritizedReplay(steps, K=5, n_step=10)
    arrays = [
        replay.frames,
        replay.actions,
        replay.rewards,
        replay.terminals,
        replay.firsts,
        replay.row_episode_start,
        replay._episode_of_row,
        replay.tree.tree,
    ]
    return sum(a.nbytes for a in arrays) / 1e6


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1e3
    return float("nan")


CHILD = """
import json, sys, torch
sys.path.insert(0, "benchmarks")
torch.set_num_threads(1)
from finetune_speed import Learner
from population_memory import rss_mb
from sgi_lab.config import FinetuneConfig
learner = Learner(FinetuneConfig(encoder={encoder!r}, steps=4_000, device={device!r},
                                 cpu_amp=False), {agents}, rows=600)
if {device!r}.startswith("cuda"):
    learner.step()
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    learner.step(); torch.cuda.synchronize()
    print(json.dumps((torch.cuda.max_memory_allocated() - base) / 1e6))
else:
    base = rss_mb()
    for _ in range(3):
        learner.step()
    print(json.dumps(rss_mb() - base))
"""


def activations_mb(encoder: str, agents: list[int], device: str) -> dict[int, float]:
    """Memory one update adds above the population's state, each size in a fresh process (on a
    CPU: resident memory after three updates minus before, i.e. the activations plus the heap
    the allocator keeps for the next update, `sgi_lab.runtime.device.keep_freed_memory`)."""
    import subprocess
    import sys

    out = {}
    for n in agents:
        code = CHILD.format(encoder=encoder, device=device, agents=n)
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        out[n] = float(json.loads(result.stdout.strip().splitlines()[-1]))
    return out


def main() -> None:
    import sys

    sys.path.insert(0, "benchmarks")
    from finetune_speed import Learner

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoders", nargs="+", default=["nature", "resnet"])
    parser.add_argument("--agents", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--budget-gb", nargs="+", type=float, default=[24.0, 80.0])
    args = parser.parse_args()
    torch.set_num_threads(1)
    replay = replay_bytes()
    results = []
    for encoder in args.encoders:
        config = FinetuneConfig(encoder=encoder, steps=4_000, device=args.device)
        learner = Learner(FinetuneConfig(**to_dict(config)), 2, rows=200)
        state = state_bytes(learner)
        del learner
        act = activations_mb(encoder, args.agents, args.device)
        sizes = sorted(act)
        slope = (
            float(np.polyfit(sizes, [act[n] for n in sizes], 1)[0]) if len(sizes) > 1 else act[1]
        )
        per_agent = replay + state["networks_mb_per_agent"] + state["adam_mb_per_agent"]
        per_agent += max(slope, 0.0)
        row = {
            "encoder": encoder,
            "device": args.device,
            "replay_mb_per_agent": replay,
            **state,
            "update_activations_mb": act,
            "activations_mb_per_agent": slope,
            "total_mb_per_agent": per_agent,
            "largest_population": {
                f"{gb:g}GB": int(gb * 1e3 * 0.9 // per_agent) for gb in args.budget_gb
            },
        }
        results.append(row)
        print(json.dumps(row))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
