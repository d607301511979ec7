"""MinAtar figures: environment steps/s per game, the MinAtar encoders' forward+backward time,
uniform-random returns (the 0 of the MinAtar score) and the shift-augmentation check.

    python benchmarks/minatar_speed.py steps --steps 20000     # env steps/s per game
    python benchmarks/minatar_speed.py encoders --repeats 50   # forward+backward, batch 32 and 256
    python benchmarks/minatar_speed.py random --episodes 1000  # uniform-random returns per game
    python benchmarks/minatar_speed.py shift --rows 5000       # objects a +-1 cell shift breaks
    python benchmarks/minatar_speed.py all                     # everything, JSON at the end

Steps are `sgi_lab.envs.make_env`'s (MinAtar's defaults: sticky actions 0.1, ramping on, the
minimal action set) with uniform random actions, observations as the stores keep them (uint8
0/255). Encoder times are wall-clock medians of forward + backward of the encoder alone on a
(B, C, 10, 10) batch (C = 4, Breakout's channels; 10 for Seaquest changes only the first conv),
fp32, after a warm-up; ``--threads`` sets torch's intra-op threads. Random returns: the uniform
policy over the game's minimal action set, whole episodes, evaluation mode (raw rewards): the
numbers `sgi_lab.metrics.minatar` records. Needs ``pip install 'sgi-lab[minatar]'``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import tempfile
import time

import numpy as np
import torch

from sgi_lab.envs import make_env, observation_spec
from sgi_lab.envs.minatar import MINATAR_GAMES
from sgi_lab.nets import make_encoder


def cpu_model() -> str:
    """The CPU's model name as ``lscpu`` prints it (or the platform's guess)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def env_steps(steps: int, seed: int = 0) -> dict[str, float]:
    """Environment steps/s per game with uniform random actions (resets included)."""
    rates = {}
    for game in MINATAR_GAMES:
        env = make_env(game, seed=seed, train=False)
        rng = np.random.default_rng(seed)
        actions = rng.integers(env.action_space.n, size=steps)
        env.reset()
        start = time.perf_counter()
        for a in actions:
            _, _, terminated, truncated, _ = env.step(int(a))
            if terminated or truncated:
                env.reset()
        rates[game] = steps / (time.perf_counter() - start)
    return rates


def encoder_times(repeats: int, batches: tuple[int, ...] = (32, 256)) -> dict[str, dict]:
    """Median forward+backward milliseconds of each MinAtar encoder per batch size."""
    spec = observation_spec("minatar/breakout")
    out = {}
    for name in ("minatar", "minatar_l"):
        encoder = make_encoder(name, spec.input_channels, spec.height)
        params = sum(p.numel() for p in encoder.parameters())
        row = {"parameters": params, "output_shape": list(encoder.output_shape)}
        for batch in batches:
            x = torch.randint(0, 2, (batch, *spec.stacked_shape), dtype=torch.uint8) * 255
            times = []
            for i in range(repeats + 20):
                start = time.perf_counter()
                encoder(x).sum().backward()
                if i >= 20:  # warm-up first (thread pools, oneDNN kernels)
                    times.append(time.perf_counter() - start)
            row[f"batch_{batch}_ms"] = 1000 * statistics.median(times)
            row[f"batch_{batch}_min_ms"] = 1000 * min(times)
        out[name] = row
    return out


def random_returns(episodes: int, seed: int = 0) -> dict[str, dict]:
    """Mean return of the uniform policy over the minimal action set, per game."""
    out = {}
    for game in MINATAR_GAMES:
        env = make_env(game, seed=seed, train=False)
        rng = np.random.default_rng(seed)
        returns = []
        for _ in range(episodes):
            env.reset()
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, _ = env.step(
                    int(rng.integers(env.action_space.n))
                )
                total += reward
                done = terminated or truncated
            returns.append(total)
        r = np.asarray(returns)
        out[game] = {
            "mean": float(r.mean()),
            "stderr": float(r.std(ddof=1) / np.sqrt(len(r))),
            "episodes": len(r),
        }
    return out


def shift_damage(rows: int, seed: int = 0) -> dict[str, float]:
    """Share of observations whose +-1 cell replicate-padded shift (corners uniform in
    {0, 1, 2}^2) loses or duplicates an object cell in some channel, on Random-policy data."""
    # The benchmark only: collecting needs the data layer, the shift the augmentation.
    from sgi_lab.augment.ops import shift
    from sgi_lab.data.collect import collect_random

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for game in MINATAR_GAMES:
            store = collect_random(game, rows, f"{tmp}/{game[8:]}", seed=seed, progress=False)
            obs = torch.from_numpy(store.stack(np.arange(len(store))))
            corners = torch.randint(0, 3, (len(obs), 2), generator=torch.Generator().manual_seed(0))
            shifted = shift(obs, corners, pad=1)
            changed = ((obs > 0).sum((2, 3)) != (shifted > 0).sum((2, 3))).any(1)
            out[game] = float(changed.float().mean())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("steps", "encoders", "random", "shift", "all"))
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"cpu": cpu_model(), "threads": torch.get_num_threads()}
    if args.what in ("steps", "all"):
        result["env_steps_per_s"] = env_steps(args.steps)
    if args.what in ("encoders", "all"):
        result["encoders"] = encoder_times(args.repeats)
    if args.what in ("random", "all"):
        result["random_returns"] = random_returns(args.episodes)
    if args.what in ("shift", "all"):
        result["shift_damage"] = shift_damage(args.rows)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
