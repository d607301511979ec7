"""`sgi_lab.envs.pool.EnvPool`'s two ways back from its workers: rows pickled through pipes or
written into one shared-memory segment. Environment steps per second of N environments on
``--workers`` processes (2 by default), MinAtar and Atari.

    python benchmarks/pool_transport.py                         # both families, N = 16 64 256
    python benchmarks/pool_transport.py --families atari --envs 64 --active 0.5
    python benchmarks/pool_transport.py --json pool_transport.json

For each family and N, a pool of each kind is opened (same games, seeds and random actions) and
the two are stepped in alternating blocks of ``--block`` env-steps, ``--rounds`` blocks each,
so that a background load falls on both alike; a figure is the median block. Beside wall time,
the CPU time a step costs (this process and the pool's workers, from /proc): a background load
inflates wall time, much less the CPU time; and this process's own CPU time a step (unpickling
and copying the rows: what stays serial however many workers a machine has). ``--active F`` steps
a random share F of the environments each step through `EnvPool.step_active`, evaluation's path
(its figures count only the environments stepped). The games alternate within a pool: MinAtar's
Breakout and Asterix (4 channels of 10x10, 400 bytes an observation), Atari's Pong and Breakout
(4 x 84 x 84, 28,224 bytes), so the bytes a step moves are N times those.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from sgi_lab.base.files import cpu_model
from sgi_lab.envs.pool import EnvPool

FAMILIES = {
    "minatar": (["minatar/breakout", "minatar/asterix"], 3),
    "atari": (["Pong", "Breakout"], 4),
}
"""Family -> (games that alternate in a pool, actions every one of them has)."""


def _workers_cpu_s(pool: EnvPool) -> float:
    """CPU seconds the pool's worker processes have used (Linux's /proc; 0 elsewhere)."""
    total = 0
    for proc in pool._pool.procs:
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _block(
    pool: EnvPool, actions: np.ndarray, masks: np.ndarray | None
) -> tuple[float, float, float]:
    """Wall seconds to play these steps, the CPU seconds they took (this process and the pool's
    workers: what a background load does not inflate), and this process's share of those."""
    workers, parent = _workers_cpu_s(pool), time.process_time()
    start = time.perf_counter()
    for t, a in enumerate(actions):
        if masks is None:
            pool.step(a)
        else:
            pool.step_active(a, masks[t])
    wall = time.perf_counter() - start
    parent = time.process_time() - parent
    return wall, parent + _workers_cpu_s(pool) - workers, parent


def measure(
    family: str, num_envs: int, workers: int, block: int, rounds: int, active: float | None
) -> dict[str, Any]:
    """Median env-steps/s, wall and CPU ms a step of each transport, over alternating blocks of
    ``block`` env-steps."""
    names, num_actions = FAMILIES[family]
    steps = max(-(-block // num_envs), 10)
    games = [names[i % len(names)] for i in range(num_envs)]
    seeds = list(range(num_envs))
    rng = np.random.default_rng(0)
    actions = rng.integers(0, num_actions, (steps, num_envs))
    masks = None if active is None else rng.random((steps, num_envs)) < active
    stepped = steps * num_envs if masks is None else int(masks.sum())
    kinds = {"pipes": False, "shared memory": True}
    pools = {k: EnvPool(games, seeds, train=False, workers=workers, shared_memory=v)
             for k, v in kinds.items()}  # fmt: skip
    try:
        obs_bytes = 0
        for pool in pools.values():
            obs_bytes = pool.reset()[0].nbytes
            _block(pool, actions[: max(steps // 10, 1)], None)  # warm-up
        seconds: dict[str, list[tuple[float, float, float]]] = {k: [] for k in pools}
        for _ in range(rounds):
            for kind, pool in pools.items():
                seconds[kind].append(_block(pool, actions, masks))
        assert pools["shared memory"].shared_memory and not pools["pipes"].shared_memory
    finally:
        for pool in pools.values():
            pool.close()
    row: dict[str, Any] = {
        "family": family,
        "envs": num_envs,
        "workers": workers,
        "active": active,
        "steps_per_block": steps,
        "obs_bytes_per_step": obs_bytes * (num_envs if active is None else stepped / steps),
    }
    for kind, blocks in seconds.items():
        wall, cpu, parent = (statistics.median(b[i] for b in blocks) for i in range(3))
        row[kind] = {
            "env_steps_per_s": round(stepped / wall),
            "ms_per_step": round(1e3 * wall / steps, 3),
            "cpu_ms_per_step": round(1e3 * cpu / steps, 3),
            "parent_cpu_ms_per_step": round(1e3 * parent / steps, 3),
            "blocks_wall_s": [round(b[0], 4) for b in blocks],
        }
    pipes, shared = row["pipes"], row["shared memory"]
    row["speedup"] = round(pipes["ms_per_step"] / shared["ms_per_step"], 2)
    row["cpu_ratio"] = round(pipes["cpu_ms_per_step"] / max(shared["cpu_ms_per_step"], 1e-9), 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", choices=sorted(FAMILIES), default=["minatar", "atari"])  # fmt: skip
    parser.add_argument("--envs", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--block", type=int, default=None, help="env-steps in a timed block "
                        "(default: 20,000 MinAtar, 2,000 Atari); at least 10 steps")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=7, help="blocks of each transport")
    parser.add_argument("--active", type=float, default=None, help="share stepped (step_active)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for family in args.families:
        for n in args.envs:
            block = args.block or (20_000 if family == "minatar" else 2_000)
            row = measure(family, n, args.workers, block, args.rounds, args.active)
            rows.append(row)
            pipes, shared = row["pipes"], row["shared memory"]
            print(
                f"{family:8} N={n:<5} {args.workers} workers: pipes {pipes['env_steps_per_s']:>8,} "
                f"env-steps/s ({pipes['ms_per_step']:.2f} ms/step, CPU "
                f"{pipes['cpu_ms_per_step']:.2f}), shared memory "
                f"{shared['env_steps_per_s']:>8,} ({shared['ms_per_step']:.2f}, CPU "
                f"{shared['cpu_ms_per_step']:.2f}): wall x{row['speedup']:.2f}, "
                f"CPU x{row['cpu_ratio']:.2f}; this process's CPU a step "
                f"{pipes['parent_cpu_ms_per_step']:.2f} -> {shared['parent_cpu_ms_per_step']:.2f} ms",
                flush=True,
            )
    result = {
        "bench": "pool_transport",
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
        "rows": rows,
    }
    print(
        f"CPU {result['cpu']}, {result['cpus']} cores, load average {result['load_average_1min']:.1f}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":  # spawn re-imports this module in EnvPool's workers
    main()
