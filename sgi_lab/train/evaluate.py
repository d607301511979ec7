"""Evaluation on Atari 100k: epsilon-greedy on noise-free Q values, episodes of whole games.

Protocol (SPR/SGI, DESIGN.md): 100 episodes at the end of training, epsilon 0.001, noisy-net noise
off, batch norm with running statistics (eval mode), **no life-loss terminals** (the env is built
with ``train=False``, so an episode is a whole game) and raw, unclipped rewards, capped at
108,000 frames (27,000 agent steps) per episode.

The N environments of `sgi_lab.envs.make_vector_env` are stepped together and their
observations go through the network in one batched forward. Each environment gets a fixed quota
of episodes (``episodes`` split as evenly as possible); an environment that has played its quota
keeps stepping (a vector env steps all its members) but is ignored. With fixed quotas the
returned episodes do not depend on how long they are, whereas "the first ``episodes`` episodes
to finish" over-samples short (usually bad) games.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from sgi_lab.envs import canonical_game, make_vector_env
from sgi_lab.envs.atari import MAX_EPISODE_FRAMES
from sgi_lab.metrics import human_normalized_score
from sgi_lab.nets import SGIModel
from sgi_lab.nets.runtime import use_bf16
from sgi_lab.runs import CheckpointError, RunDir, atomic_write_text, load_checkpoint

__all__ = [
    "episode_quotas",
    "evaluate",
    "evaluate_run",
    "greedy_actions",
    "load_run_model",
]


def episode_quotas(episodes: int, num_envs: int) -> np.ndarray:
    """Episodes each env plays: ``episodes`` split as evenly as possible, (num_envs,) int.

    >>> episode_quotas(10, 4).tolist()
    [3, 3, 2, 2]
    """
    if episodes < 1 or num_envs < 1:
        raise ValueError(f"episodes and num_envs must be >= 1, got {episodes}, {num_envs}")
    return np.array([episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)])


@torch.no_grad()
def greedy_actions(
    model: SGIModel,
    obs: torch.Tensor,
    eps: float,
    rng: np.random.Generator,
    amp: bool = False,
) -> np.ndarray:
    """Epsilon-greedy actions from the model's expected Q values, (N,) int64.

    Uses the model as it is set (call ``model.eval()`` and ``model.set_noise(False)`` first for
    evaluation); the forward is skipped when every action comes out random.

    Args:
        model: the agent.
        obs: (N, 4, 84, 84) uint8 observations on the model's device.
        eps: probability of a uniformly random action, per env.
        rng: source of the epsilon draws and random actions.
        amp: bf16 autocast (CUDA only).
    """
    n = obs.shape[0]
    random = rng.random(n) < eps
    actions = rng.integers(0, model.num_actions, size=n)
    if random.all():
        return actions
    with torch.autocast(obs.device.type, dtype=torch.bfloat16, enabled=amp):
        q = model.q_values(model.encode(obs))
    greedy = q.argmax(-1).cpu().numpy()
    return np.where(random, actions, greedy)


def evaluate(
    model: SGIModel,
    game: str,
    episodes: int = 100,
    eps: float = 0.001,
    num_envs: int = 8,
    seed: int = 0,
    device: str | torch.device | None = None,
    max_frames: int | None = MAX_EPISODE_FRAMES,
    progress: bool = True,
    asynchronous: bool | None = None,
    amp: bool | None = None,
) -> dict[str, Any]:
    """Play ``episodes`` whole games with an epsilon-greedy, noise-free policy; raw scores.

    The model's train/eval mode and noise switch are restored afterwards.

    Args:
        model: the agent (any device).
        game: Atari 100k game, any spelling (`sgi_lab.envs.canonical_game`).
        episodes: completed episodes to return.
        eps: evaluation epsilon (0.001).
        num_envs: environments stepped together (at most ``episodes`` are used).
        seed: env i is seeded ``seed + i``; the epsilon draws use ``seed`` too.
        device: where observations go; defaults to the model's device.
        max_frames: raw-frame cap per episode (108,000; a multiple of 4), None for none.
        progress: tqdm bar over finished episodes.
        asynchronous: one subprocess per env; default with several envs and at least 4 CPUs.
        amp: bf16 autocast; default on CUDA.

    Returns:
        ``{"game", "episodes", "scores" (raw return of each episode), "lengths" (agent steps),
        "mean", "std", "median", "min", "max", "hns" (of the mean), "eps", "num_envs",
        "max_frames", "seconds", "episodes_per_s", "steps_per_s"}``.

    Raises:
        UnknownGameError: unknown game (lists the valid ones).
    """
    game = canonical_game(game)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    num_envs = min(num_envs, episodes)
    quotas = episode_quotas(episodes, num_envs)
    amp = (device.type == "cuda") if amp is None else amp
    if asynchronous is None:
        # Worker processes only pay with cores to spare: on 2 cores, stepping 8 emulators in this
        # process beats 8 workers competing with the network's threads (measured 1.5x).
        asynchronous = num_envs > 1 and (os.cpu_count() or 1) >= 4
    context = "spawn" if torch.cuda.is_initialized() else None
    envs = make_vector_env(
        game,
        num_envs,
        seed=seed,
        train=False,
        asynchronous=asynchronous,
        context=context if asynchronous else None,
        max_episode_frames=max_frames,
    )
    rng = np.random.default_rng(seed)
    was_training = model.training
    noise_was = [layer.noise_enabled for layer in model.noisy_layers()]
    model.eval()
    model.set_noise(False)
    scores: list[float] = []
    lengths: list[int] = []
    done = np.zeros(num_envs, np.int64)  # episodes finished per env
    returns = np.zeros(num_envs)
    steps = np.zeros(num_envs, np.int64)
    total_steps = 0
    bar = tqdm(total=episodes, desc=f"evaluate {game}", disable=not progress, leave=False)
    start = time.perf_counter()
    try:
        obs, _ = envs.reset()
        while (done < quotas).any():
            active = done < quotas
            actions = np.zeros(num_envs, np.int64)
            obs_t = torch.from_numpy(obs[active]).to(device, non_blocking=True)
            actions[active] = greedy_actions(model, obs_t, eps, rng, amp)
            obs, rewards, terminated, truncated, info = envs.step(actions)
            returns += np.where(active, rewards, 0.0)
            steps += active
            total_steps += int(active.sum())
            for i in np.flatnonzero((terminated | truncated) & active):
                scores.append(float(returns[i]))
                lengths.append(int(steps[i]))
                done[i] += 1
                returns[i], steps[i] = 0.0, 0
                bar.update(1)
                bar.set_postfix(mean=f"{np.mean(scores):.1f}")
    finally:
        bar.close()
        envs.close()
        model.train(was_training)
        for layer, flag in zip(model.noisy_layers(), noise_was):
            layer.noise_enabled = flag
    seconds = time.perf_counter() - start
    mean = float(np.mean(scores))
    return {
        "game": game,
        "episodes": len(scores),
        "scores": scores,
        "lengths": lengths,
        "mean": mean,
        "std": float(np.std(scores)),
        "median": float(np.median(scores)),
        "min": float(np.min(scores)),
        "max": float(np.max(scores)),
        "hns": human_normalized_score(game, mean),
        "eps": eps,
        "num_envs": num_envs,
        "max_frames": max_frames,
        "seed": seed,
        "seconds": seconds,
        "episodes_per_s": len(scores) / seconds if seconds > 0 else math.inf,
        "steps_per_s": total_steps / seconds if seconds > 0 else math.inf,
    }


def load_run_model(
    run_dir: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[SGIModel, dict[str, Any]]:
    """The final model of a finetuning run: ``RUN/model.pt``, else its latest checkpoint.

    Returns:
        (model in eval mode, the payload without its tensors' owner: ``step``, ``config``,
        ``model_args``, ``game``).

    Raises:
        FileNotFoundError: no such folder.
        CheckpointError: neither file exists, or the file is truncated or not ours.
    """
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"{run_dir}: run folder not found")
    run = RunDir(run_dir)
    path = run.path / "model.pt"
    if path.exists():
        payload = load_checkpoint(path, map_location, kind="finetuned_model")
    else:
        payload = run.load_latest("finetune", map_location)
        if payload is None:
            raise CheckpointError(f"{run.path}: no model.pt and no checkpoint to evaluate")
    model = SGIModel(**payload["model_args"])
    model.load_state_dict(payload["model"])
    model.to(map_location).eval()
    info = {k: payload.get(k) for k in ("step", "config", "model_args", "game")}
    return model, info


def evaluate_run(
    run_dir: str | Path,
    episodes: int | None = None,
    device: str | None = None,
    progress: bool = True,
    num_envs: int | None = None,
    allow_unfinished: bool = False,
) -> dict[str, Any]:
    """Evaluate a finetuning run's final model with its config and write ``RUN/eval.json``.

    Args:
        run_dir: the run folder.
        episodes: override the config's ``eval_episodes``.
        device: override the config's device (``"auto"``: CUDA when present).
        progress: tqdm bar.
        num_envs: override the config's ``eval_envs``.
        allow_unfinished: evaluate a run that never finished (its latest checkpoint); the
            result then says ``"run_finished": false`` and reports mark it.

    Returns:
        The evaluation dict of `evaluate` plus ``step`` (training steps of the model) and
        ``run_finished``.

    Raises:
        UnfinishedRunError: the run never finished and ``allow_unfinished`` is false.
    """
    from sgi_lab.runs import require_finished, resolve_device

    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"{run_dir}: run folder not found")
    finished = require_finished(run_dir, "evaluate", allow_unfinished)
    model, info = load_run_model(run_dir)
    run = RunDir(run_dir)
    config = info["config"] or {}
    dev = resolve_device(device or config.get("device", "auto"))
    model.to(dev)
    if config.get("channels_last", False):
        model.channels_last = True
        model.to(memory_format=torch.channels_last)
    threads = torch.get_num_threads()
    if config.get("threads", 0) > 0:
        torch.set_num_threads(config["threads"])
    try:
        result = evaluate(
            model,
            info["game"] or config["game"],
            episodes=episodes or config.get("eval_episodes", 100),
            eps=config.get("eval_eps", 0.001),
            num_envs=num_envs or config.get("eval_envs", 8),
            seed=int(config.get("seed", 0)) + 10_000,
            device=dev,
            max_frames=config.get("eval_max_frames", MAX_EPISODE_FRAMES),
            progress=progress,
            amp=_amp(config, dev),
        )
    finally:
        torch.set_num_threads(threads)
    result["step"] = info["step"]
    result["run_finished"] = finished
    atomic_write_text(run.path / "eval.json", json.dumps(result, indent=2))
    return result


def _amp(config: dict[str, Any], device: torch.device) -> bool:
    return use_bf16(device, config.get("amp", True), config.get("cpu_amp", False))
