"""ale-py's C++ ``AtariVectorEnv`` against our environments (`sgi_lab.envs.make_env` stepped by
`sgi_lab.envs.pool.EnvPool`): does it reproduce the Atari 100k protocol, and how fast is it?

    python benchmarks/vector_env_check.py                  # 5 games, 3000 steps each, speed
    python benchmarks/vector_env_check.py --games Pong --steps 500 --json out.json

1. Protocol. With no-op starts off in both (their random draws come from different generators),
   the same seed and the same random actions, every observation (4 stacked 84x84 frames), raw
   reward, game-over and truncation is compared step by step, across episode ends (both reset in
   the step that ends an episode).
2. No-op starts. The number of no-op frames after a reset, read from the vector env's
   ``episode_frame_number`` over many seeds, against the protocol's uniform 0..30 raw frames.
3. Speed. Environment steps per second of N environments of one game: the vector env on
   ``--threads`` threads against the pool in this process and on ``--workers`` processes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from sgi_lab.envs import make_env
from sgi_lab.envs.atari import NOOP_MAX
from sgi_lab.envs.games import ATARI_100K_GAMES
from sgi_lab.envs.pool import EnvPool


def rom_name(game: str) -> str:
    """``MsPacman`` -> ``ms_pacman``: the ROM name `AtariVectorEnv` takes."""
    name = ATARI_100K_GAMES[game].ale_id.split("/")[1].split("-")[0]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def vector_env(game: str, num_envs: int, **kwargs: Any):
    from ale_py.vector_env import AtariVectorEnv

    options = {
        "use_fire_reset": False,
        "reward_clipping": False,
        "episodic_life": False,
        "repeat_action_probability": 0.0,
        "autoreset_mode": "SameStep",
        **kwargs,
    }
    return AtariVectorEnv(rom_name(game), num_envs, **options)


def compare(game: str, steps: int, seed: int) -> dict[str, Any]:
    """Step both with the same random actions, no-op starts off; count any difference."""
    vec = vector_env(game, 1, noop_max=0)
    env = make_env(game, seed=seed, train=False, noop_max=0)
    try:
        first_vec, _ = vec.reset(seed=seed)
        first, _ = env.reset()
        n = int(env.action_space.n)
        rng = np.random.default_rng(seed)
        differences, episodes, first_difference = 0, 0, None
        for t in range(steps):
            action = int(rng.integers(n))
            obs_v, reward_v, term_v, trunc_v, _ = vec.step(np.array([action]))
            obs, reward, term, trunc, _ = env.step(action)
            if term or trunc:
                obs, _ = env.reset()
                episodes += 1
            same = (
                np.array_equal(obs_v[0], obs)
                and float(reward_v[0]) == reward
                and bool(term_v[0]) == term
                and bool(trunc_v[0]) == trunc
            )
            if not same:
                differences += 1
                first_difference = first_difference if first_difference is not None else t
        return {
            "game": game,
            "actions": n,
            "same_action_count": int(vec.single_action_space.n) == n,
            "same_first_observation": bool(np.array_equal(first_vec[0], first)),
            "steps": steps,
            "episodes_ended": episodes,
            "steps_that_differ": differences,
            "first_difference_at": first_difference,
        }
    finally:
        vec.close()
        env.close()


def noop_frames(game: str, resets: int, noop_max: int, num_envs: int = 16) -> dict[str, Any]:
    """No-op frames played at reset: the vector env's frame counter right after reset(), over
    ``resets`` resets of ``num_envs`` environments: seeded once, then unseeded (reset(seed=s)
    seeds environment i with s + i, so resets seeded 0, 1, 2... would repeat draws)."""
    vec = vector_env(game, num_envs, noop_max=noop_max)
    try:
        rounds = [vec.reset(seed=0)[1]["episode_frame_number"]]
        rounds += [vec.reset()[1]["episode_frame_number"] for _ in range(resets // num_envs - 1)]
        frames = np.concatenate(rounds)
    finally:
        vec.close()
    counts = np.bincount(frames, minlength=NOOP_MAX + 1)
    return {
        "noop_max": noop_max,
        "resets": len(frames),
        "min": int(frames.min()),
        "max": int(frames.max()),
        "mean": float(frames.mean()),
        "protocol_mean": NOOP_MAX / 2,
        "zero_noops_seen": int(counts[0]),
    }


def speed(
    game: str, num_envs: int, steps: int, threads: list[int], workers: list[int]
) -> dict[str, float]:
    n = int(make_env(game, seed=0).action_space.n)
    actions = np.random.default_rng(0).integers(0, n, (steps, num_envs))
    rates: dict[str, float] = {}
    for k in threads:
        vec = vector_env(game, num_envs, num_threads=k)
        vec.reset(seed=0)
        start = time.perf_counter()
        for a in actions:
            vec.step(a)
        rates[f"AtariVectorEnv, {k} thread(s)"] = num_envs * steps / (time.perf_counter() - start)
        vec.close()
    for k in workers:
        with EnvPool([game] * num_envs, list(range(num_envs)), train=False, workers=k) as pool:
            pool.reset()
            start = time.perf_counter()
            for a in actions:
                pool.step_active(a)
            label = "EnvPool, in this process" if k == 0 else f"EnvPool, {k} workers"
            rates[label] = num_envs * steps / (time.perf_counter() - start)
    return {k: round(v) for k, v in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--games", nargs="+", default=["Pong", "Breakout", "MsPacman", "Seaquest", "Boxing"]
    )
    parser.add_argument("--steps", type=int, default=3000, help="compared steps per game")
    parser.add_argument("--resets", type=int, default=960, help="resets for the no-op count")
    parser.add_argument("--speed-envs", type=int, default=16)
    parser.add_argument("--speed-steps", type=int, default=300)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="vector env's")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="EnvPool's")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import ale_py

    result: dict[str, Any] = {
        "bench": "vector_env_check",
        "ale_py": ale_py.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "protocol": [compare(g, args.steps, seed=i) for i, g in enumerate(args.games)],
        # noop_max=30 plays 0..29 frames; 31 gives the protocol's 0..30.
        "noop_frames": [
            noop_frames(args.games[0], args.resets, m) for m in (NOOP_MAX, NOOP_MAX + 1)
        ],
        "env_steps_per_s": speed(
            args.games[0], args.speed_envs, args.speed_steps, args.threads, args.workers
        ),
    }
    for row in result["protocol"]:
        print(
            f"{row['game']:10} {row['steps']} steps, {row['episodes_ended']} episodes ended: "
            f"{row['steps_that_differ']} steps differ (first observation the same: "
            f"{row['same_first_observation']}, same action set: {row['same_action_count']})"
        )
    for noop in result["noop_frames"]:
        print(
            f"noop_max={noop['noop_max']}: no-op frames at reset over {noop['resets']} resets "
            f"{noop['min']}..{noop['max']}, mean {noop['mean']:.2f} (protocol: uniform "
            f"0..{NOOP_MAX}, mean {noop['protocol_mean']})"
        )
    for label, rate in result["env_steps_per_s"].items():
        print(f"{label:28} {rate:7d} env-steps/s ({args.speed_envs} x {args.games[0]})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":  # spawn re-imports this module in EnvPool's workers
    main()
