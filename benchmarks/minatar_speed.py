"""MinAtar figures: environment steps/s per game, the MinAtar encoders' forward+backward time,
uniform-random returns (the 0 of the MinAtar score) and the shift-augmentation check.

    python benchmarks/minatar_speed.py steps --steps 20000     # env steps/s per game
    python benchmarks/minatar_speed.py encoders --repeats 50   # forward+backward, batch 32 and 256
    python benchmarks/minatar_speed.py random --episodes 1000  # uniform-random returns per game
    python benchmarks/minatar_speed.py shift --rows 5000       # objects a +-1 cell shift breaks
    python benchmarks/minatar_speed.py update --agents 1 4     # the finetuning update, ms/agent
    python benchmarks/minatar_speed.py update --compile        # + torch.compile of the losses
    python benchmarks/minatar_speed.py pretrain --threads 2    # one SGI pretraining step, fp32/bf16
    python benchmarks/minatar_speed.py pretrain --compile      # + torch.compile of its losses
    python benchmarks/minatar_speed.py all                     # everything, JSON at the end

Steps are `sgi_lab.envs.make_env`'s (MinAtar's defaults: sticky actions 0.1, ramping on, the
minimal action set) with uniform random actions, observations as the stores keep them (uint8
0/255). Encoder times are wall-clock medians of forward + backward of the encoder alone on a
(B, C, 10, 10) batch (C = 4, Breakout's channels; 10 for Seaquest changes only the first conv),
fp32, after a warm-up; ``--threads`` sets torch's intra-op threads. Random returns: the uniform
policy over the game's minimal action set, whole episodes, evaluation mode (raw rewards): the
numbers `sgi_lab.metrics.minatar` records. Update times: one finetuning update of a population
(`sgi_lab.train.update.update`: batch 32, RL + SPR with K = 5, the `minatar` encoder, hidden 128,
Breakout's 3 actions and 4 channels, fp32) on random 0/255 grids, the median over ``--repeats``
after 5 warm-up updates, for each population size and batching (loop, vmap); with
``--compile``, the same update with the per-agent losses under ``torch.compile`` (inductor),
interleaved with eager updates so that load drifts hit both alike. Pretraining: one SGI step
(`sgi_lab.train.pretrain_step.train_step`: ``params/pretrain/minatar_sgi.yaml``, batch 256, K = 5,
goal RL with double Q, inverse dynamics) on random 0/255 Breakout grids, the median over
``--repeats`` after 3 warm-up steps, in fp32 and (where the CPU has native bf16) under bf16
autocast, the two settings alternated for three rounds; the time of 5k steps (its target: 5
minutes) is 5,000 x that median (the sampler adds ~1 ms a step). Needs
``pip install 'sgi-lab[minatar]'``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import tempfile
import time
import types

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


def _minatar_batch(config, num_actions: int, seed: int):
    """A batch of random 0/255 MinAtar grids shaped as the replay samples them."""
    from sgi_lab.data.sampler import SequenceBatch

    rng = np.random.default_rng(seed)
    b, t = config.batch_size, config.spr_steps + 1
    shape = observation_spec(config.game).stacked_shape
    grid = lambda *lead: (rng.random((*lead, *shape)) < 0.1).astype(np.uint8) * 255  # noqa: E731
    return SequenceBatch(
        obs=grid(b, t),
        actions=rng.integers(0, num_actions, (b, t)),
        rewards=rng.random((b, t)).astype(np.float32),
        valid=np.ones((b, t), bool),
        terminals=np.zeros((b, t), bool),
        returns=rng.normal(size=b).astype(np.float32),
        bootstrap_obs=grid(b),
        bootstrap_discount=np.full(b, 0.97, np.float32),
        goal_obs=grid(b),
        goal_offset=np.ones(b, np.int64),
        indices=np.arange(b),
    )


def update_times(
    agents: list[int],
    repeats: int,
    compile_losses: bool,
    encoder: str = "minatar",
    batchings: tuple[str, ...] = ("loop", "vmap"),
) -> list[dict]:
    """Milliseconds per update (and per agent) of MinAtar populations, loop and vmap."""
    # The benchmark only: the learner's modules, as the finetuning loop builds them.
    from sgi_lab.config import FinetuneConfig, build_config
    from sgi_lab.nets import SGIModel
    from sgi_lab.train.population import Population
    from sgi_lab.train.transfer import model_args_for
    from sgi_lab.train.update import stage, update

    rows = []
    for n in agents:
        for batching in batchings if n > 1 else ("loop",):
            configs = [
                build_config(
                    FinetuneConfig,
                    {"game": "minatar/breakout", "encoder": encoder, "hidden_size": 128,
                     "seed": s, "cpu_amp": False, "channels_last": False,
                     "population_batching": batching},
                )
                for s in range(n)
            ]  # fmt: skip
            models = []
            for c in configs:
                torch.manual_seed(c.seed)
                models.append(SGIModel(**model_args_for(c, 3)))
            pop = Population.build(configs, models, loaded=(), device="cpu")
            batches = [_minatar_batch(c, 3, i) for i, c in enumerate(configs)]
            weights = [np.ones(c.batch_size, np.float32) for c in configs]

            def step(pop=pop, batches=batches, weights=weights):
                update(pop, stage(pop, batches, weights))

            row = {"encoder": encoder, "agents": n, "batching": batching, **_timed(step, repeats)}
            if compile_losses:
                row.update(_compiled(pop, step, repeats))
            row["ms_per_agent"] = row["ms"] / n
            rows.append(row)
            print(json.dumps(row))
    return rows


def pretrain_times(repeats: int, compile_losses: bool = False) -> list[dict]:
    """Milliseconds per MinAtar SGI pretraining step at batch 256, fp32 and bf16, interleaved;
    with ``compile_losses``, each precision's compiled step too (`_compiled_pretrain`)."""
    import dataclasses

    from sgi_lab.config import PretrainConfig, load_config
    from sgi_lab.runtime.device import cpu_has_native_bf16
    from sgi_lab.train.pretrain_step import PretrainBatch, build_state, train_step

    config = load_config(PretrainConfig, "params/pretrain/minatar_sgi.yaml")
    shape = types.SimpleNamespace(
        batch_size=config.batch_size, spr_steps=config.spr_steps, game="minatar/breakout"
    )
    batch = _minatar_batch(shape, 3, 0)
    batch = PretrainBatch(*(torch.from_numpy(getattr(batch, k)) for k in PretrainBatch._fields))
    settings = [False, True] if cpu_has_native_bf16() else [False]
    times: dict[bool, list[float]] = {bf16: [] for bf16 in settings}
    for _ in range(3):
        for bf16 in settings:
            c = dataclasses.replace(config, cpu_amp=bf16, channels_last=False)
            state = build_state(c, 3, torch.device("cpu"), observation_spec("minatar/breakout"))
            times[bf16].append(_timed(lambda c=c, s=state: train_step(c, s, batch), repeats)["ms"])
    rows = []
    for bf16, ms in times.items():
        row = {"precision": "bf16" if bf16 else "fp32", "ms": statistics.median(ms),
               "rounds_ms": ms, "5k_steps_min": 5000 * statistics.median(ms) / 60_000}  # fmt: skip
        if compile_losses:
            row.update(
                _compiled_pretrain(dataclasses.replace(config, cpu_amp=bf16), batch, repeats)
            )
        rows.append(row)
        print(json.dumps(row))
    return rows


def _compiled_pretrain(config, batch, repeats: int) -> dict[str, float]:
    """The pretraining step with its losses (`sgi_losses`: forward, and backward through
    AOTAutograd) compiled by inductor, in rounds interleaved with an eager state's steps; the
    first compiled steps' time is the compile's. The 5k-step figure counts the compile."""
    import dataclasses

    from sgi_lab.train import pretrain_step

    config = dataclasses.replace(config, channels_last=False)
    compiled = pretrain_step.loss_function(dataclasses.replace(config, compile=True))
    losses = {"eager": None, "compiled": compiled}
    spec = observation_spec("minatar/breakout")
    states = {
        name: pretrain_step.build_state(config, 3, torch.device("cpu"), spec) for name in losses
    }

    def step(name: str) -> None:
        pretrain_step.train_step(config, states[name], batch, losses=losses[name])

    start = time.perf_counter()
    for _ in range(3):
        step("compiled")
    compile_s = time.perf_counter() - start
    rounds: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(3):
        for name in rounds:
            rounds[name].append(_timed(lambda name=name: step(name), repeats)["ms"])
    compiled_ms = statistics.median(rounds["compiled"])
    return {
        "compile_s": compile_s,
        "interleaved_eager_ms": statistics.median(rounds["eager"]),
        "compiled_ms": compiled_ms,
        "compiled_5k_steps_min": (compile_s + 5 * compiled_ms) / 60,
    }


def _timed(step, repeats: int) -> dict[str, float]:
    for _ in range(5):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {"ms": 1000 * statistics.median(times), "min_ms": 1000 * min(times)}


def _compiled(pop, step, repeats: int) -> dict[str, float]:
    """The same update with the per-agent losses compiled (inductor), interleaved with eager
    rounds; the first compiled updates' time is the compile's."""
    from sgi_lab.train.population import Population

    eager_batched, cache = Population.batched, {}

    def compiled_batched(self, fn):
        compiled = cache.setdefault(fn.__code__, torch.compile(fn, dynamic=False))
        return eager_batched(self, compiled)

    start = time.perf_counter()
    Population.batched = compiled_batched
    try:
        for _ in range(3):
            step()
        warm = time.perf_counter() - start
        eager, compiled = [], []
        for _ in range(3):
            Population.batched = eager_batched
            eager.append(_timed(step, repeats)["ms"])
            Population.batched = compiled_batched
            compiled.append(_timed(step, repeats)["ms"])
    finally:
        Population.batched = eager_batched
    return {
        "compile_s": warm,
        "interleaved_eager_ms": statistics.median(eager),
        "compiled_ms": statistics.median(compiled),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "what", choices=("steps", "encoders", "random", "shift", "update", "pretrain", "all")
    )
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 4])
    parser.add_argument(
        "--compile", action="store_true", help="update, pretrain: also torch.compile"
    )
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--encoder", default="minatar", help="update: minatar or minatar_l")
    parser.add_argument(
        "--batching", nargs="+", default=["loop", "vmap"], help="update: loop and/or vmap"
    )
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
    if args.what in ("update", "all"):
        result["update"] = update_times(
            args.agents, min(args.repeats, 30), args.compile, args.encoder, tuple(args.batching)
        )
    if args.what in ("pretrain", "all"):
        result["pretrain"] = pretrain_times(min(args.repeats, 20), args.compile)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
