"""The Exploratory dataset (SGI-E): the IDF curiosity agent's first ``steps`` steps, a training run.

The agent (`sgi_lab.exploratory.idf_agent`) acts in N parallel envs, and every transition is
written, as it happens, into a ``TransitionStore`` (`sgi_lab.exploratory.episodes.EpisodeBuffers`:
whole episodes, so frame stacks never cross envs or episodes). The store is built in
``OUT.partial``; the agent is an ordinary run folder inside it, ``OUT.partial/agent/``
(`sgi_lab.runs.folder.RunDir`, kind ``explore``: ``config.yaml``, ``status.json``,
``metrics.jsonl`` with one row per PPO update, and ``checkpoints/`` every ``checkpoint_every``
updates; a step is one env step of one env, as the ``steps`` collected). An interrupted
collection resumes after the store's last finished chunk with the agent's last checkpoint and
freshly reset envs; the finished store keeps ``agent/``.

Both families: an Atari 100k game (its store records the console RAM of every row) or a
MinAtar game, ``minatar/<game>`` (its store has the game's (C, 10, 10) observation spec, the
``minatar`` env protocol with MinAtar's sticky actions and difficulty ramping, and the game's
own state as ``labels``); the agent's networks size themselves from the observation
(`sgi_lab.exploratory.networks.small_convnet`).

Differences from Burda et al., all deliberate: the environment is the house Atari 100k
protocol (no sticky actions either way; 108k-frame cap instead of 18k) or MinAtar's own, and
the networks use PyTorch's default initialisation.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from sgi_lab.config import ExploreConfig
from sgi_lab.data.store import TransitionStore
from sgi_lab.data.store_writer import TransitionStoreWriter
from sgi_lab.envs import (
    canonical_env_game,
    env_protocol,
    is_minatar,
    make_env,
    make_vector_env,
    observation_spec,
)
from sgi_lab.envs.minatar import DIFFICULTY_RAMPING, LABEL_NAMES, STICKY_ACTION_PROB
from sgi_lab.exploratory.episodes import EpisodeBuffers
from sgi_lab.exploratory.idf_agent import KIND, ExploreAgent, Rollout, ppo_update
from sgi_lab.runs.folder import MetricsLogger, RunDir

__all__ = [
    "AGENT_DIR",
    "collect_exploratory",
    "data_params",
    "observation_moments",
]

AGENT_DIR = "agent"
"""The agent's run folder inside the store (``OUT.partial/agent/``, then ``OUT/agent/``)."""
# Settings that do not change what is collected: a resume may change them.
RUNTIME_KEYS = frozenset({"asynchronous", "device", "threads", "checkpoint_every"})


def observation_moments(
    game: str, steps: int, seed: int, **env_kwargs: Any
) -> tuple[np.ndarray, float]:
    """Per-pixel mean (C, H, W) and scalar std of a uniformly random agent's observations.

    As Burda et al.'s ``random_agent_ob_mean_std`` (the std is the mean of per-pixel stds),
    accumulated in float64 sums instead of a list of every observation.
    """

    env = make_env(game, seed=seed, train=False, **env_kwargs)
    try:
        obs, _ = env.reset(seed=seed)
        total = np.zeros(obs.shape, np.float64)
        squares = np.zeros(obs.shape, np.float64)
        for i in range(steps + 1):
            x = obs.astype(np.float64)
            total += x
            squares += x * x
            if i == steps:
                break
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                obs, _ = env.reset()
    finally:
        env.close()
    count = steps + 1
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean**2, 0.0))
    return mean.astype(np.float32), float(std.mean())


def data_params(config: ExploreConfig) -> dict[str, Any]:
    """The config's settings that shape the data (recorded in the manifest; a resume must match)."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in RUNTIME_KEYS}


def collect_exploratory(
    game: str,
    steps: int,
    out: str | os.PathLike,
    *,
    seed: int = 0,
    config: ExploreConfig | None = None,
    resume: bool = True,
    overwrite: bool = False,
    progress: bool = True,
    on_update: Callable[[dict[str, Any]], None] | None = None,
    on_step: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> TransitionStore:
    """The Exploratory dataset: ``steps`` transitions of an IDF curiosity agent, as a store.

    Args:
        game: any accepted spelling of an Atari 100k game, or ``minatar/<game>``.
        steps: transitions to write (the agent's first ``steps`` env steps, over all envs).
        out: store folder; built under ``out.partial`` and renamed into place when complete.
        seed: seeds the envs (env i: ``seed + i``; a resumed run offsets them), the networks and
            the agent's random streams.
        config: agent settings (default: Burda et al.'s, ``ExploreConfig()``).
        resume: continue an interrupted collection found at ``out.partial`` (its agent's last
            checkpoint included); it must have been started with the same game and settings.
        overwrite: replace an existing finished store at ``out``.
        progress: show a tqdm bar (steps/s, intrinsic reward, extrinsic episode return).
        on_update: called with each PPO update's metrics row (``step``: the agent's env steps
            so far, ``update``: the update's number; tests raise KeyboardInterrupt here).
        on_step: called before each env step with the observations (N, C, H, W) and the
            actions (N,) about to be taken (a read-only hook, e.g. for tests).

    Returns:
        The finished store, opened for reading. Its ``agent/`` folder is the agent's finished
        run: final checkpoint and ``metrics.jsonl`` (one row per PPO update).

    Raises:
        UnknownGameError: an unknown game ("did you mean"). MinAtarMissingError: a MinAtar
            game without its package. ValueError: an Atari-only setting for a MinAtar game.
    """

    config = config or ExploreConfig()
    if steps < 1:
        raise ValueError(f"steps must be positive, got {steps}")
    game = canonical_env_game(game)
    _check_game_settings(game, config)
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists (use overwrite to replace it)")
    record = _data_record(game, steps, seed, config)
    protocol = env_protocol(game)
    writer = TransitionStoreWriter.resume_matching(out, game, record, protocol) if resume else None
    run_config = {"game": game, "steps": steps, "seed": seed, **dataclasses.asdict(config)}
    agent_dir = out.with_name(out.name + ".partial") / AGENT_DIR
    run = agent = None
    if writer is not None:
        run, agent = _resume_agent_run(agent_dir, run_config, config, seed)
    env_seed = seed + (len(writer.manifest.chunks) * config.num_envs if writer else 0)
    envs = _make_envs(game, config, env_seed)
    threads = torch.get_num_threads()
    try:
        if config.threads > 0:
            torch.set_num_threads(config.threads)
        num_actions = int(envs.single_action_space.n)
        if agent is None:
            mean, std = observation_moments(
                game, config.ob_norm_steps, seed + 100_000, **_env_kwargs(config, game)
            )
            agent = ExploreAgent(num_actions, config, mean, std, seed)
        if writer is None:
            writer = _create_store(out, game, record, num_actions, config, overwrite)
            run = RunDir.open(agent_dir, KIND, run_config, overwrite=True)
        _train_and_record(agent, envs, writer, steps, run, progress, on_update, on_step, game)
        path = writer.close()  # renames OUT.partial, the agent's finished run inside, to OUT
    finally:
        envs.close()
        torch.set_num_threads(threads)
        if run is not None:
            run.unlock()  # a failure before the run started leaves no lock held
    return TransitionStore(path)


def _data_record(game: str, steps: int, seed: int, config: ExploreConfig) -> dict[str, Any]:
    """What the manifest records and a resumed collection must match; a MinAtar store also
    records difficulty ramping, as the Random collector's do."""
    record = {"steps": steps, "seed": seed, **data_params(config)}
    if is_minatar(game):
        record["difficulty_ramping"] = DIFFICULTY_RAMPING
    return record


def _check_game_settings(game: str, config: ExploreConfig) -> None:
    """Refuse, in one line and before anything is created, an Atari-only setting for a MinAtar
    game; a MinAtar game without its package fails here too, not inside an env's subprocess."""
    if not is_minatar(game):
        return
    default = ExploreConfig().max_episode_frames
    if config.max_episode_frames != default:
        raise ValueError(
            f"max_episode_frames: {config.max_episode_frames} is an Atari setting (raw frames); "
            f"MinAtar game {game!r} caps its episodes itself: leave it at {default}"
        )
    make_env(game).close()  # MinAtarMissingError names the install command


def _env_kwargs(config: ExploreConfig, game: str) -> dict[str, Any]:
    """The config's environment settings, the same for the agent's envs and the observation
    moments (MinAtar: its own episode cap and defaults)."""
    if is_minatar(game):
        return {"full_action_space": config.full_action_space}
    return {
        "full_action_space": config.full_action_space,
        "max_episode_frames": config.max_episode_frames,
    }


def _make_envs(game: str, config: ExploreConfig, env_seed: int) -> Any:
    """The agent's ``num_envs`` parallel envs (env i seeded ``env_seed + i``), recording what
    the store keeps beside the frames: RAM (Atari) or the game's state (MinAtar), the labels of
    `sgi_lab.probes`."""
    record = {"record_labels": True} if is_minatar(game) else {"record_ram": True}
    return make_vector_env(
        game,
        config.num_envs,
        seed=env_seed,
        train=False,
        asynchronous=config.asynchronous,
        **record,
        **_env_kwargs(config, game),
    )


def _resume_agent_run(
    agent_dir: Path, run_config: dict[str, Any], config: ExploreConfig, seed: int
) -> tuple[RunDir, ExploreAgent | None]:
    """The agent run of an interrupted collection, and its agent at the last checkpoint (None
    when it died before the first one)."""
    run = RunDir.open(agent_dir, KIND, run_config, runtime_keys=RUNTIME_KEYS)
    state = run.load_latest(KIND)
    return run, None if state is None else ExploreAgent.from_state(state, config, seed)


def _create_store(
    out: Path,
    game: str,
    record: dict[str, Any],
    num_actions: int,
    config: ExploreConfig,
    overwrite: bool,
) -> TransitionStoreWriter:
    minatar = is_minatar(game)
    return TransitionStoreWriter.create(
        out,
        game=game,
        source="exploratory",
        params=record,
        num_actions=num_actions,
        chunk_size=config.chunk_size,
        overwrite=overwrite,
        # make_env: Atari 100k plays without sticky actions, MinAtar with its own (0.1)
        sticky_action_prob=STICKY_ACTION_PROB if minatar else 0.0,
        ram=not minatar,
        env_protocol=env_protocol(game),
        observation_spec=observation_spec(game),
        label_names=LABEL_NAMES[game.removeprefix("minatar/")] if minatar else None,
    )


def _train_and_record(
    agent: ExploreAgent,
    envs: Any,
    writer: TransitionStoreWriter,
    steps: int,
    run: RunDir,
    progress: bool,
    on_update: Callable[[dict[str, Any]], None] | None,
    on_step: Callable[[np.ndarray, np.ndarray], None] | None,
    game: str,
) -> None:
    """Train the agent while recording its transitions until the store holds ``steps`` rows, as
    the agent's run: metrics, checkpoints, then its final checkpoint and finished status."""
    # The run's step is the agent's env steps (over all envs), as the config's ``steps``.
    step = agent.agent_steps
    run.start(step, update=agent.updates)
    with run, run.metrics_logger(resume_step=step if agent.updates else None) as log:
        _run(agent, envs, writer, steps, run, log, progress, on_update, on_step, game)
        run.save_checkpoint(agent.agent_steps, agent.state_dict(), KIND)
        run.finish(agent.agent_steps, update=agent.updates, rows=steps)


class _EpisodeReturns:
    """The game's raw return of each env's running episode, and the last 100 finished ones."""

    def __init__(self, num_envs: int) -> None:
        self.running = np.zeros(num_envs)
        self.finished: collections.deque[float] = collections.deque(maxlen=100)

    def add(self, rewards: np.ndarray, ended: np.ndarray) -> None:
        self.running += rewards
        self.finished.extend(self.running[ended].tolist())
        self.running[ended] = 0.0

    def mean(self) -> float | None:
        """The mean of the finished returns (None before the first episode ends)."""
        return float(np.mean(self.finished)) if self.finished else None


def _run(
    agent: ExploreAgent,
    envs: Any,
    writer: TransitionStoreWriter,
    steps: int,
    run: RunDir,
    log: MetricsLogger,
    progress: bool,
    on_update: Callable[[dict[str, Any]], None] | None,
    on_step: Callable[[np.ndarray, np.ndarray], None] | None,
    game: str,
) -> None:
    """Alternate rollouts (every step recorded) and PPO updates until the store holds ``steps``
    rows; unfinished episodes are then written truncated."""
    cfg = agent.config
    n, horizon = cfg.num_envs, cfg.rollout_steps
    buffers = EpisodeBuffers(n, writer, cfg.max_buffered_steps)
    rollout = Rollout(
        obs=np.zeros((horizon + 1, n, *envs.single_observation_space.shape), np.uint8),
        actions=np.zeros((horizon, n), np.int64),
        log_probs=np.zeros((horizon, n), np.float32),
        values=np.zeros((horizon, n), np.float32),
        last_value=np.zeros(n, np.float32),
        game_rewards=np.zeros((horizon, n), np.float32),
    )
    returns = _EpisodeReturns(n)
    bar = tqdm(
        total=steps,
        initial=writer.num_rows,
        disable=not progress,
        desc=f"explore {game}",
        unit="step",
        smoothing=0.05,
    )
    obs, info = envs.reset()
    last_time, last_steps = time.perf_counter(), agent.agent_steps
    try:
        while True:
            obs, info, full = _play_rollout(
                agent, envs, obs, info, rollout, buffers, returns, steps, bar, on_step
            )
            if not full:
                break
            metrics = ppo_update(agent, rollout._replace(last_value=agent.value(obs)))
            now = time.perf_counter()
            metrics.update(
                {
                    "rows": writer.num_rows,
                    "charts/sps": (agent.agent_steps - last_steps) / max(now - last_time, 1e-9),
                    "extrinsic/episode_return": returns.mean(),
                    "intrinsic/rollout_return": float(metrics["intrinsic/reward"] * horizon),
                }
            )
            last_time, last_steps = now, agent.agent_steps
            _record_update(agent, metrics, run, log, bar, on_update)
        # Unfinished episodes are written truncated, up to exactly ``steps`` rows.
        for i in range(n):
            buffers.write(i, limit=max(steps - writer.num_rows, 0))
    finally:
        bar.close()


def _play_rollout(
    agent: ExploreAgent,
    envs: Any,
    obs: np.ndarray,
    info: dict[str, Any],
    rollout: Rollout,
    buffers: EpisodeBuffers,
    returns: _EpisodeReturns,
    steps: int,
    bar: Any,
    on_step: Callable[[np.ndarray, np.ndarray], None] | None,
) -> tuple[np.ndarray, dict[str, Any], bool]:
    """Act for one rollout of ``rollout_steps`` steps, filling ``rollout``'s arrays in place and
    recording every transition; stops early once the store would hold ``steps`` rows.

    Returns:
        The next observations and info, and whether the rollout is full (False: stopped early,
        nothing left to learn from).
    """
    cfg = agent.config
    n = cfg.num_envs
    spec = buffers.writer.manifest.observation_spec
    for t in range(cfg.rollout_steps):
        rollout.obs[t] = obs
        action, logp, value = agent.act(obs)
        if on_step is not None:
            on_step(obs, action)
        # The RAM or game state behind obs (a finished env's reset info is the top level).
        ram, labels = _state_rows(info, buffers.writer)
        # A store row is the newest frame of each observation's stack.
        newest = obs.reshape(n, spec.frames, *spec.frame_shape)[:, -1]
        next_obs, _, terminated, truncated, info = envs.step(action)
        raw = np.asarray(info["raw_reward"], np.float32)
        ended = np.logical_or(terminated, truncated)
        terminal = np.asarray(terminated, bool)
        if cfg.terminal_on_life_loss:
            terminal = terminal | np.asarray(info["life_loss"], bool)
        for i in range(n):
            buffers.add(
                i,
                newest[i].copy(),
                int(action[i]),
                float(raw[i]),
                bool(terminal[i]),
                None if ram is None else ram[i].copy(),
                None if labels is None else labels[i],
            )
            if ended[i]:
                buffers.write(i)
        returns.add(raw, ended)
        rollout.actions[t], rollout.log_probs[t], rollout.values[t] = action, logp, value
        rollout.game_rewards[t] = raw
        obs = next_obs
        agent.agent_steps += n
        bar.update(min(n, steps - bar.n))
        if buffers.writer.num_rows + buffers.pending >= steps:
            return obs, info, False
    rollout.obs[cfg.rollout_steps] = obs
    return obs, info, True


def _state_rows(
    info: dict[str, Any], writer: TransitionStoreWriter
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Each env's RAM (N, 128) uint8 and game state (N, L) int16 (in the store's
    ``label_names`` order) from a vector step's info; None for a field the store lacks."""
    ram = np.asarray(info["ram"], np.uint8) if writer.has_ram else None
    names = writer.manifest.label_names
    labels = None
    if writer.has_labels and names:
        labels = np.stack([np.asarray(info["labels"][k], np.int16) for k in names], axis=1)
    return ram, labels


def _record_update(
    agent: ExploreAgent,
    metrics: dict[str, Any],
    run: RunDir,
    log: MetricsLogger,
    bar: Any,
    on_update: Callable[[dict[str, Any]], None] | None,
) -> None:
    """Log an update's metrics, checkpoint the agent every ``checkpoint_every`` updates, show
    the returns on the bar and call ``on_update`` with the logged row."""
    row = log.log(agent.agent_steps, update=agent.updates, **metrics)
    if agent.updates % agent.config.checkpoint_every == 0:
        run.save_checkpoint(agent.agent_steps, agent.state_dict(), KIND)
        run.set_status("running", step=agent.agent_steps, update=agent.updates)
    ext = metrics["extrinsic/episode_return"]
    bar.set_postfix(
        int=f"{metrics['intrinsic/rollout_return']:.3g}",
        ext="-" if ext is None else f"{ext:.1f}",
        refresh=False,
    )
    if on_update is not None:
        on_update(row)
