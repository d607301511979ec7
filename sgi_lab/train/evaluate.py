"""Evaluation on Atari 100k: epsilon-greedy on noise-free Q values, episodes of whole games.

Protocol (SPR/SGI, DESIGN.md): 100 episodes at the end of training, epsilon 0.001, noisy-net noise
off, batch norm with running statistics (eval mode), **no life-loss terminals** (the env is built
with ``train=False``, so an episode is a whole game) and raw, unclipped rewards, capped at
108,000 frames (27,000 agent steps) per episode. With ``env_protocol="rlpyt"`` the env is the
authors' in its evaluation setting (``episodic_lives=False``: life losses neither terminal nor
emptying the frame stack; the cap ends an episode after 27,001 steps).

The N environments of every agent are stepped together (an `sgi_lab.envs.pool.EnvPool`, in
worker processes where there are cores to spare: `eval_workers`) and their observations go
through the network in one batched forward, read where the pool keeps them (the workers'
shared-memory segment): no frame is pickled through a pipe or copied per step. Each environment gets a fixed quota of episodes
(``episodes`` split as evenly as possible); an environment that has played its quota is not
stepped any more. With fixed quotas the returned episodes do not depend on how long they are,
whereas "the first ``episodes`` episodes to finish" over-samples short (usually bad) games. The
scores equal those of gymnasium's vector envs (same seeds, same-step resets), which this module
used before.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from sgi_lab.base.files import atomic_write_text
from sgi_lab.config import MINATAR_OPTIONS
from sgi_lab.envs import canonical_env_game, is_minatar
from sgi_lab.envs import env_protocol as family_protocol
from sgi_lab.envs.atari import MAX_EPISODE_FRAMES
from sgi_lab.envs.pool import EnvPool, spread
from sgi_lab.metrics import normalization_name, normalized_score
from sgi_lab.nets import SGIModel
from sgi_lab.runs.checkpoints import CheckpointError, load_checkpoint
from sgi_lab.runs.folder import RunDir
from sgi_lab.runs.status import require_finished
from sgi_lab.runs.stopping import Deadline, RunStopped
from sgi_lab.runtime.device import resolve_device, use_bf16

__all__ = [
    "Policy",
    "episode_quotas",
    "evaluate",
    "evaluate_run",
    "load_run_model",
    "play_episodes",
]


def episode_quotas(episodes: int, num_envs: int) -> np.ndarray:
    """Episodes each env plays: ``episodes`` split as evenly as possible, (num_envs,) int.

    >>> episode_quotas(10, 4).tolist()
    [3, 3, 2, 2]
    """
    if episodes < 1 or num_envs < 1:
        raise ValueError(f"episodes and num_envs must be >= 1, got {episodes}, {num_envs}")
    return np.array([episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)])


Policy = Callable[[np.ndarray], np.ndarray]
"""Greedy actions of N agents: (N, E, *stacked_shape) uint8 observations ((4, 84, 84) for Atari) -> (N, E) int64."""


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
    env_protocol: str = "dopamine",
    env_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Play ``episodes`` whole games with an epsilon-greedy, noise-free policy; raw scores.

    The model's train/eval mode and noise switch are restored afterwards. One agent of
    `play_episodes` (which a population's evaluation uses for all its agents at once).

    Args:
        model: the agent (any device).
        game: Atari 100k game, any spelling, or a MinAtar one (``minatar/breakout``;
            `sgi_lab.envs.canonical_env_game`).
        episodes: completed episodes to return.
        eps: evaluation epsilon (0.001).
        num_envs: environments stepped together (at most ``episodes`` are used).
        seed: env i is seeded ``seed + i``; the epsilon draws use ``seed`` too.
        device: where observations go; defaults to the model's device.
        max_frames: raw-frame cap per episode (108,000; a multiple of 4), None for none;
            Atari's only (a MinAtar game ends its episodes itself).
        progress: tqdm bar over finished episodes.
        asynchronous: step the environments in worker processes (`eval_workers`); default:
            with at least 4 CPUs.
        amp: bf16 autocast; default on CUDA.
        env_protocol: the Atari env, `make_env`'s ``preprocessing``: ``"dopamine"`` or
            ``"rlpyt"`` (the authors' env; its cap ends an episode one step later); a MinAtar
            game plays (and records) ``"minatar"``.
        env_options: more `sgi_lab.envs.make_env` options of the game's family (a MinAtar
            game's ``sticky_action_prob``, ``difficulty_ramping``, ``frames``, ``channels``:
            `sgi_lab.config.FinetuneConfig.env_options`), recorded in the result.

    Returns:
        ``{"game", "episodes", "scores" (raw return of each episode), "lengths" (agent steps),
        "mean", "std", "median", "min", "max", "hns" (the normalised score of the mean, by the
        game's family: human-normalised for Atari, the MinAtar score for MinAtar; kept under
        its old key so every reader of it reads either), "normalized_score" (the same),
        "normalization" (its name: ``"HNS"`` or ``"MinAtar score"``), "eps", "num_envs",
        "max_frames", "env_protocol", "seconds", "episodes_per_s", "steps_per_s"}``.

    Raises:
        UnknownGameError: unknown game (lists the valid ones).
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    amp = (device.type == "cuda") if amp is None else amp
    with _noise_free(model):
        return play_episodes(
            _model_policy(model, device, amp),
            [game],
            [model.num_actions],
            episodes=episodes,
            eps=eps,
            num_envs=num_envs,
            seeds=[seed],
            max_frames=max_frames,
            progress=progress,
            asynchronous=asynchronous,
            env_protocol=env_protocol,
            env_options=env_options,
        )[0]


@contextlib.contextmanager
def _noise_free(model: SGIModel) -> Iterator[None]:
    """``model`` in eval mode with its noisy-net noise off; its mode and noise switches as they
    were afterwards."""
    was_training = model.training
    noise_was = [layer.noise_enabled for layer in model.noisy_layers()]
    model.eval()
    model.set_noise(False)
    try:
        yield
    finally:
        model.train(was_training)
        for layer, flag in zip(model.noisy_layers(), noise_was):
            layer.noise_enabled = flag


def _model_policy(model: SGIModel, device: torch.device, amp: bool) -> Policy:
    """One model's greedy actions as a `Policy` of one agent (bf16 autocast with ``amp``)."""

    @torch.no_grad()
    def policy(obs: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(obs[0]).to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            q = model.q_values(model.encode(x))
        return q.argmax(-1).cpu().numpy()[None]

    return policy


def eval_workers(num_envs: int, asynchronous: bool | None = None) -> int:
    """Worker processes for evaluating ``num_envs`` environments: none on fewer than 4 CPUs
    (on 2 cores stepping the emulators in this process beats workers competing with the
    network's threads, measured 1.5x), else one per spare core (all but one), at most one per
    environment. ``asynchronous`` True/False forces workers (at least one) or none."""
    cpus = os.cpu_count() or 1
    if asynchronous is None:
        asynchronous = cpus >= 4 and num_envs > 1
    return min(num_envs, max(1, cpus - 1)) if asynchronous else 0


def _greedy_for_active(
    policy: Policy, obs: np.ndarray, active: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """Greedy actions (N, E) where ``active``: the policy sees each agent's active environments
    only, padded to the agent with most (its forward batch shrinks as environments play their
    quota; with batch norm on running statistics an observation's Q values do not depend on
    the others in its batch). Entries of inactive environments are arbitrary."""
    k = int(active.sum(1).max())
    if k == active.shape[1]:
        return policy(obs)
    order = np.argsort(~active, axis=1, kind="stable")[:, :k]  # active environments first
    greedy = np.zeros(active.shape, np.int64)
    greedy[rows, order] = policy(obs[rows, order])
    return greedy


def play_episodes(
    policy: Policy,
    games: Sequence[str],
    num_actions: Sequence[int],
    episodes: int = 100,
    eps: float = 0.001,
    num_envs: int = 8,
    seeds: Sequence[int] = (0,),
    max_frames: int | None = MAX_EPISODE_FRAMES,
    progress: bool = True,
    asynchronous: bool | None = None,
    stop: Deadline | None = None,
    env_protocol: str = "dopamine",
    env_options: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Evaluate N agents at once: each plays ``episodes`` whole games of its own game in its own
    ``num_envs`` environments, and one call of ``policy`` gives every agent's greedy actions for
    all its environments (one batched forward for a population).

    Each agent draws its epsilon decisions and random actions from its own generator (seeded
    with its seed), exactly as a lone agent would, so an agent's scores do not depend on the
    others. Each environment has a fixed quota of episodes (module docstring); finished ones
    keep stepping but are ignored.

    Args:
        policy: greedy actions of all agents (`Policy`).
        games: per-agent game.
        num_actions: per-agent action count (random actions are drawn below it).
        episodes, eps, num_envs, max_frames, progress, asynchronous, env_protocol,
            env_options: as in `evaluate`.
        seeds: per-agent seed: env i of an agent is seeded ``seed + i``.
        stop: a `sgi_lab.runs.stopping.Deadline`; only a stop request (not its time limit) ends the
            evaluation early, with `RunStopped`: a partial evaluation would favour short
            episodes, so none is kept.

    Returns:
        One result dict per agent (see `evaluate`).
    """
    games = [canonical_env_game(g) for g in games]
    if len({is_minatar(g) for g in games}) > 1:
        raise ValueError(f"games: Atari and MinAtar games evaluated together: {games}")
    n = len(games)
    num_envs = min(num_envs, episodes)
    quotas = episode_quotas(episodes, num_envs)
    env_options = dict(env_options or {})
    pool = _evaluation_pool(
        games, seeds, num_envs, asynchronous, max_frames, env_protocol, env_options
    )
    rngs = [np.random.default_rng(seed) for seed in seeds]
    tally = _Episodes.start(n, num_envs)
    label = games[0] if n == 1 else f"{n} agents"
    bar = tqdm(total=episodes * n, desc=f"evaluate {label}", disable=not progress, leave=True)
    start = time.perf_counter()
    try:
        _play_until_quotas(policy, pool, tally, quotas, rngs, num_actions, eps, bar, stop)
    finally:
        bar.close()
        pool.close()
    seconds = time.perf_counter() - start
    settings = {
        "eps": eps,
        "num_envs": num_envs,
        "max_frames": max_frames,
        "env_protocol": env_protocol,
        **({"env_options": env_options} if env_options else {}),
    }
    return [
        _agent_result(
            game,
            seeds[i],
            tally.scores[i],
            tally.lengths[i],
            int(tally.total_steps[i]),
            seconds,
            settings,
        )
        for i, game in enumerate(games)
    ]


def _play_until_quotas(
    policy: Policy,
    pool: EnvPool,
    tally: _Episodes,
    quotas: np.ndarray,
    rngs: Sequence[np.random.Generator],
    num_actions: Sequence[int],
    eps: float,
    bar: tqdm,
    stop: Deadline | None,
) -> None:
    """Step every environment that has not played its quota until all have, counting the
    episodes in ``tally``; a stop request raises `RunStopped`."""
    n, num_envs = tally.done.shape
    pool.reset()
    while (tally.done < quotas).any():
        if stop is not None and stop.requested:
            raise RunStopped(None, stop.requested)
        active = tally.done < quotas
        # Every environment's newest stack where the pool keeps it (with workers, the shared
        # segment they write), seen per agent: no frame is copied or pickled per step.
        newest = pool.observations
        obs = newest.reshape(n, num_envs, *newest.shape[1:])
        actions = _epsilon_greedy(policy, obs, active, rngs, num_actions, eps)
        # Environments that played their quota are not stepped any more.
        flat = active.reshape(-1)
        stepped = pool.step_active(actions.reshape(-1), flat, observations=False)
        rewards, terminated, truncated = (
            spread(part, flat).reshape(n, num_envs) for part in stepped[1:4]
        )
        bar.update(tally.add_step(rewards, terminated | truncated, active))
        bar.set_postfix(mean=f"{np.mean([np.mean(s) for s in tally.scores if s] or [0]):.1f}")


def _evaluation_pool(
    games: Sequence[str],
    seeds: Sequence[int],
    num_envs: int,
    asynchronous: bool | None,
    max_frames: int | None,
    env_protocol: str,
    env_options: dict[str, Any],
) -> EnvPool:
    """``num_envs`` evaluation environments per agent (whole games, ``train=False``), in
    `eval_workers` processes: environment j of agent i is row ``i * num_envs + j``, seeded
    ``seeds[i] + j`` (as a vector env of that agent would be)."""
    # The raw-frame cap is Atari's option; a MinAtar game ends its episodes itself.
    capped = {} if is_minatar(games[0]) else {"max_episode_frames": max_frames}
    return EnvPool(
        [game for game in games for _ in range(num_envs)],
        [seed + j for seed in seeds for j in range(num_envs)],
        train=False,
        workers=eval_workers(len(games) * num_envs, asynchronous),
        preprocessing=family_protocol(games[0], env_protocol),
        **capped,
        **env_options,
    )


def _epsilon_greedy(
    policy: Policy,
    obs: np.ndarray,
    active: np.ndarray,
    rngs: Sequence[np.random.Generator],
    num_actions: Sequence[int],
    eps: float,
) -> np.ndarray:
    """Actions (N, E) of the active environments, epsilon-greedy: agent i draws, from its own
    generator and in this order, one uniform per active environment (random when below
    ``eps``) and one random action below ``num_actions[i]`` each, so its draws do not depend on
    the other agents. The policy is asked only when some action is greedy; entries of inactive
    environments are 0."""
    n = active.shape[0]
    actions = np.zeros(active.shape, np.int64)
    random, drawn = [], []
    for i in range(n):
        k = int(active[i].sum())
        random.append(rngs[i].random(k) < eps)
        drawn.append(rngs[i].integers(0, num_actions[i], size=k))
    if not all(r.all() for r in random):
        greedy = _greedy_for_active(policy, obs, active, np.arange(n)[:, None])
    for i in range(n):
        if not active[i].any():
            continue
        chosen = drawn[i] if random[i].all() else greedy[i][active[i]]
        actions[i, active[i]] = np.where(random[i], drawn[i], chosen)
    return actions


@dataclass
class _Episodes:
    """What N agents' evaluation has played so far: finished episodes' scores and lengths per
    agent, and per environment (N, E) the episodes finished and the running one's return and
    length."""

    scores: list[list[float]]
    lengths: list[list[int]]
    done: np.ndarray
    returns: np.ndarray
    steps: np.ndarray
    total_steps: np.ndarray
    """(N,) agent steps of the active environments, finished episodes or not."""

    @classmethod
    def start(cls, n: int, num_envs: int) -> _Episodes:
        return cls(
            scores=[[] for _ in range(n)],
            lengths=[[] for _ in range(n)],
            done=np.zeros((n, num_envs), np.int64),
            returns=np.zeros((n, num_envs)),
            steps=np.zeros((n, num_envs), np.int64),
            total_steps=np.zeros(n, np.int64),
        )

    def add_step(self, rewards: np.ndarray, ended: np.ndarray, active: np.ndarray) -> int:
        """Count one step of the ``active`` environments (N, E): add the raw ``rewards`` to
        the running returns and close the episodes that ``ended`` (terminated or truncated).
        Returns the number of episodes closed."""
        closed = 0
        for i in range(len(self.scores)):
            self.returns[i] += np.where(active[i], rewards[i], 0.0)
            self.steps[i] += active[i]
            self.total_steps[i] += int(active[i].sum())
            for j in np.flatnonzero(ended[i] & active[i]):
                self.scores[i].append(float(self.returns[i, j]))
                self.lengths[i].append(int(self.steps[i, j]))
                self.done[i, j] += 1
                self.returns[i, j], self.steps[i, j] = 0.0, 0
                closed += 1
        return closed


def _agent_result(
    game: str,
    seed: int,
    scores: list[float],
    lengths: list[int],
    total_steps: int,
    seconds: float,
    settings: dict[str, Any],
) -> dict[str, Any]:
    """One agent's evaluation dict (see `evaluate`): its episodes' statistics, the HNS of the
    mean, the ``settings`` (eps, num_envs, max_frames, env_protocol) and the throughput of its
    ``total_steps`` agent steps in ``seconds``."""
    mean = float(np.mean(scores))
    normalized = normalized_score(game, mean)
    settings = {**settings, "env_protocol": family_protocol(game, settings["env_protocol"])}
    if is_minatar(game):
        settings["max_frames"] = None  # not applied (`_evaluation_pool`)
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
        "hns": normalized,
        "normalized_score": normalized,
        "normalization": normalization_name(game),
        **settings,
        "seed": seed,
        "seconds": seconds,
        "episodes_per_s": len(scores) / seconds if seconds > 0 else math.inf,
        "steps_per_s": total_steps / seconds if seconds > 0 else math.inf,
    }


def _recorded_env_options(game: str, config: dict[str, Any]) -> dict[str, Any]:
    """The env options a finetuning run trained with (its recorded config): a MinAtar game's
    (`sgi_lab.config.MINATAR_OPTIONS`), none for Atari."""
    if not is_minatar(game):
        return {}
    return {key: config[key] for key in MINATAR_OPTIONS if key in config}


def _check_run_folder_path(run_dir: str | Path) -> None:
    """A finetuning run folder was named: say what the path is when it is not one."""
    path = Path(run_dir)
    if path.is_file():
        raise FileNotFoundError(
            f"{path}: a file, expected a finetuning run folder (the folder holding model.pt, "
            f"e.g. {path.parent})"
        )
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such finetuning run folder")


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
    _check_run_folder_path(run_dir)
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

    _check_run_folder_path(run_dir)
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
            env_protocol=config.get("env_protocol", "dopamine"),
            env_options=_recorded_env_options(info["game"] or config["game"], config),
        )
    finally:
        torch.set_num_threads(threads)
    result["step"] = info["step"]
    result["run_finished"] = finished
    atomic_write_text(run.path / "eval.json", json.dumps(result, indent=2))
    return result


def _amp(config: dict[str, Any], device: torch.device) -> bool:
    return use_bf16(device, config.get("amp", True), config.get("cpu_amp", False))
