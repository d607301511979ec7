"""Where a population's environment step goes, phase by phase, on any device.

One step of the finetuning loop (`sgi_lab.train.finetune`) for N agents is: act (one forward for
all agents, the actions to the host), step the environments, append the transitions to the
replay, sample a batch per agent, update, write the new priorities (the last three are one
`Population.learn`, one CUDA graph on a GPU). This script times each phase
on its own (synchronized before and after, so each figure is that phase's whole cost) and the
step as the loop runs it (one synchronization, at the actions), counts each phase's ATen
operators (views excluded: on a GPU each is a kernel launch, so the count times a launch's few
microseconds is the host's floor where nothing is captured), and on CUDA reads the GPU's busy
time from the profiler (utilisation = busy / wall).

The replay holds random frames (no emulator needed); the environments' phase steps the agents'
real games in an `sgi_lab.envs.pool.EnvPool` when ale-py is installed, with ``--env-workers``.

    python benchmarks/population_phases.py --device cuda --agents 1 4 26 --json phases.json
    python benchmarks/population_phases.py --agents 1 2 --batch-size 4 --steps 3   # CPU smoke

A step makes ``updates_per_step`` updates (2, SPR's replay ratio of 64 at batch 32), each with
its sample and priorities. The projected 100k-step wall-clock is (step + environments) x 100k;
it leaves out the final evaluation and the checkpoints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from sgi_lab.config import FinetuneConfig, build_config, read_params, to_dict
from sgi_lab.data.population_replay import PopulationReplay
from sgi_lab.envs.games import ATARI_100K_GAMES
from sgi_lab.nets import SGIModel
from sgi_lab.runtime.graphs import count_ops
from sgi_lab.train.acting import act
from sgi_lab.train.population import Population
from sgi_lab.train.precision import update_precision
from sgi_lab.train.transfer import model_args_for
from sgi_lab.train.update import learn, staged_batch, update

FULL_RUN_STEPS = 100_000


def action_counts(games: list[str]) -> list[int]:
    """Each game's minimal action set (ale-py); 18 for all when ale-py is missing."""
    try:
        from sgi_lab.envs import num_actions

        return [num_actions(g) for g in games]
    except Exception as error:  # noqa: BLE001  (ale-py missing on a bare GPU image)
        print(f"ale-py unavailable ({error}); every agent gets 18 actions", file=sys.stderr)
        return [18] * len(games)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> dict[str, float]:
    """Median and fastest wall-clock seconds of ``fn`` (synchronized), after one warm call."""
    fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "min_s": min(times)}


class Phases:
    """A population of N agents and a filled `PopulationReplay`; one method per loop phase."""

    def __init__(self, config: FinetuneConfig, agents: int, rows: int) -> None:
        games = [list(ATARI_100K_GAMES)[i % len(ATARI_100K_GAMES)] for i in range(agents)]
        self.games = games
        self.configs = [
            build_config(FinetuneConfig, {**to_dict(config), "game": g, "seed": i})
            for i, g in enumerate(games)
        ]
        self.actions = action_counts(games)
        models = []
        for c, a in zip(self.configs, self.actions, strict=True):
            torch.manual_seed(c.seed)
            models.append(SGIModel(**model_args_for(c, a)))
        self.population = Population.build(self.configs, models, loaded=(), device=config.device)
        self.device = self.population.device
        cfg = self.population.config
        self.replay = PopulationReplay(
            agents,
            rows + 1_000,
            alpha=cfg.priority_alpha,
            K=cfg.spr_steps if cfg.ssl != "none" else 0,
            n_step=cfg.n_step,
            gamma=cfg.gamma,
            seeds=[c.seed for c in self.configs],
            goal_window=cfg.goal_window if cfg.ssl == "all" else 0,
            device=self.device,
            reuse_buffers=self.device.type == "cpu",
            cuda_graphs=cfg.cuda_graphs,
        )
        self.rng = np.random.default_rng(0)
        self.agent_rngs = [np.random.default_rng(i) for i in range(agents)]
        self.obs = self.rng.integers(0, 255, (agents, 4, 84, 84), dtype=np.uint8)
        for t in range(rows):
            self.append(first=t == 0 or self.rng.random() < 0.002)
        self.batch = self.sample()
        self.priorities = self.update()[1]

    def act(self) -> np.ndarray:
        n = self.population.size
        return act(self.population, self.obs, [0.01] * n, self.agent_rngs)

    def append(self, first: bool = False) -> None:
        n = self.population.size
        self.replay.append(
            self.rng.integers(0, 255, (n, 84, 84), dtype=np.uint8),
            self.rng.integers(0, 4, n),
            self.rng.integers(-1, 2, n).astype(np.float32),
            self.rng.random(n) < 0.001,
            np.full(n, first),
        )

    def sample(self):  # noqa: ANN201
        return self.replay.sample(self.population.config.batch_size, 0.4)

    def update(self):  # noqa: ANN201
        pop = self.population
        return update(pop, staged_batch(self.batch, pop.config.ssl == "all"))

    def write_priorities(self) -> None:
        self.replay.update_priorities(self.batch.indices, self.priorities)

    def learn(self) -> None:
        """Sample, update and priorities as the loop runs them (`sgi_lab.train.update.learn`: one CUDA
        graph on a GPU)."""
        learn(self.population, self.replay, 0.4)

    def step(self) -> None:
        """The loop's step without the environments: act, append, then ``updates_per_step``
        learning steps."""
        self.act()
        self.append()
        for _ in range(self.population.config.updates_per_step):
            self.learn()


def bench_envs(games: list[str], workers: int, repeats: int) -> dict[str, float] | None:
    """Seconds per population step of the agents' real games (random actions), or None."""
    try:
        from sgi_lab.envs.pool import EnvPool
    except Exception:  # noqa: BLE001
        return None
    try:
        pool = EnvPool(games, list(range(len(games))), train=True, workers=workers)
    except Exception as error:  # noqa: BLE001  (ale-py or ROMs missing)
        print(f"environments unavailable: {error}", file=sys.stderr)
        return None
    try:
        pool.reset()
        rng = np.random.default_rng(0)
        counts = action_counts(games)

        def step() -> None:
            pool.step(np.array([rng.integers(0, a) for a in counts]))

        for _ in range(20):
            step()
        return timed(step, torch.device("cpu"), repeats)
    finally:
        pool.close()


def gpu_busy_fraction(fn: Callable[[], object], steps: int) -> float | None:
    """Sum of CUDA kernel time over wall time across ``steps`` calls (torch.profiler)."""
    if not torch.cuda.is_available():
        return None
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    busy_us = sum(e.self_device_time_total for e in prof.key_averages())
    return busy_us / 1e6 / wall


PRECISIONS = {"default": {}, "fp32": {"amp": False}, "tf32": {"amp": False}, "bf16": {"amp": True}}
"""``--precision``: the config's own, fp32 (TF32 off), TF32 matmuls and convolutions (amp off),
or bf16 (amp: autocast, or the cast under a vmap autocast does not reach)."""


def set_tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def kernel_table(fn: Callable[[], object], device: torch.device, top: int) -> dict:
    """One call's kernels: on CUDA the profiler's kernel launches (count, names); elsewhere the
    ATen operators a GPU would launch (`sgi_lab.runtime.graphs.count_ops`)."""
    if device.type != "cuda":
        ops = count_ops(fn)
        return {"launches": sum(ops.values()), "top": ops.most_common(top), "source": "aten"}
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
    kernels.sort(key=lambda e: e.count, reverse=True)
    return {
        "launches": sum(e.count for e in kernels),
        "top": [(e.key[:120], e.count, round(e.device_time_total, 1)) for e in kernels[:top]],
        "source": "cuda-profiler",
    }


def run(args: argparse.Namespace) -> list[dict]:
    base = read_params(args.params)["config"] if args.params else {}
    results = []
    cases = [
        (e, b, n, p)
        for e in args.encoders
        for b in args.batching
        for n in args.agents
        for p in args.precision
    ]
    for encoder, batching, n, precision in cases:
        config = build_config(
            FinetuneConfig,
            {
                **base,
                "encoder": encoder,
                "device": args.device,
                "batch_size": args.batch_size,
                "population_batching": batching,
                "cuda_graphs": not args.no_cuda_graphs,
                "pretrained": None,
                **PRECISIONS[precision],
            },
        )
        start = time.perf_counter()
        phases = Phases(config, n, args.rows)
        set_tf32(precision == "tf32")  # after the build: prepare_device sets the defaults
        dev = phases.device
        for _ in range(5):  # past the CUDA graph's capture
            phases.step()
        row = {
            "encoder": encoder,
            "agents": n,
            "batching": phases.population.batching,
            "device": str(dev),
            "bf16": phases.population.update_amp,
            "precision": update_precision(phases.population),
            "tf32": torch.backends.cuda.matmul.allow_tf32,
            "cuda_graph": phases.population.uses_cuda_graph,
            "batch_size": config.batch_size,
            "updates_per_step": config.updates_per_step,
            "setup_s": time.perf_counter() - start,
        }
        for name in (
            "act",
            "append",
            "sample",
            "update",
            "write_priorities",
            "learn",
            "step",
        ):
            fn = getattr(phases, name)
            row[name] = timed(fn, dev, args.steps)
            row[name]["ops"] = sum(count_ops(fn).values())
        if args.kernels:
            row["kernels"] = kernel_table(phases.learn, dev, args.kernels)
        row["envs"] = bench_envs(phases.games, args.env_workers, args.steps) if args.envs else None
        row["gpu_busy"] = gpu_busy_fraction(phases.step, args.steps)
        if dev.type == "cuda":
            row["max_memory_gb"] = torch.cuda.max_memory_allocated(dev) / 1e9
        step_s = row["step"]["median_s"] + (row["envs"] or {}).get("median_s", 0.0)
        row["agent_steps_per_s"] = n / step_s
        row["projected_100k_min"] = step_s * FULL_RUN_STEPS / 60
        results.append(row)
        print(table_row(row), flush=True)
        if args.json:  # row by row: a run stopped at its time limit keeps what it did
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1))
        del phases
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
    return results


def table_row(row: dict) -> str:
    ms = {k: row[k]["median_s"] * 1e3 for k in ("act", "append", "learn", "step")}
    ops = {k: row[k]["ops"] for k in ("act", "append", "sample", "update", "write_priorities")}
    ops["learn"] = row["learn"]["ops"]
    envs = row.get("envs")
    env_ms = f"{envs['median_s'] * 1e3:6.1f}" if envs else "     -"
    busy = f"{row['gpu_busy']:.0%}" if row.get("gpu_busy") is not None else "-"
    return (
        f"{row['encoder']:7s} N={row['agents']:3d} {row['batching']:4s} {row['precision']:13s} "
        f"act {ms['act']:6.1f} append {ms['append']:5.1f} learn {ms['learn']:7.1f} "
        f"| step {ms['step']:7.1f} envs {env_ms} ms | "
        f"{row['agent_steps_per_s']:7.1f} agent-steps/s, 100k in {row['projected_100k_min']:6.1f} "
        f"min | GPU busy {busy} | ops {ops}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--encoders", nargs="+", default=["nature", "resnet"])
    parser.add_argument("--batching", nargs="+", default=["auto"], choices=["auto", "vmap", "loop"])
    parser.add_argument("--params", default=None, help="a finetune params file (default: config)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rows", type=int, default=2_000, help="replay rows before timing")
    parser.add_argument("--steps", type=int, default=20, help="timed repeats per phase")
    parser.add_argument("--envs", action="store_true", help="also time the real environments")
    parser.add_argument("--env-workers", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--no-cuda-graphs", action="store_true")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--precision", nargs="+", default=["default"], choices=list(PRECISIONS))
    parser.add_argument("--kernels", type=int, default=0, help="keep a learn step's top kernels")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    run(args)


if __name__ == "__main__":
    main()
