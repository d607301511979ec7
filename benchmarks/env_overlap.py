"""The finetuning loop with the environments overlapped with the learner (``env_overlap``,
`sgi_lab.train.finetune_loop`) against the serial loop: wall time a step once learning has
started, MinAtar, a small population, the environments in ``--workers`` processes.

    python benchmarks/env_overlap.py                       # 4 agents, 1 worker, 5 rounds
    python benchmarks/env_overlap.py --seeds 0 1 2 3 --steps 80 --json env_overlap.json
    python benchmarks/env_overlap.py --small            # a cheap learner: a larger env share

Each round builds the population and its pool once and, once learning has started, runs its
steps serial and overlapped in turn (odd steps overlapped), each through the loop's own step
(`finetune_loop._play_and_learn`), so that a background load falls on both alike; a round's
figures are the median wall time of act + play + learn + store under each order, and the ratio
serial / overlapped is taken within a round; and the time this process spends in the pool's
calls a step (load-light: serially the whole environment step, overlapped the send and what the
receive still waits for; a loaded machine adds its scheduling delay to the call that wakes the
worker) and this process's CPU time a step (what the load does not inflate). Beside it, the same pool stepped alone (what the
overlap can hide at most: the environments' step and its round trip to the worker) and the
learning step's own time, so that the measured gain can be read against its bound.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import sgi_lab.train.finetune_loop as loop
from sgi_lab.base.files import cpu_model
from sgi_lab.config import FinetuneConfig, read_params, to_dict
from sgi_lab.envs.pool import EnvPool
from sgi_lab.runs.folder import FinetuneRun
from sgi_lab.runtime.device import resolve_device
from sgi_lab.train.acting import act
from sgi_lab.train.finetune import population_configs
from sgi_lab.train.finetune_agents import AgentRun, build_population, prepare_agents

ROOT = Path(__file__).resolve().parents[1]
GAMES = ("minatar/breakout", "minatar/asterix")  # 4 channels each: one population


def base_config(args: argparse.Namespace) -> FinetuneConfig:
    """``params/finetune/minatar_none.yaml`` (the MinAtar track's scratch agent), shortened:
    acting until ``--learning-starts``, then ``--steps`` learning steps timed."""
    config = read_params(ROOT / "params/finetune/minatar_none.yaml")["config"]
    config.update(
        steps=args.learning_starts + args.steps,
        learning_starts=args.learning_starts,
        eps_steps=args.learning_starts + 1,
        eval_episodes=1,
        eval_envs=1,
        log_every=10_000,
        checkpoint_every=10_000,
        env_workers=args.workers,
        threads=args.threads,
        channels_last=False,
        cpu_amp=False,
    )
    if args.small:  # a learner ~20x cheaper: the environments' share of a step grows as much
        config.update(hidden_size=32, batch_size=8, updates_per_step=1)
    return FinetuneConfig(**config)


def alternating_steps(
    configs: list[FinetuneConfig], root: Path, learning_starts: int, steps: int
) -> tuple[dict[bool, list[float]], ...]:
    """Wall seconds of learning steps, serial (False) and overlapped (True) in turn, step by
    step in one population and one pool: act, then `finetune_loop._play_and_learn` (the loop's
    own step) under either order; the seconds of each spent in the pool's calls and this
    process's CPU seconds. A background load falls
    on both alike."""
    runs = [
        FinetuneRun.open(root / f"agent{i}", "finetune", to_dict(c)) for i, c in enumerate(configs)
    ]
    agents = [AgentRun(c, r) for c, r in zip(configs, runs, strict=True)]
    step = prepare_agents(agents)
    population, replay = build_population(agents, resolve_device(configs[0].device))
    cfg = population.config
    orders = {on: dataclasses.replace(cfg, env_overlap=on) for on in (False, True)}
    seconds: dict[bool, list[float]] = {False: [], True: []}
    waits: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    window = loop._Window()
    with EnvPool(
        [a.game for a in agents],
        [a.config.seed for a in agents],
        train=True,
        workers=cfg.env_workers,
        preprocessing=cfg.env_protocol,
        **cfg.env_options,
    ) as pool:
        obs = pool.reset()
        waited = _time_environment_calls(pool)
        while step < learning_starts + steps:
            on = step % 2 == 1
            population.configs[0] = orders[on]  # what _play_and_learn reads
            waited.clear()
            start, cpu_start = time.perf_counter(), time.process_time()
            eps = loop.epsilon_at(step, cfg)
            actions = act(population, obs, [eps] * len(agents), [a.rng for a in agents])
            step += 1
            obs, rewards, ended, raw = loop._play_and_learn(
                pool, agents, population, replay, window, obs, actions, step
            )
            for i, a in enumerate(agents):
                a.record(float(raw[i]), float(rewards[i]), ended[i])
            if step > learning_starts:
                seconds[on].append(time.perf_counter() - start)
                waits[on].append(sum(waited))
                cpu[on].append(time.process_time() - cpu_start)
    population.configs[0] = cfg
    return seconds, waits, cpu


def _time_environment_calls(pool: EnvPool) -> list[float]:
    """Time this process spends in the pool's ``send`` and ``receive`` (``step`` is both: a step's
    environments, serially; the overlap leaves only the send and what receive still waits for),
    appended to the list returned."""
    spent: list[float] = []
    for name in ("send", "receive"):  # `step` calls both
        method = getattr(pool, name)

        def timed(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - start)

        setattr(pool, name, timed)
    return spent


def pool_alone(configs: list[FinetuneConfig], workers: int, steps: int) -> float:
    """Median wall seconds of one step of the population's pool alone (random actions)."""
    with EnvPool(
        [c.game for c in configs], [c.seed for c in configs], train=True, workers=workers
    ) as pool:
        pool.reset()
        rng = np.random.default_rng(0)
        seconds = []
        for _ in range(steps):
            start = time.perf_counter()
            pool.step(rng.integers(0, 3, len(configs)))
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="per game (x2)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="the learner's torch threads")
    parser.add_argument("--learning-starts", type=int, default=100)
    parser.add_argument("--steps", type=int, default=60, help="learning steps timed a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--small", action="store_true", help="hidden 32, batch 8, 1 update a step (not the track's)"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps: at least 2 (the orders alternate step by step)")
    torch.set_num_threads(args.threads)
    configs = population_configs(base_config(args), GAMES, args.seeds)
    rounds = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="env_overlap_") as root:
            step, waits, cpu = alternating_steps(
                configs, Path(root), args.learning_starts, args.steps
            )
        ms = {on: 1e3 * statistics.median(step[on]) for on in step}
        wait = {on: 1e3 * statistics.median(waits[on]) for on in waits}
        cpu_ms = {on: 1e3 * statistics.median(cpu[on]) for on in cpu}
        rounds.append({"serial_ms": ms[False], "overlapped_ms": ms[True]})
        rounds[-1]["ratio"] = ms[False] / ms[True]
        rounds[-1].update(serial_env_wait_ms=wait[False], overlapped_env_wait_ms=wait[True])
        rounds[-1].update(serial_cpu_ms=cpu_ms[False], overlapped_cpu_ms=cpu_ms[True])
        print(
            f"round {r}: serial {ms[False]:.2f} ms a step, overlapped {ms[True]:.2f}: "
            f"x{rounds[-1]['ratio']:.3f}; in the pool's calls {wait[False]:.3f} -> "
            f"{wait[True]:.3f} ms a step; CPU {cpu_ms[False]:.2f} -> {cpu_ms[True]:.2f} ms",
            flush=True,
        )
    env_ms = 1e3 * pool_alone(configs, args.workers, 500)
    serial = statistics.median(r["serial_ms"] for r in rounds)
    ratios = ", ".join(f"{r['ratio']:.3f}" for r in rounds)
    result = {
        "bench": "env_overlap",
        "agents": len(configs),
        "workers": args.workers,
        "threads": args.threads,
        "updates_per_step": configs[0].updates_per_step,
        "batch_size": configs[0].batch_size,
        "hidden_size": configs[0].hidden_size,
        "rounds": rounds,
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "serial_ms": serial,
        "overlapped_ms": statistics.median(r["overlapped_ms"] for r in rounds),
        "pool_step_alone_ms": env_ms,
        "serial_env_wait_ms": statistics.median(r["serial_env_wait_ms"] for r in rounds),
        "overlapped_env_wait_ms": statistics.median(r["overlapped_env_wait_ms"] for r in rounds),
        "serial_cpu_ms": statistics.median(r["serial_cpu_ms"] for r in rounds),
        "overlapped_cpu_ms": statistics.median(r["overlapped_cpu_ms"] for r in rounds),
        "bound_ratio": serial / max(serial - env_ms, 1e-9),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
    }
    print(
        f"{len(configs)} agents, {args.workers} worker(s): serial {serial:.2f} ms a learning "
        f"step, overlapped {result['overlapped_ms']:.2f}; median ratio x"
        f"{result['median_ratio']:.3f} (rounds "
        f"{ratios}); the pool alone "
        f"{env_ms:.3f} ms a step, so at most x{result['bound_ratio']:.3f}\n"
        f"CPU {result['cpu']}, {result['cpus']} cores, load average "
        f"{result['load_average_1min']:.1f}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":  # spawn re-imports this module in EnvPool's workers
    main()
