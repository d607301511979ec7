"""Finetuning speed: seconds per update, environment steps/s, projected 100k-step wall-clock, and
evaluation episodes/s (vectorized vs one environment at a time).

    python benchmarks/finetune_speed.py update                  # s/update, Nature + ResNet, fp32/bf16
    python benchmarks/finetune_speed.py update --profile        # + torch.profiler table of one update
    python benchmarks/finetune_speed.py steps --steps 300       # env steps/s with 2 updates per step
    python benchmarks/finetune_speed.py eval --episodes 8       # evaluation episodes/s
    python benchmarks/finetune_speed.py population --agents 4   # a population of 4 vs 4 single agents
    python benchmarks/finetune_speed.py population-steps --agents 4 --steps 40  # the whole loop
    python benchmarks/finetune_speed.py replay                  # N numpy replays vs one PopulationReplay
    python benchmarks/finetune_speed.py all                     # everything, JSON summary at the end

An update is the paper's: batch 32, RL + SPR with K = 5, 10-step returns, double Q, augmentation.
Times are wall-clock medians over ``--repeats`` updates after a warm-up, with the fastest update
beside them (on a shared VM whose speed drifts, the minimum is the steadier figure) and CPU seconds
(on a shared machine the wall-clock includes other processes' time, the CPU time does not). Set
``--threads`` to compare intra-op thread counts; on a busy 2-core machine one thread per process
avoids OpenMP oversubscription, which can cost 10x.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from sgi_lab.base.files import read_jsonl
from sgi_lab.config import FinetuneConfig, to_dict
from sgi_lab.data.population_replay import PopulationReplay
from sgi_lab.data.replay import PrioritizedReplay
from sgi_lab.envs import make_env
from sgi_lab.nets import SGIModel
from sgi_lab.train.evaluate import evaluate
from sgi_lab.train.finetune import finetune
from sgi_lab.train.population import Population, use_amp
from sgi_lab.train.transfer import model_args_for
from sgi_lab.train.update import stage, update

ENCODERS = ("nature", "resnet")
REFERENCE_S_PER_UPDATE = {"resnet": 0.68, "nature": 0.18}  # reference implementation, this CPU
FULL_RUN_STEPS = 100_000


class Learner:
    """A population (of one by default) with real Pong replays: ``step()`` is one update."""

    def __init__(self, config: FinetuneConfig, agents: int = 1, rows: int = 3_000) -> None:
        configs, models = [], []
        for i in range(agents):
            c = FinetuneConfig(**{**to_dict(config), "seed": config.seed + i})
            torch.manual_seed(c.seed)
            configs.append(c)
            models.append(SGIModel(**model_args_for(c, 6)))
        self.population = Population.build(configs, models, loaded=(), device=config.device)
        self.replays = [filled_replay(c, rows, seed=c.seed) for c in configs]
        self.config = config

    @property
    def amp(self) -> bool:
        return self.population.update_amp

    def sample(self) -> tuple[list, list]:
        sampled = [r.sample(self.config.batch_size, 0.4) for r in self.replays]
        return [b for b, _ in sampled], [w for _, w in sampled]

    def step(self, sampled: tuple[list, list] | None = None) -> None:
        batches, weights = sampled or self.sample()
        _, priorities = update(self.population, stage(self.population, batches, weights))
        priorities = priorities.float().cpu().numpy()
        for replay, batch, p in zip(self.replays, batches, priorities, strict=True):
            replay.update_priorities(batch.indices, p)


def filled_replay(config: FinetuneConfig, rows: int = 3_000, seed: int = 0) -> PrioritizedReplay:
    """A prioritized replay holding ``rows`` real Pong transitions (random policy)."""
    replay = PrioritizedReplay(
        config.steps, alpha=config.priority_alpha, K=config.spr_steps, n_step=config.n_step,
        gamma=config.gamma, seed=seed,
    )  # fmt: skip
    env = make_env("Pong", seed=seed, train=True)
    obs, _ = env.reset()
    first = True
    rng = np.random.default_rng(seed)
    for _ in range(rows):
        action = int(rng.integers(6))
        nxt, _, term, trunc, info = env.step(action)
        replay.append(obs[-1], action, info["raw_reward"], info["terminal"], first)
        first = False
        if term or trunc:
            nxt, _ = env.reset()
            first = True
        obs = nxt
    env.close()
    return replay


def filled_agent(config: FinetuneConfig, rows: int = 3_000, agents: int = 1) -> Learner:
    return Learner(config, agents, rows)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bench_update(
    encoder: str, cpu_amp: bool, repeats: int, profile: bool, device: str = "cpu"
) -> dict:
    config = FinetuneConfig(encoder=encoder, cpu_amp=cpu_amp, steps=4_000, device=device)
    agent = filled_agent(config)
    for _ in range(3):  # warm-up (oneDNN primitive caches / cuDNN autotuning, allocator)
        agent.step()
    wall, cpu = [], []
    for _ in range(repeats):
        sampled = agent.sample()
        synchronize(device)
        t, c = time.perf_counter(), time.process_time()
        agent.step(sampled)
        synchronize(device)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    result = {
        "encoder": encoder,
        "device": device,
        "bf16": agent.amp,
        "threads": torch.get_num_threads(),
        "s_per_update": statistics.median(wall),
        "min_s_per_update": min(wall),
        "cpu_s_per_update": statistics.median(cpu),
        "reference_s_per_update": REFERENCE_S_PER_UPDATE[encoder],
    }
    result["speedup_vs_reference"] = result["reference_s_per_update"] / result["s_per_update"]
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        sampled = agent.sample()
        with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            agent.step(sampled)
        print(
            prof.key_averages(group_by_input_shape=True).table(
                sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=32
            )
        )
    return result


def loop_config(
    encoder: str, warmup: int, steps: int, device: str, **overrides: object
) -> FinetuneConfig:
    """A finetuning run whose metrics row after ``warmup`` random steps times ``steps`` learning
    steps alone (the first row's window has no update, the next all), with a token evaluation
    and no checkpoint."""
    return FinetuneConfig(
        encoder=encoder,
        steps=warmup + steps,
        learning_starts=warmup + 1,
        eps_steps=warmup + 1,
        log_every=warmup,
        checkpoint_every=10**9,
        eval_episodes=1,
        eval_envs=1,
        eval_max_frames=40,
        device=device,
        **overrides,
    )


def bench_steps(encoder: str, cpu_amp: bool, steps: int, device: str = "cpu") -> dict:
    """Env steps/s of the real loop once learning has started (2 updates per step)."""
    warmup = 200
    config = loop_config(encoder, warmup, steps, device, cpu_amp=cpu_amp)
    with tempfile.TemporaryDirectory() as tmp:
        finetune(config, Path(tmp) / "run", progress=False)
        rows = [r for r in read_jsonl(Path(tmp) / "run" / "metrics.jsonl") if "charts/sps" in r]
    warm, learning = rows[0], rows[-1]
    sps = learning["charts/sps"]
    # The paper's run: 2,000 steps of random play, then 98,000 steps with 2 updates each.
    projected = 2_000 / warm["charts/sps"] + (FULL_RUN_STEPS - 2_000) / sps
    return {
        "encoder": encoder,
        "device": device,
        "bf16": use_amp(config, torch.device(device)),
        "threads": torch.get_num_threads(),
        "env_steps_per_s": sps,
        "updates_per_s": learning["charts/ups"],
        "warmup_steps_per_s": warm["charts/sps"],
        "projected_100k_hours": projected / 3600,
    }


def bench_eval(encoder: str, episodes: int, num_envs: int, max_frames: int) -> dict:
    model = SGIModel(encoder, 6, channels_last=True)
    out = {"encoder": encoder, "episodes": episodes, "max_frames": max_frames}
    for n in (num_envs, 1):
        result = evaluate(
            model,
            "Pong",
            episodes=episodes,
            num_envs=n,
            seed=0,
            max_frames=max_frames,
            progress=False,
        )
        out[f"episodes_per_s_{n}_envs"] = result["episodes_per_s"]
        out[f"mean_length_{n}_envs"] = float(np.mean(result["lengths"]))
        out[f"steps_per_s_{n}_envs"] = result["steps_per_s"]
    out["vectorized_speedup"] = (
        out[f"episodes_per_s_{num_envs}_envs"] / out["episodes_per_s_1_envs"]
    )
    return out


def bench_population(
    encoder: str,
    agents: int,
    rounds: int,
    cpu_amp: bool,
    device: str = "cpu",
    batching: str = "auto",
) -> dict:
    """Agent-updates/s of one population of ``agents`` against the same agents as populations
    of one updated one after another, interleaved round by round (one update of each per
    round), so that drift of a shared machine hits both alike."""
    config = FinetuneConfig(
        encoder=encoder,
        cpu_amp=cpu_amp,
        steps=4_000,
        device=device,
        population_batching=batching,
    )
    together = Learner(config, agents, rows=1_500)
    alone = [
        Learner(FinetuneConfig(**{**to_dict(config), "seed": config.seed + i}), 1, rows=1_500)
        for i in range(agents)
    ]
    for _ in range(2):  # warm-up
        together.step()
        for a in alone:
            a.step()
    batched, separate = [], []
    for _ in range(rounds):
        sampled = together.sample()
        synchronize(device)
        t = time.perf_counter()
        together.step(sampled)
        synchronize(device)
        batched.append(time.perf_counter() - t)
        samples = [a.sample() for a in alone]
        synchronize(device)
        t = time.perf_counter()
        for a, sampled in zip(alone, samples, strict=True):
            a.step(sampled)
        synchronize(device)
        separate.append(time.perf_counter() - t)
    b, sep = statistics.median(batched), statistics.median(separate)
    return {
        "encoder": encoder,
        "agents": agents,
        "device": device,
        "batching": together.population.batching,
        "bf16_batched": together.amp,
        "bf16_separate": alone[0].amp,
        "threads": torch.get_num_threads(),
        "s_per_population_update": b,
        "s_per_separate_updates": sep,
        "agent_updates_per_s_batched": agents / b,
        "agent_updates_per_s_separate": agents / sep,
        "speedup": sep / b,
    }


def bench_replay(
    agents: int, rounds: int, rows: int = 2_000, batch_size: int = 32, device: str = "cpu"
) -> dict:
    """Replay work of one population step: sampling N batches (K = 5, 10-step returns) from N
    numpy `PrioritizedReplay` s, alone and then stacked onto the device as `Population.update`
    does, against one `PopulationReplay.sample` there (fresh tensors, and with
    ``reuse_buffers``); also one append per agent and one priority update. Random episodes of ``rows`` rows; interleaved round by round."""
    K, n_step, beta = 5, 10, 0.4
    settings = {"alpha": 0.5, "K": K, "n_step": n_step, "gamma": 0.99}
    population = PopulationReplay(agents, rows, seeds=range(agents), device=device, **settings)
    replays = [PrioritizedReplay(rows, seed=i, **settings) for i in range(agents)]
    rng = np.random.default_rng(0)
    first = np.ones(agents, bool)
    append_numpy, append_population = [], []
    for _ in range(rows):
        frames = rng.integers(0, 256, (agents, 84, 84), dtype=np.uint8)
        actions, rewards = rng.integers(0, 6, agents), rng.normal(size=agents).astype(np.float32)
        end = rng.random(agents) < 0.005
        terminals = end & (rng.random(agents) < 0.5)
        t = time.perf_counter()
        for i, replay in enumerate(replays):
            replay.append(frames[i], actions[i], rewards[i], terminals[i], first[i])
        append_numpy.append(time.perf_counter() - t)
        t = time.perf_counter()
        population.append(frames, actions, rewards, terminals, first)
        synchronize(device)
        append_population.append(time.perf_counter() - t)
        first = end
    dev = torch.device(device)

    def numpy_sample(to_device: bool) -> tuple[list, list]:
        sampled = [r.sample(batch_size, beta) for r in replays]
        if to_device:
            for field in ("obs", "bootstrap_obs", "actions", "valid", "returns"):
                torch.stack([torch.as_tensor(getattr(b, field)).to(dev) for b, _ in sampled])
            torch.stack([torch.as_tensor(w).to(dev) for _, w in sampled])
            synchronize(device)
        return sampled

    def population_sample() -> object:
        batch = population.sample(batch_size, beta)
        synchronize(device)
        return batch

    def population_sample_reused() -> object:
        population.reuse_buffers = True
        batch = population_sample()
        population.reuse_buffers = False
        return batch

    names = ("numpy", "numpy_to_device", "population", "population_reused")
    times: dict[str, list[float]] = {k: [] for k in names}
    priority_numpy, priority_population = [], []
    for _ in range(2):  # warm-up
        numpy_sample(True)
        population_sample()
        population_sample_reused()
    for _ in range(rounds):
        outputs = {}
        for name, fn in (
            ("numpy", lambda: numpy_sample(False)),
            ("numpy_to_device", lambda: numpy_sample(True)),
            ("population", population_sample),
            ("population_reused", population_sample_reused),
        ):
            t = time.perf_counter()
            outputs[name] = fn()
            times[name].append(time.perf_counter() - t)
        new = rng.random((agents, batch_size))
        t = time.perf_counter()
        for replay, (b, _), p in zip(replays, outputs["numpy"], new, strict=True):
            replay.update_priorities(b.indices, p)
        priority_numpy.append(time.perf_counter() - t)
        new = torch.as_tensor(new, device=dev)
        synchronize(device)
        t = time.perf_counter()
        population.update_priorities(outputs["population"].indices, new)
        synchronize(device)
        priority_population.append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "agents": agents,
        "device": device,
        "batch_size": batch_size,
        "rows": rows,
        "threads": torch.get_num_threads(),
        "s_numpy_sample": med["numpy"],
        "s_numpy_sample_to_device": med["numpy_to_device"],
        "s_population_sample": med["population"],
        "min_s_population_sample": min(times["population"]),
        "s_population_sample_reused_buffers": med["population_reused"],
        "speedup_vs_numpy_to_device": med["numpy_to_device"] / med["population"],
        "speedup_reused_vs_numpy_to_device": med["numpy_to_device"] / med["population_reused"],
        "s_numpy_append": statistics.median(append_numpy),
        "s_population_append": statistics.median(append_population),
        "s_numpy_update_priorities": statistics.median(priority_numpy),
        "s_population_update_priorities": statistics.median(priority_population),
    }


def bench_population_steps(encoder: str, agents: int, steps: int, device: str = "cpu") -> dict:
    """Agent-steps/s of the whole loop once learning has started (acting, environments, replay,
    2 updates per step): a population of ``agents`` (Pong seeds) against the same agents run one
    after another as populations of one; the population runs first and last, the single runs
    in between, and the two population figures are averaged."""
    from sgi_lab.train.finetune import finetune_population

    warmup = 100
    base = loop_config(encoder, warmup, steps, device)
    configs = [FinetuneConfig(**{**to_dict(base), "seed": i}) for i in range(agents)]

    def learning_sps(folder: Path) -> float:
        rows = [r for r in read_jsonl(folder / "metrics.jsonl") if "charts/sps" in r]
        return rows[-1]["charts/sps"]

    population_sps, single_sps = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(2):
            folders = [Path(tmp) / f"pop{rep}" / f"a{i}" for i in range(agents)]
            finetune_population(configs, folders, progress=False)
            population_sps.append(learning_sps(folders[0]))
            if rep == 0:
                for i, c in enumerate(configs):
                    finetune(c, Path(tmp) / f"single{i}", progress=False)
                    single_sps.append(learning_sps(Path(tmp) / f"single{i}"))
    pop = statistics.mean(population_sps) * agents  # every agent takes a step per loop step
    single = agents / sum(1.0 / s for s in single_sps)  # one after the other
    return {
        "encoder": encoder,
        "agents": agents,
        "device": device,
        "threads": torch.get_num_threads(),
        "agent_steps_per_s_population": pop,
        "agent_steps_per_s_one_after_another": single,
        "speedup": pop / single,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "what",
        choices=["update", "steps", "eval", "population", "population-steps", "replay", "all"],
    )
    parser.add_argument("--agents", type=int, default=4, help="population size for 'population'")
    parser.add_argument(
        "--batching", choices=["auto", "vmap", "loop"], default="auto", help="for 'population'"
    )
    parser.add_argument(
        "--replay-agents", type=int, nargs="+", default=[1, 4, 16], help="sizes for 'replay'"
    )
    parser.add_argument("--encoders", nargs="+", default=list(ENCODERS), choices=ENCODERS)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200, help="learning steps for 'steps'")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--max-frames", type=int, default=2_000, help="eval episode cap")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--precision", choices=["both", "fp32", "bf16"], default="both")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--device", default="cpu", help="'cpu' or 'cuda'")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    amps = {"both": (False, True), "fp32": (False,), "bf16": (True,)}[args.precision]
    results: dict[str, list] = {
        "update": [], "steps": [], "eval": [], "population": [], "replay": []
    }  # fmt: skip
    if args.what == "replay":
        for agents in args.replay_agents:
            r = bench_replay(agents, args.repeats, device=args.device)
            results["replay"].append(r)
            print(json.dumps(r))
        args.encoders = []
    for encoder in args.encoders:
        for cpu_amp in amps:
            if args.what in ("update", "all"):
                r = bench_update(encoder, cpu_amp, args.repeats, args.profile, args.device)
                results["update"].append(r)
                print(json.dumps(r))
            if args.what == "population-steps" and cpu_amp == amps[0]:  # uses cpu_amp: auto
                r = bench_population_steps(encoder, args.agents, args.steps, args.device)
                results["population"].append(r)
                print(json.dumps(r))
            if args.what == "population":
                r = bench_population(
                    encoder, args.agents, args.repeats, cpu_amp, args.device, args.batching
                )
                results["population"].append(r)
                print(json.dumps(r))
            if args.what in ("steps", "all"):
                r = bench_steps(encoder, cpu_amp, args.steps, args.device)
                results["steps"].append(r)
                print(json.dumps(r))
        if args.what in ("eval", "all"):
            r = bench_eval(encoder, args.episodes, args.num_envs, args.max_frames)
            results["eval"].append(r)
            print(json.dumps(r))
    summary = {k: v for k, v in results.items() if v}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
